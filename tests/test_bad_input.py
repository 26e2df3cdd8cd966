"""Every public function with its bad inputs and the error each must give: one table, run in ``make test``.

The public surface is read from the code: every callable in ``ilab.__all__``, ``ilab.patching``,
``ilab.steering``, ``ilab.features``, ``ilab.metrics`` and ``ilab.widgets`` (classes are their
constructors), every method of those classes (and of :class:`~interplab.Model`) that takes an
argument. :func:`test_every_public_function_has_a_row` fails for a name that has neither a row in
:data:`ROWS` nor an entry in :data:`EXEMPT` with its reason, so a new function cannot ship without
its row. Each row calls its function with one bad input on tiny models and checks the exception
type and that the message names the bad value or what is valid.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from interplab.core.checks import OutOfRangeError
from interplab.core.memory.budget import MemoryBudgetError
from interplab.core.model.model import Model
from interplab.core.storage.readers import FileError

import interplab as ilab
from tests.tiny import TEXTS, tiny_model

NAMESPACES = {"ilab": ilab, "ilab.patching": ilab.patching, "ilab.steering": ilab.steering,
              "ilab.features": ilab.features, "ilab.metrics": ilab.metrics, "ilab.widgets": ilab.widgets,
              "ilab.jobs": ilab.jobs, "ilab.matching": ilab.matching, "ilab.probes": ilab.probes,
              "ilab.das": ilab.das, "ilab.circuits": ilab.circuits, "ilab.evals": ilab.evals}  # fmt: skip
SITE = "blocks.1.hook_resid_post"


def public_callables() -> dict[str, Any]:
    """Qualified name -> the function or class it names (aliases of one object all appear)."""
    out: dict[str, Any] = {}
    classes: dict[type, str] = {Model: "Model"}
    for ns_name, ns in NAMESPACES.items():
        for name in ns.__all__:
            obj = getattr(ns, name)
            if inspect.ismodule(obj) or not callable(obj) or getattr(obj, "__module__", "").startswith("typing"):
                continue
            out[f"{ns_name}.{name}"] = obj
            if inspect.isclass(obj):
                classes.setdefault(obj, f"{ns_name}.{name}")
    for cls, qual in classes.items():
        for name in dir(cls):
            if name.startswith("_"):
                continue
            owner = next((k for k in cls.__mro__ if name in vars(k)), None)
            if owner is None or not (owner.__module__ or "").startswith("interplab"):
                continue  # inherited from torch, anywidget, traitlets...
            raw = inspect.getattr_static(cls, name)
            if isinstance(raw, property) or not callable(getattr(cls, name)):
                continue
            try:
                params = [p for p in inspect.signature(getattr(cls, name)).parameters if p not in ("self", "cls")]
            except (TypeError, ValueError):
                continue
            if params:  # a method without arguments has no bad input
                out[f"{qual}.{name}"] = _function(getattr(cls, name))
    return out


def _function(obj: Any) -> Any:
    return getattr(obj, "__func__", obj)


# ------------------------------------------------------------------------ context
@dataclass
class Ctx:
    """What the rows call into: tiny models, an SAE, a store, results and widgets, built once."""

    tmp: Path
    model: Model
    sae: Any
    acts: Any
    store: Any
    data: Any
    result: Any
    pairs: Any
    vec: Any
    heatmap: Any
    dashboard: Any


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Ctx:
    tmp = tmp_path_factory.mktemp("bad-input")
    mp = pytest.MonkeyPatch()
    mp.setenv("INTERPLAB_CACHE", str(tmp / "cache"))
    model = tiny_model("gpt2")
    sae = ilab.SAE.create("topk", d_in=32, d_sae=24, k=4, site=SITE)
    acts = model.collect(TEXTS, SITE)
    store = model.cache(TEXTS * 20, SITE, tmp / "store", n_tokens=256, context_size=16)
    data = ilab.feature_data(sae, model, TEXTS, n_top=2, n_quantile=2, context=4, seq_len=8, progress=False)
    pairs = ilab.patching.prompt_pairs(model, ["the cat sat"], ["the dog sat"], ["on"], ["to"])
    result = ilab.patching.grid(model, pairs, site="resid_pre")
    vec = ilab.steering.SteeringVector(SITE, torch.ones(32))
    heatmap = ilab.widgets.FeatureHeatmap(acts, features=[0, 1, 2])
    dashboard = ilab.widgets.FeatureDashboard(data, n_cards=2)
    yield Ctx(tmp, model, sae, acts, store, data, result, pairs, vec, heatmap, dashboard)
    mp.undo()


@dataclass
class Row:
    """One bad call of one public function and the error it must give."""

    target: str  # the public name it covers
    call: Callable[[Ctx], Any]
    exc: type[BaseException] | tuple[type[BaseException], ...]
    match: str  # a regex the message must contain: the bad value, the valid choices


def _notebook(c: Ctx) -> Path:
    path = c.tmp / "not-a-notebook.txt"
    path.write_text("hello")
    return path


def _tampered_npz(c: Ctx) -> Path:
    path = c.tmp / "tampered.npz"
    np.savez(path, values=np.zeros((2, 2), np.float32), meta=np.frombuffer(b"{not json", np.uint8))
    return path


def _json_file(c: Ctx, name: str, content: Any) -> Path:
    folder = c.tmp / name
    folder.mkdir(exist_ok=True)
    (folder / "meta.json").write_text(json.dumps(content))
    return folder


def _narrow_sae() -> Any:
    return ilab.SAE.create("topk", d_in=8, d_sae=8, k=2, site=SITE)


def _bad_store(c: Ctx) -> Path:
    folder = c.tmp / "badstore"
    folder.mkdir(exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps({"format": "interplab-activations", "version": 2, "sites": ["x"]}))
    return folder


def _pairs_of_other_lengths(c: Ctx) -> Any:
    return ilab.patching.grid(c.model, ["the cat"], ["the big dog"], ilab.metrics.prob("on"))


def _panel(c: Ctx, vectors: dict[str, Any]) -> Any:
    return ilab.widgets.SteeringPanel(c.model, vectors, site=SITE, autorun=False)


def _layer_sweep(c: Ctx, **kw: Any) -> Any:
    return ilab.steering.layer_sweep(c.model, ["a"], ["b"], len, ["c"], ["d"], **kw)


def _probe(c: Ctx) -> Any:
    return ilab.probes.train(c.model, TEXTS * 2, [0, 1, 0, 1, 0, 1], cv=0, progress=False)


def _das_pairs(c: Ctx) -> Any:
    return ilab.das.counterfactual_pairs(c.model, ["the cat sat", "the dog ran"], ["the dog sat", "a cat ran"],
                                         ["on", "to"])  # fmt: skip


V = ValueError
T = TypeError
I = (IndexError, ValueError)  # noqa: E741  (OutOfRangeError is both)


@functools.cache
def _circuit() -> tuple[Any, Any, Any]:
    """A tiny Gemma 3 with random transcoders and its attribution graph (built once)."""
    from tests.circuits.test_attribute import PROMPT, transcoders

    model = tiny_model("gemma3")
    tcs = transcoders(model.d_model)
    return model, tcs, ilab.circuits.attribute(model, tcs, PROMPT, batch_size=16, progress=False)


ROWS: list[Row] = [
    # ---------------------------------------------------------------- ilab.*
    Row("ilab.load_model", lambda c: ilab.load_model(42), T, "model must be None .*got int"),
    Row("ilab.load_model", lambda c: ilab.load_model(remote="cloud"), V, "remote='cloud' is not valid"),
    Row("ilab.load_model", lambda c: ilab.load_model(dtype="int8"), V, r"dtype='int8' is not valid; choose one of"),
    Row("ilab.Model", lambda c: ilab.Model(None, None, name="x").logits("a"), V, "Named sites are not mapped"),
    Row("ilab.logit_lens", lambda c: ilab.logit_lens(c.model, TEXTS, position=99), V, "Position 99 is outside"),
    Row("ilab.logit_lens", lambda c: ilab.logit_lens(c.model, []), V, "texts is empty"),
    Row(
        "ilab.evaluate",
        lambda c: ilab.evaluate(c.sae, c.model, TEXTS, batch_size=0),
        V,
        "batch_size must be a positive integer, got 0",
    ),
    Row("ilab.evaluate", lambda c: ilab.evaluate(_narrow_sae(), c.model, TEXTS), V, "This SAE reads d_in=8"),
    Row(
        "ilab.evaluate",
        lambda c: ilab.evaluate(c.sae, c.model, TEXTS, suites=["ppl"]),
        V,
        r"suites: 'ppl' is not one of \['reconstruction'",
    ),
    Row(
        "ilab.evaluate",
        lambda c: ilab.evaluate(c.sae, c.model, TEXTS, suites=["correlation"], signal=[[1.0]]),
        V,
        r"a list of one array per text \(3\), got 1",
    ),
    Row(
        "ilab.feature_data",
        lambda c: ilab.feature_data(c.sae, c.model, "/no/such.jsonl"),
        FileNotFoundError,
        r"'/no/such\.jsonl' does not exist",
    ),
    Row(
        "ilab.feature_data",
        lambda c: ilab.feature_data(c.sae, c.model, TEXTS, n_top=10**9),
        MemoryBudgetError,
        "n_top=1000000000",
    ),
    Row(
        "ilab.feature_data",
        lambda c: ilab.feature_data(c.sae, c.model, TEXTS, lead=99, context=4),
        V,
        r"lead \(an index into the context window\) must be an integer in 0\.\.3, got 99",
    ),
    Row("ilab.feature_data", lambda c: ilab.feature_data("sae", c.model, TEXTS), T, "sae must be an interplab SAE"),
    Row("ilab.heatmap_data", lambda c: ilab.heatmap_data(["a", "b"], [1.0]), V, r"n_tokens=2; got shape \(1, 1\)"),
    Row("ilab.heatmap_data", lambda c: ilab.heatmap_data([1, 2], [1.0, 2.0]), T, "Tokens must be strings"),
    Row("ilab.heatmap_data", lambda c: ilab.heatmap_data(["a"], [float("nan")]), V, "NaN or inf"),
    Row(
        "ilab.export_html",
        lambda c: ilab.export_html(c.tmp / "none.ipynb", c.tmp),
        FileNotFoundError,
        r"none\.ipynb' does not exist",
    ),
    Row("ilab.export_html", lambda c: ilab.export_html(_notebook(c), c.tmp), V, "is not a notebook"),
    Row(
        "ilab.set_memory_budget",
        lambda c: ilab.set_memory_budget("lots"),
        V,
        "must be a number of bytes or a size such as '4GB', got 'lots'",
    ),
    Row("ilab.set_memory_budget", lambda c: ilab.set_memory_budget(-5), V, "must be a positive integer, got -5"),
    # -------------------------------------------------------------- Activations / ActivationStore
    Row("ilab.Activations.flat", lambda c: c.acts.flat("blocks.0.nope"), KeyError, "was not collected; these were"),
    Row(
        "ilab.Activations",
        lambda c: ilab.Activations(["a"], torch.zeros(1, 1), torch.ones(1, 1), []).flat("x"),
        KeyError,
        "'x' was not collected",
    ),
    Row(
        "ilab.ActivationStore",
        lambda c: ilab.ActivationStore(c.tmp / "nowhere"),
        FileNotFoundError,
        "is not an activation store: no manifest.json",
    ),
    Row(
        "ilab.ActivationStore",
        lambda c: ilab.ActivationStore(_bad_store(c)),
        FileError,
        r"manifest\.json': sites must be a non-empty list of site names",
    ),
    Row(
        "ilab.ActivationStore.batches",
        lambda c: c.store.batches(64, buffer_shards=0),
        V,
        "buffer_shards must be a positive integer, got 0",
    ),
    Row("ilab.ActivationStore.batches", lambda c: c.store.batches(0), V, "batch_size must be a positive integer"),
    Row(
        "ilab.ActivationStore.batches",
        lambda c: c.store.batches(8, site="blocks.0.x"),
        V,
        r"Site 'blocks\.0\.x' is not in this store; it holds",
    ),
    Row("ilab.ActivationStore.d", lambda c: c.store.d("blocks.5.hook_resid_post"), V, "is not in this store"),
    Row("ilab.ActivationStore.read", lambda c: c.store.read("nope"), V, "'nope' is not in this store"),
    Row(
        "ilab.ActivationStore.shard",
        lambda c: c.store.shard(99, "tokens"),
        V,
        r"shard index must be an integer in 0\.\.\d+, got 99",
    ),
    Row("ilab.ActivationStore.shard_file", lambda c: c.store.shard_file(-1), V, "shard index must be an integer in"),
    # ---------------------------------------------------------------- Model
    Row(
        "Model.parse_sites",
        lambda c: c.model.parse_sites("blocks.9.hook_resid_post"),
        V,
        r"Unknown site 'blocks\.9\.hook_resid_post'",
    ),
    Row("Model.site_dim", lambda c: c.model.site_dim("resid"), V, "Unknown site 'resid'"),
    Row("Model.envoy", lambda c: c.model.envoy("blocks.1.hook_nothing"), V, "Unknown site"),
    Row("Model.block", lambda c: c.model.block(99), V, r"layer must be an integer in 0\.\.1, got 99"),
    Row("Model.to_tokens", lambda c: c.model.to_tokens([""]), V, r"texts\[0\] is empty"),
    Row("Model.to_tokens", lambda c: c.model.to_tokens(" ".join(["the"] * 300)), V, "longer than"),
    Row("Model.to_str_tokens", lambda c: c.model.to_str_tokens([10**9]), V, "Token id 1000000000 is outside"),
    Row("Model.check_token_ids", lambda c: c.model.check_token_ids([0.5]), T, "Token ids must be integers"),
    Row("Model.check_lengths", lambda c: c.model.check_lengths([129]), V, r"129 tokens, longer than .* \(128"),
    Row("Model.collect", lambda c: c.model.collect(TEXTS, sites=None), T, "sites must be a name or a non-empty list"),
    Row(
        "Model.collect",
        lambda c: c.model.collect(TEXTS, SITE, batch_size=2.5),
        V,
        "batch_size must be a positive integer, got 2.5",
    ),
    Row("Model.collect", lambda c: c.model.collect([], SITE), V, "texts is empty"),
    Row("Model.logits", lambda c: c.model.logits(TEXTS, positions=[]), V, "positions is empty"),
    Row("Model.logits", lambda c: c.model.logits(TEXTS, positions=True), T, "positions must be token indices"),
    Row("Model.logits", lambda c: c.model.logits(TEXTS, positions=[50]), V, "Position 50 is outside a text of"),
    Row(
        "Model.generate",
        lambda c: c.model.generate(TEXTS, max_new_tokens=0),
        V,
        "max_new_tokens must be a positive integer, got 0",
    ),
    Row(
        "Model.generate_ids",
        lambda c: c.model.generate_ids("the", max_new_tokens=200),
        V,
        "the prompt and max_new_tokens is 202 tokens",
    ),
    Row(
        "Model.cache",
        lambda c: c.model.cache(TEXTS, SITE, c.tmp / "c", batch_size=2.5),
        V,
        "batch_size must be a positive integer, got 2.5",
    ),
    Row("Model.cache", lambda c: c.model.cache([""] * 5, SITE, c.tmp / "c2", n_tokens=10), V, "gives no window"),
    Row("Model.cache", lambda c: c.model.cache(TEXTS, SITE, c.tmp / "c3", dtype="int8"), V, "dtype='int8'"),
    Row("Model.batches", lambda c: list(c.model.batches(TEXTS, 0, "x")), V, "batch_size must be a positive integer"),
    Row(
        "Model.run_sites",
        lambda c: c.model.run_sites({"input_ids": torch.ones(1, 2, dtype=torch.long)}, "x"),
        V,
        "Unknown site 'x'",
    ),
    Row(
        "Model.fit_batch",
        lambda c: c.model.fit_batch(4, 10**6, "collect"),
        MemoryBudgetError,
        "collect on one text of 1,000,000 tokens would need",
    ),
    # ------------------------------------------------------------------ SAE
    Row(
        "ilab.SAE",
        lambda c: ilab.SAE.create("relu2", d_in=4, d_sae=4),
        V,
        r"Unknown SAE architecture 'relu2'; choose one of",
    ),
    Row(
        "ilab.SAE.create",
        lambda c: ilab.SAE.create("topk", d_in=640, d_sae=10**12, k=4),
        MemoryBudgetError,
        "width=1,000,000,000,000 would need",
    ),
    Row(
        "ilab.SAE.create",
        lambda c: ilab.SAE.create("standard", d_in=4, d_sae=4, l1_coefficient=float("nan")),
        V,
        "l1_coefficient must be finite, got nan",
    ),
    Row(
        "ilab.SAE.create",
        lambda c: ilab.SAE.create("topk", d_in=4, d_sae=4, k=9),
        V,
        r"k of a topk SAE of width=4 must be an integer in 1\.\.4, got 9",
    ),
    Row("ilab.train_sae", lambda c: ilab.train_sae(c.store, batch_size=0), V, "batch_size must be a positive integer"),
    Row(
        "ilab.train_sae",
        lambda c: ilab.train_sae(c.store, arch="jumprelu", l0=float("inf")),
        V,
        "l0_coefficient must be finite, got inf",
    ),
    Row("ilab.train_sae", lambda c: ilab.train_sae(torch.zeros(3)), T, "source must be an ActivationStore"),
    Row(
        "ilab.train_saes",
        lambda c: ilab.train_saes(c.store, [{"arch": "topk", "widht": 4}]),
        V,
        r"Unknown SAE settings \['widht'\]",
    ),
    Row(
        "ilab.train_saes",
        lambda c: ilab.train_saes(c.store, {"arch": "topk"}),
        T,
        "specs must be a list of dicts",
    ),
    Row("ilab.load_sae", lambda c: ilab.load_sae(c.tmp / "no-sae"), FileNotFoundError, "No SAE at"),
    Row("ilab.load_sae", lambda c: ilab.load_sae("embedded", layer=7), V, r"No embedded SAE for layer=7"),
    Row(
        "ilab.load_sae",
        lambda c: ilab.load_sae("gemma-scope-2-270m-pt-rez", "layer_5_width_16k_l0_small"),
        V,
        r"Unknown SAE release 'gemma-scope-2-270m-pt-rez'\. Did you mean 'gemma-scope-2-270m-pt-res",
    ),
    Row(
        "ilab.load_sae",
        lambda c: ilab.load_sae("gemma-scope-2-270m-pt-res", "layer_6_width_16k_l0_small"),
        V,
        r"no SAE id 'layer_6_width_16k_l0_small'\. Did you mean .*'layer_5_width_16k_l0_small'",
    ),
    Row(
        "ilab.load_sae",
        lambda c: ilab.load_sae("gemma-scope-2-270m-pt-res"),
        V,
        r"'gemma-scope-2-270m-pt-res' is a SAELens release: give one of its .* SAE ids too",
    ),
    Row("ilab.load_sae", lambda c: ilab.load_sae("embedded", layer=6, site="x"), V, "site='x' is for a local path"),
    Row("ilab.load_sae", lambda c: ilab.load_sae(c.tmp / "s", layer=6), V, "layer=6 is for 'embedded', not for a path"),
    Row("ilab.load_sae", lambda c: ilab.load_sae(42), T, "path_or_name must be a path, .* got int"),
    Row(
        "ilab.SAE.save",
        lambda c: c.sae.save(c.tmp / "s", dtype="float32"),
        T,
        "dtype must be a floating torch dtype .*got 'float32'",
    ),
    Row("ilab.SAE.direction", lambda c: c.sae.direction(24), I, r"Latent 24 is out of range: latents are 0\.\.23"),
    Row("ilab.SAE.direction", lambda c: c.sae.direction("3"), T, "A latent id is an integer, got str"),
    Row("ilab.SAE.encode", lambda c: c.sae.encode(torch.zeros(2, 5)), V, r"reads d_in=32 .*got last dim 5"),
    Row("ilab.SAE.decode", lambda c: c.sae.decode(torch.zeros(2, 5)), V, "has 24 latents; decode got .* last dim 5"),
    Row("ilab.SAE.pre_acts", lambda c: c.sae.pre_acts(torch.zeros(1, 3)), V, "got last dim 3"),
    Row("ilab.SAE.forward", lambda c: c.sae(torch.zeros(1, 3)), V, "got last dim 3"),
    Row("ilab.SAE.training_loss", lambda c: c.sae.training_loss(torch.zeros(2, 3)), V, "got last dim 3"),
    Row(
        "ilab.SAE.check_fits",
        lambda c: c.sae.check_fits(c.model, "blocks.7.hook_resid_post"),
        V,
        r"reads 'blocks\.7\.hook_resid_post', which .* does not have",
    ),
    Row(
        "ilab.SAE.validate",
        lambda c: type(c.sae).validate(ilab.core.saes.SAEConfig("topk", 0, 4, k=1)),
        V,
        "d_in must be a positive integer, got 0",
    ),
    Row(
        "ilab.SAE.target_of",
        lambda c: c.sae.target_of(torch.zeros(2, 32), torch.zeros(2, 5)),
        V,
        r"target must have shape \[2, 32\]",
    ),
    # ---------------------------------------------------------------- features
    Row(
        "ilab.FeatureData",
        lambda c: ilab.FeatureData.load(c.tmp / "nothing"),
        FileNotFoundError,
        "holds no feature data",
    ),
    Row(
        "ilab.features.FeatureData.load",
        lambda c: ilab.FeatureData.load(_json_file(c, "fd", {"format": "nope"})),
        FileError,
        r"meta\.json': format is 'nope', not interplab feature data",
    ),
    Row("ilab.features.FeatureData.latent", lambda c: c.data.latent(99), I, "Latent 99 is out of range"),
    Row("ilab.features.FeatureData.max_tokens", lambda c: c.data.max_tokens(-1), I, "Latent -1 is out of range"),
    Row("ilab.features.FeatureData.suggest_label", lambda c: c.data.suggest_label(1.5), T, "got float"),
    Row("ilab.features.FeatureData.set_label", lambda c: c.data.set_label(1, 5), T, "A label is a string, got int"),
    Row(
        "ilab.features.FeatureData.set_label",
        lambda c: c.data.set_label(1, "x" * 3000),
        V,
        "A label is at most 2000 characters",
    ),
    Row("ilab.features.FeatureData.save", lambda c: c.data.save(Path(ilab.__file__).parent), V, "holds other files"),
    Row(
        "ilab.features.FeatureData.attach",
        lambda c: c.data.attach(ilab.SAE.create("topk", d_in=32, d_sae=24, k=2)),
        V,
        "made from SAE [0-9a-f]{16}, not from this one",
    ),
    Row(
        "ilab.features.FeatureData.token_str",
        lambda c: c.data.token_str("a"),
        V,
        "token id must be an integer, got 'a'",
    ),
    Row(
        "ilab.features.active_latents",
        lambda c: ilab.features.active_latents(c.sae, c.model, "the cat", top=0),
        V,
        "top must be a positive integer, got 0",
    ),
    Row(
        "ilab.features.latent_activations",
        lambda c: ilab.features.latent_activations(c.sae, c.model, ["a"]),
        T,
        "Give one text .*got list",
    ),
    Row(
        "ilab.features.latents_for_token",
        lambda c: ilab.features.latents_for_token(c.sae, c.model, "the cat"),
        V,
        "'the cat' is 2 tokens, not one",
    ),
    Row(
        "ilab.features.load_labels",
        lambda c: ilab.features.load_labels("sae"),
        T,
        "Labels belong to an interplab SAE, got str",
    ),
    Row(
        "ilab.features.logit_effects",
        lambda c: ilab.features.logit_effects(c.sae, c.model, n=0),
        V,
        "top must be a positive integer, got 0",
    ),
    Row("ilab.features.nearest_latents", lambda c: ilab.features.nearest_latents(c.sae, 99), I, "Latent 99"),
    Row("ilab.features.set_label", lambda c: ilab.features.set_label(c.sae, 99, "x"), I, "Latent 99 is out of range"),
    Row("ilab.features.suggest_label", lambda c: ilab.features.suggest_label(c.data, 99), I, "Latent 99"),
    # ---------------------------------------------------------------- metrics
    Row(
        "ilab.metrics.logit_diff",
        lambda c: ilab.metrics.logit_diff(None, " John"),
        T,
        "answer must be a token .*got NoneType",
    ),
    Row("ilab.metrics.logit_diff", lambda c: ilab.metrics.logit_diff(set(), "a"), V, "answer is an empty set"),
    Row("ilab.metrics.prob", lambda c: ilab.metrics.prob([1.5]), T, r"answer\[0\] must be a token .*got float"),
    Row(
        "ilab.metrics.kl_to_clean",
        lambda c: ilab.metrics.kl_to_clean().on(c.model)(torch.zeros(1, 64)),
        RuntimeError,
        "kl_to_clean needs the clean logits",
    ),
    Row("ilab.metrics.as_metric", lambda c: ilab.metrics.as_metric(3), T, "metric must be logit_diff"),
    Row(
        "ilab.metrics.Metric",
        lambda c: ilab.metrics.Metric("x", "logit_diff", "the cat", "a").on(c.model),
        V,
        "'the cat' is 2 tokens, not one",
    ),
    Row(
        "ilab.metrics.Metric.bind",
        lambda c: ilab.metrics.logit_diff(["a", "b"], "c").bind(c.model.tokenizer),
        V,
        "is a list .* not bound to pairs",
    ),
    Row(
        "ilab.metrics.Metric.on",
        lambda c: ilab.metrics.prob(10**9).on(c.model),
        V,
        "answer token id 1000000000 is outside the vocabulary",
    ),
    Row(
        "ilab.metrics.BoundMetric",
        lambda c: ilab.metrics.as_metric(lambda x: x).on(c.model)(torch.zeros(2, 4)),
        V,
        r"returned shape \(2, 4\) .* one value per row",
    ),
    Row(
        "ilab.metrics.BoundMetric.score",
        lambda c: ilab.metrics.prob("cat").on(c.model).score(torch.zeros(2, 3, 4)),
        V,
        r"final-position logits \[rows, vocab\]; got shape \(2, 3, 4\)",
    ),
    Row(
        "ilab.metrics.BoundMetric.set_clean",
        lambda c: ilab.metrics.prob("cat").on(c.model).set_clean(None),
        T,
        "A metric reads logits, a float tensor .*got NoneType",
    ),
    # ---------------------------------------------------------------- patching
    Row(
        "ilab.patching.grid",
        lambda c: ilab.patching.grid(c.model, c.pairs, site="blocks"),
        V,
        "site='blocks' is not one of",
    ),
    Row("ilab.patching.grid", _pairs_of_other_lengths, V, "must have the same number of tokens"),
    Row(
        "ilab.patching.grid", lambda c: ilab.patching.grid(c.model, c.pairs, positions=[9]), V, "Position 9 is outside"
    ),
    Row(
        "ilab.patching.attribution",
        lambda c: ilab.patching.attribution(c.model, c.pairs, sites="x"),
        V,
        r"sites \['x'\] must be among",
    ),
    Row("ilab.patching.attribution", lambda c: ilab.patching.attribution(c.model, c.pairs, steps=0), V, "steps"),
    Row(
        "ilab.patching.latents",
        lambda c: ilab.patching.latents(c.model, c.sae, c.pairs, top=0),
        V,
        "top must be a positive integer, got 0",
    ),
    Row(
        "ilab.patching.ioi", lambda c: ilab.patching.ioi(c.model, templates=["{A}{B}{S} {0}"]), V, r"has fields \['0'\]"
    ),
    Row("ilab.patching.ioi", lambda c: ilab.patching.ioi(c.model, order="CBA"), V, "order='CBA' is not one of"),
    Row(
        "ilab.patching.prompt_pairs",
        lambda c: ilab.patching.prompt_pairs(c.model, ["a"], ["b", "c"], ["x"], ["y"]),
        V,
        "Got 1 clean prompts but 2 corrupt",
    ),
    Row(
        "ilab.patching.single_token_names",
        lambda c: ilab.patching.single_token_names(None),
        T,
        "Give a Model or a tokenizer",
    ),
    Row("ilab.patching.PromptPairs.by_length", lambda c: c.pairs.by_length(None), T, "Give a Model or a tokenizer"),
    Row(
        "ilab.patching.PromptPairs",
        lambda c: ilab.patching.PromptPairs(["a"], ["b"], ["the cat"], ["y"]).logit_diff().bind(c.model.tokenizer, 1),
        V,
        r"answer\[0\] 'the cat' is 2 tokens, not one",
    ),
    Row(
        "ilab.patching.PatchingResult",
        lambda c: ilab.patching.PatchingResult(np.zeros(3), 0.0, 1.0, "resid_pre"),
        V,
        r"values must be 2-D \[rows, cols\], got shape \(3,\)",
    ),
    Row(
        "ilab.patching.PatchingResult.load",
        lambda c: ilab.patching.PatchingResult.load(_tampered_npz(c)),
        FileError,
        r"tampered\.npz': meta is not JSON",
    ),
    Row(
        "ilab.patching.PatchingResult.load",
        lambda c: ilab.patching.PatchingResult.load(c.tmp / "none.npz"),
        FileNotFoundError,
        "No patching result at",
    ),
    Row("ilab.patching.PatchingResult.save", lambda c: c.result.save(c.tmp), IsADirectoryError, "Is a directory"),
    Row("ilab.patching.PatchingResult.top", lambda c: c.result.top(99, 0), V, r"row must be an integer in 0\.\.1"),
    # ---------------------------------------------------------------- steering
    Row(
        "ilab.steering.SteeringVector",
        lambda c: ilab.steering.SteeringVector(SITE, torch.tensor([1.0, np.nan])),
        V,
        "holds 1 NaN/inf values",
    ),
    Row(
        "ilab.steering.SteeringVector",
        lambda c: ilab.steering.SteeringVector("", torch.ones(2)),
        T,
        "site must be a site name",
    ),
    Row(
        "ilab.steering.SteeringVector.load",
        lambda c: ilab.steering.SteeringVector.load(c.tmp / "nope.safetensors"),
        FileNotFoundError,
        "No steering vector file at",
    ),
    Row(
        "ilab.steering.SteeringVector.save",
        lambda c: ilab.steering.SteeringVector(SITE, torch.ones(2), provenance={"f": object()}).save(
            c.tmp / "v.safetensors"
        ),
        T,
        "provenance must hold JSON values only",
    ),
    Row("ilab.steering.SteeringVector.at", lambda c: c.vec.at(None), T, "site must be a site name .*None"),
    Row(
        "ilab.steering.SteeringVector.check_fits",
        lambda c: ilab.steering.SteeringVector(SITE, torch.ones(5)).check_fits(c.model),
        V,
        "has d=5 .*has width 32",
    ),
    Row(
        "ilab.steering.Clamp",
        lambda c: ilab.steering.plan(c.model, ilab.steering.Clamp(c.sae, 1, 1.0, "x")),
        V,
        "reads 'x', which .* does not have",
    ),
    Row("ilab.steering.clamp", lambda c: ilab.steering.clamp(c.sae, 99, 1.0), I, "Latent 99 is out of range"),
    Row("ilab.steering.clamp", lambda c: ilab.steering.clamp(c.sae, 1, float("inf")), V, "clamp value must be finite"),
    Row("ilab.steering.plan", lambda c: ilab.steering.plan(c.model, "vec"), T, "steering is a SteeringVector"),
    Row(
        "ilab.steering.SitePlan",
        lambda c: ilab.steering.plan(c.model, [ilab.steering.SitePlan(None, None, "x")]),
        T,
        r"steering\[0\] is a SitePlan; expected a SteeringVector",
    ),
    Row("ilab.steering.logits", lambda c: ilab.steering.logits(c.model, TEXTS, c.vec, start=-99), V, "start=-99"),
    Row(
        "ilab.steering.generate",
        lambda c: ilab.steering.generate(c.model, TEXTS, c.vec, backend="gpu"),
        V,
        r"backend='gpu' is not one of",
    ),
    Row(
        "ilab.steering.generate_local",
        lambda c: ilab.steering.generate_local(c.model, TEXTS, c.vec, max_new_tokens=-1),
        V,
        "max_new_tokens must be a positive integer, got -1",
    ),
    Row(
        "ilab.steering.stream",
        lambda c: ilab.steering.stream(c.model, "the cat", c.vec, temperature=-1.0),
        V,
        "temperature must be >= 0",
    ),
    Row(
        "ilab.steering.apply", lambda c: ilab.steering.apply(c.model, 3).__enter__(), T, "steering is a SteeringVector"
    ),
    Row(
        "ilab.steering.contrast",
        lambda c: ilab.steering.contrast(c.model, SITE, ["a"], ["b"], method="svd"),
        V,
        "method='svd' is not one of",
    ),
    Row(
        "ilab.steering.diff_of_means",
        lambda c: ilab.steering.diff_of_means(c.model, SITE, ["the"], ["a"], position="last"),
        V,
        "position must be a token index .* or 'mean', got 'last'",
    ),
    Row(
        "ilab.steering.pca_direction",
        lambda c: ilab.steering.pca_direction(c.model, SITE, ["the", "a"], ["cat"]),
        V,
        "Paired differences need as many positive as negative texts: 2 vs 1",
    ),
    Row(
        "ilab.steering.from_probe",
        lambda c: ilab.steering.from_probe(torch.ones(3, 3), SITE),
        V,
        r"probe weight must have shape \[d\]",
    ),
    Row("ilab.steering.from_sae", lambda c: ilab.steering.from_sae(c.sae, 99), I, "Latent 99 is out of range"),
    Row(
        "ilab.steering.sweep",
        lambda c: ilab.steering.sweep(c.model, c.vec, [], lambda s: 0.0, neutral_texts=TEXTS),
        V,
        "scales must be a non-empty list of numbers",
    ),
    Row(
        "ilab.steering.SweepResult",
        lambda c: ilab.steering.sweep(c.model, "vec", [1.0], len, TEXTS),
        T,
        "vector must be a SteeringVector, got str",
    ),
    Row("ilab.steering.layer_sweep", lambda c: _layer_sweep(c, layers=[]), V, "layers is empty"),
    Row("ilab.steering.LayerSweep", lambda c: _layer_sweep(c, method="x"), V, "method='x' is not one of"),
    # ---------------------------------------------------------------- widgets
    Row(
        "ilab.widgets.FeatureHeatmap",
        lambda c: ilab.widgets.FeatureHeatmap(c.acts, "notasae"),
        T,
        "the second argument is an SAE .*got str",
    ),
    Row(
        "ilab.widgets.FeatureHeatmap",
        lambda c: ilab.widgets.FeatureHeatmap(c.acts, features=[]),
        V,
        "features is empty",
    ),
    Row(
        "ilab.widgets.FeatureHeatmap",
        lambda c: ilab.widgets.FeatureHeatmap(c.acts, scale="log"),
        V,
        "scale='log' is not one of",
    ),
    Row(
        "ilab.widgets.FeatureHeatmap.column",
        lambda c: c.heatmap.column(7),
        V,
        r"feature=7 is not among the features shown: \[0, 1, 2\]",
    ),
    Row(
        "ilab.widgets.TokenHeatmap",
        lambda c: ilab.widgets.TokenHeatmap(["a", "b"], [[1.0], [2.0]]),
        V,
        r"one value per token \(\[n_tokens\]\); got shape \(2, 1\)",
    ),
    Row(
        "ilab.widgets.TokenHeatmap",
        lambda c: setattr(ilab.widgets.TokenHeatmap(["a"], [1.0]), "selected_token", 3),
        Exception,
        r"selected_token=3 is out of range: tokens are 0\.\.0",
    ),
    Row(
        "ilab.widgets.FeatureDashboard",
        lambda c: ilab.widgets.FeatureDashboard([1, 2]),
        T,
        "takes FeatureData or an SAE; got list",
    ),
    Row(
        "ilab.widgets.FeatureDashboard",
        lambda c: ilab.widgets.FeatureDashboard(c.data, sort="size"),
        V,
        "sort='size' is not one of",
    ),
    Row("ilab.widgets.FeatureDashboard.set_label", lambda c: c.dashboard.set_label(99, "x"), I, "Latent 99"),
    Row(
        "ilab.widgets.FeatureDashboard.set_label",
        lambda c: c.dashboard.set_label(1, None),
        T,
        "A label is a string, got NoneType",
    ),
    Row(
        "ilab.widgets.FeatureDashboard.link",
        lambda c: c.dashboard.link("heatmap"),
        T,
        r"link\(\) takes a FeatureHeatmap",
    ),
    Row("ilab.widgets.FeatureDashboard.histogram", lambda c: c.dashboard.histogram(99), I, "Latent 99"),
    Row(
        "ilab.widgets.FeatureDashboard.try_text",
        lambda c: c.dashboard.try_text("the cat"),
        RuntimeError,
        "try_text needs the SAE and the model",
    ),
    Row(
        "ilab.widgets.PatchingGrid",
        lambda c: ilab.widgets.PatchingGrid({}),
        T,
        "takes a PatchingResult or a non-empty dict",
    ),
    Row(
        "ilab.widgets.PatchingGrid",
        lambda c: ilab.widgets.PatchingGrid({"a": 1}),
        T,
        r"These entries are not PatchingResult: \['a'\]",
    ),
    Row(
        "ilab.widgets.SteeringPanel",
        lambda c: ilab.widgets.SteeringPanel(c.model, {}),
        V,
        "vectors must be a non-empty dict",
    ),
    Row(
        "ilab.widgets.SteeringPanel",
        lambda c: _panel(c, {"v": torch.ones(5)}),
        V,
        "Vector 'v' has d=5, but .* has width 32",
    ),
    Row(
        "ilab.widgets.SteeringPanel.wait",
        lambda c: _panel(c, {"v": c.vec}).wait(timeout="soon"),
        T,
        "timeout must be a number, got str",
    ),
    # ------------------------------------------------ issue 12: sites, lens, attention, colours
    Row("Model.sites_of_width", lambda c: c.model.sites_of_width("wide"), V, "width must be a positive integer"),
    Row(
        "Model.eager_attention",
        lambda c: c.model.eager_attention(needed="yes").__enter__(),
        T,
        "needed must be True or False, got str",
    ),
    Row(
        "ilab.attention_data",
        lambda c: ilab.attention_data(c.model, "the cat", layers=9),
        V,
        r"layer must be an integer in 0\.\.1, got 9",
    ),
    Row(
        "ilab.attention_data",
        lambda c: ilab.attention_data(c.model, "the cat", max_values=3),
        V,
        "over max_values=3: pick fewer layers",
    ),
    Row(
        "ilab.AttentionData.head",
        lambda c: ilab.attention_data(c.model, "the cat", layers=1).head(9, 0),
        V,
        r"Layer 9 is not in this view; it holds layers \[1\]",
    ),
    Row(
        "ilab.LogitLensResult.view_data",
        lambda c: ilab.logit_lens(c.model, "the cat").view_data(text=5),
        V,
        r"text must be an integer in 0\.\.0, got 5",
    ),
    Row(
        "ilab.HeatmapData.color_scales",
        lambda c: ilab.heatmap_data(["a", "b"], [1.0, 2.0]).color_scales("rainbow"),
        V,
        r"scale='rainbow' is not one of \('auto', 'sequential', 'diverging'\)",
    ),
    Row(
        "ilab.features.search_latents",
        lambda c: ilab.features.search_latents(c.data, 5),
        T,
        "query is a string, got int",
    ),
    Row(
        "ilab.features.search_latents",
        lambda c: ilab.features.search_latents("x", "cat"),
        T,
        "data must be FeatureData",
    ),
    Row(
        "ilab.widgets.AttentionPattern",
        lambda c: ilab.widgets.AttentionPattern("x", "the cat"),
        T,
        "AttentionPattern takes a model and a text, or AttentionData; got str",
    ),
    Row(
        "ilab.widgets.AttentionPattern.compare",
        lambda c: ilab.widgets.AttentionPattern.compare("x"),
        T,
        "takes a drift result, or two AttentionData",
    ),
    Row(
        "ilab.widgets.AttentionPattern.set_scale",
        lambda c: ilab.widgets.AttentionPattern(c.model, "the cat", layer=1).set_scale("rainbow"),
        V,
        "scale='rainbow' is not one of",
    ),
    Row(
        "ilab.widgets.LogitLens",
        lambda c: ilab.widgets.LogitLens("x"),
        T,
        "LogitLens takes what ilab.logit_lens returned, a LensView or a model; got str",
    ),
    Row(
        "ilab.widgets.LogitLens",
        lambda c: ilab.widgets.LogitLens(ilab.logit_lens(c.model, "the cat"), token="the cat"),
        V,
        "'the cat' is 2 tokens",
    ),
    Row(
        "ilab.widgets.LogitLens.set_scale",
        lambda c: ilab.widgets.LogitLens(ilab.logit_lens(c.model, "the cat")).set_scale("rainbow"),
        V,
        "scale='rainbow' is not one of",
    ),
    Row(
        "ilab.widgets.FeatureHeatmap.set_scale",
        lambda c: c.heatmap.set_scale("rainbow"),
        V,
        "scale='rainbow' is not one of",
    ),
    Row(
        "ilab.widgets.FeatureHeatmap.color_scale",
        lambda c: c.heatmap.color_scale(99),
        V,
        r"feature=99 is not among the features shown: \[0, 1, 2\]",
    ),
    Row(
        "ilab.widgets.PatchingGrid.set_row_text",
        lambda c: ilab.widgets.PatchingGrid(c.result).set_row_text(5),
        T,
        "labels must map latent ids to label strings, got int",
    ),
    Row(
        "ilab.widgets.PatchingGrid.set_row_text",
        lambda c: ilab.widgets.PatchingGrid(c.result).set_row_text({"a": 1}),
        T,
        "these entries do not",
    ),
    Row(
        "ilab.widgets.PatchingGrid.set_scale",
        lambda c: ilab.widgets.PatchingGrid(c.result).set_scale("rainbow"),
        V,
        "scale='rainbow' is not one of",
    ),
    Row(
        "ilab.widgets.PatchingGrid.color_scale",
        lambda c: ilab.widgets.PatchingGrid(c.result).color_scale("nope"),
        V,
        "tab='nope' is not one of",
    ),
    # ----------------------------------------------------------- issue 14: jobs on NDIF
    Row(
        "ilab.jobs.cache",
        lambda c: ilab.jobs.cache(c.model, TEXTS, SITE, c.tmp / "job"),
        V,
        "Jobs are for models on an NDIF server",
    ),
    Row(
        "ilab.jobs.feature_data",
        lambda c: ilab.jobs.feature_data(c.sae, c.model, TEXTS, path=c.tmp / "jobf"),
        V,
        "Jobs are for models on an NDIF server",
    ),
    Row("ilab.jobs.resume", lambda c: ilab.jobs.resume("nope"), V, "No job 'nope' in .*jobs there: none"),
    Row(
        "ilab.SAE.trace_params",
        lambda c: c.sae.trace_params(latents=[99]),
        I,
        r"Latent 99 is out of range: latents are 0\.\.23",
    ),
    # ---- matching
    Row(
        "ilab.widgets.FeatureFlow",
        lambda c: ilab.widgets.FeatureFlow([ilab.matching.match(c.sae, c.sae)], 99),
        I,
        r"Latent 99 is out of range: latents are 0\.\.23",
    ),
    Row("ilab.widgets.FeatureFlow", lambda c: ilab.widgets.FeatureFlow(["x"]), T, r"non-empty list of matches"),
    Row(
        "ilab.matching.match",
        lambda c: ilab.matching.match(c.sae, ilab.SAE.create("topk", 32, 12, k=2)),
        V,
        r"sae_a has 24 latents and sae_b 12",
    ),
    Row(
        "ilab.matching.match",
        lambda c: ilab.matching.match(c.sae, c.sae, candidates=0),
        V,
        r"candidates must be a positive integer, got 0",
    ),
    Row("ilab.matching.match_chain", lambda c: ilab.matching.match_chain([c.sae]), V, r"at least two SAEs"),
    Row(
        "ilab.matching.lineage",
        lambda c: ilab.matching.lineage([ilab.matching.match(c.sae, c.sae)], 30),
        I,
        r"Latent 30 is out of range: latents are 0\.\.23",
    ),
    Row("ilab.matching.paths", lambda c: ilab.matching.paths([]), T, r"non-empty list of Match"),
    Row("ilab.matching.compose", lambda c: ilab.matching.compose(["x"]), T, r"non-empty list of Match"),
    Row(
        "ilab.matching.approximate",
        lambda c: ilab.matching.approximate(torch.ones(2, 32), c.sae, c.sae, np.arange(3)),
        V,
        r"perm must map 24",
    ),
    Row(
        "ilab.matching.explained_by_gap",
        lambda c: ilab.matching.explained_by_gap({}, [c.sae, c.sae]),
        V,
        r"acts holds no activations for 'blocks\.1\.hook_resid_post'",
    ),
    Row(
        "ilab.matching.explained_by_gap",
        lambda c: ilab.matching.explained_by_gap({}, [c.sae], max_gap=-1),
        V,
        r"max_gap must be an integer >= 0, got -1",
    ),
    Row(
        "ilab.matching.stitch",
        lambda c: ilab.matching.stitch(c.sae, c.sae, torch.ones(4, 32), threshold=1.5),
        V,
        r"threshold is a cosine similarity in \(0, 1\), got 1\.5",
    ),
    Row(
        "ilab.matching.stitch",
        lambda c: ilab.matching.stitch(c.sae, c.sae, torch.ones(4, 7)),
        V,
        r"x_TD must be activations \[T, 32\]",
    ),
    Row(
        "ilab.matching.train_meta_sae",
        lambda c: ilab.matching.train_meta_sae(c.sae, width=99),
        V,
        r"width must be an integer in 1\.\.24, got 99",
    ),
    Row(
        "ilab.matching.decompose", lambda c: ilab.matching.decompose(c.sae, c.sae, 99), I, r"Latent 99 is out of range"
    ),
    Row(
        "ilab.matching.meta_table",
        lambda c: ilab.matching.meta_table(ilab.SAE.create("topk", 16, 8, k=2), c.sae),
        V,
        r"meta reads d_in=16, but sae's decoder rows have width 32",
    ),
    Row(
        "ilab.matching.correlate",
        lambda c: ilab.matching.correlate(torch.ones(3, 2), torch.ones(4, 2)),
        V,
        r"same tokens",
    ),
    Row(
        "ilab.matching.similarity", lambda c: ilab.matching.similarity(c.model, c.sae, c.model, c.sae, ""), V, r"empty"
    ),
    Row(
        "ilab.matching.explained_variance",
        lambda c: ilab.matching.explained_variance(torch.ones(3, 2), torch.ones(3, 5)),
        V,
        r"must both be \[tokens, width\] of one shape, got \[3, 2\] and \[3, 5\]",
    ),
    # ----------------------------------------------------------- issue 15: probes and DAS
    Row("ilab.probes.train", lambda c: ilab.probes.train(c.model, TEXTS, [0, 1]), V, "Got 3 texts but 2 labels"),
    Row(
        "ilab.probes.train",
        lambda c: ilab.probes.train(c.model, TEXTS, [[0]] * 3),
        V,
        r"labels\[0\] has 1 entries but text 0 has 7 tokens",
    ),
    Row("ilab.probes.train", lambda c: ilab.probes.train(c.model, TEXTS, [0, 1, 0], C=0), V, "C must be positive"),
    Row(
        "ilab.probes.Probe.predict",
        lambda c: ilab.probes.Probe(SITE, [0, 1], torch.zeros(1, 32), torch.zeros(1)).predict(torch.zeros(2, 5)),
        V,
        r"must be \[N, 32\] for the probe at blocks.1.hook_resid_post, got \(2, 5\)",
    ),
    Row(
        "ilab.probes.ProbeResult.load",
        lambda c: ilab.probes.ProbeResult.load(c.tmp / "nope.safetensors"),
        FileNotFoundError,
        "nope.safetensors",
    ),
    Row("ilab.probes.ProbeResult.save", lambda c: _probe(c).save(c.tmp), IsADirectoryError, "Is a directory"),
    Row(
        "ilab.probes.binding_task",
        lambda c: ilab.probes.binding_task(c.model, "sports"),
        V,
        "domain='sports' is not one of",
    ),
    Row("ilab.probes.binding_task", lambda c: ilab.probes.binding_task(c.model), V, "Fewer than two names"),
    Row(
        "ilab.probes.fit_binding",
        lambda c: ilab.probes.fit_binding(c.model, [1], SITE),
        T,
        "task must be a BindingTask",
    ),
    Row(
        "ilab.probes.BindingTask",
        lambda c: ilab.probes.BindingTask("foods", [("a", "b", "c", "d")]).text(2),
        V,
        r"i must be an integer in 0\.\.0, got 2",
    ),
    Row(
        "ilab.probes.BindingTask.text",
        lambda c: ilab.probes.BindingTask("foods", [("a", "b", "c", "d")]).text(-1),
        V,
        "got -1",
    ),
    Row(
        "ilab.probes.BindingTask.story",
        lambda c: ilab.probes.BindingTask("foods", [("a", "b", "c", "d")]).story(5),
        V,
        "got 5",
    ),
    Row(
        "ilab.probes.BindingResult.matrix",
        lambda c: ilab.probes.BindingResult(SITE, torch.zeros(32, 2), torch.zeros(32), *[0.0] * 4).matrix(
            c.model, "the cat", [], ["cat"]
        ),
        V,
        "at least one word",
    ),
    Row(
        "ilab.probes.BindingResult.matrix",
        lambda c: ilab.probes.BindingResult(SITE, torch.zeros(32, 2), torch.zeros(32), *[0.0] * 4).matrix(
            c.model, "the cat", ["dog"], ["cat"]
        ),
        V,
        "'dog' is not a token of the context",
    ),
    Row("ilab.das.ioi_attributes", lambda c: ilab.das.ioi_attributes(["a"]), T, "pairs must be IOI PromptPairs"),
    Row(
        "ilab.das.supervised_dictionary",
        lambda c: ilab.das.supervised_dictionary(c.model, c.pairs, SITE),
        V,
        "The names 'on' and 'to' are not both in the prompt 'the cat sat'",
    ),
    Row(
        "ilab.das.compare_dictionaries",
        lambda c: ilab.das.compare_dictionaries(c.model, c.pairs, SITE, {"x": 1}),
        T,
        r"saes\['x'\] must be an interplab SAE",
    ),
    Row(
        "ilab.das.SupervisedDictionary.reconstruct",
        lambda c: ilab.das.SupervisedDictionary(
            SITE, torch.zeros(32), {"io": {"Mary": torch.zeros(32)}, "s": {}, "order": {}}
        ).reconstruct([{"io": "Bob"}]),
        V,
        r"io='Bob' has no feature; this dictionary knows \['Mary'\]",
    ),
    Row(
        "ilab.das.counterfactual_pairs",
        lambda c: ilab.das.counterfactual_pairs(c.model, ["a", "b"], ["c"], ["d"]),
        V,
        "Got 2 base prompts but 1 source prompts",
    ),
    Row(
        "ilab.das.counterfactual_pairs",
        lambda c: ilab.das.counterfactual_pairs(c.model, ["a"], ["c"], ["the cat"]),
        V,
        r"labels\[0\]",
    ),
    Row(
        "ilab.das.CounterfactualPairs",
        lambda c: ilab.das.fit(c.model, ilab.das.CounterfactualPairs(["a"], ["b", "c"], ["d"]), SITE),
        V,
        "Got 1 base prompts but 2 source prompts",
    ),
    Row("ilab.das.as_pairs", lambda c: ilab.das.as_pairs(c.model, ["a"]), T, "pairs must be CounterfactualPairs"),
    Row(
        "ilab.das.fit",
        lambda c: ilab.das.fit(c.model, _das_pairs(c), SITE, k=33),
        V,
        r"k=33 is larger than the width of blocks.1.hook_resid_post \(d=32\)",
    ),
    Row(
        "ilab.das.fit",
        lambda c: ilab.das.fit(c.model, _das_pairs(c), SITE, positions=[0, 0]),
        V,
        "positions repeats an index",
    ),
    Row(
        "ilab.das.DASResult",
        lambda c: ilab.das.DASResult(SITE, [-1], torch.zeros(32, 2), *[0.0] * 5).direction,
        V,
        "k=2 dimensions; a direction needs k=1",
    ),
    Row(
        "ilab.das.DASResult.load",
        lambda c: ilab.das.DASResult.load(c.tmp / "nope.safetensors"),
        FileNotFoundError,
        "nope.safetensors",
    ),
    Row(
        "ilab.das.DASResult.save",
        lambda c: ilab.das.DASResult(SITE, [-1], torch.zeros(32, 1), *[0.0] * 5).save(c.tmp),
        IsADirectoryError,
        "Is a directory",
    ),
    Row(
        "ilab.das.layer_search",
        lambda c: ilab.das.layer_search(c.model, _das_pairs(c), kind="heads"),
        V,
        "kind='heads' is not one of",
    ),
    Row(
        "ilab.das.layer_search",
        lambda c: ilab.das.layer_search(c.model, _das_pairs(c), layers=[5]),
        V,
        r"layer must be an integer in 0\.\.1, got 5",
    ),
    Row("ilab.das.LayerSearch", lambda c: ilab.das.layer_search(c.model, _das_pairs(c), top=0), V, "top must be"),
    Row("ilab.das.knob_task", lambda c: ilab.das.knob_task(c.model), V, "Fewer than two facts"),
    Row(
        "ilab.das.KnobTask",
        lambda c: ilab.das.KnobTask([("a", "b", "c")]).prompt(3, "context"),
        V,
        r"i must be an integer in 0\.\.0, got 3",
    ),
    Row(
        "ilab.das.KnobTask.prompt",
        lambda c: ilab.das.KnobTask([("a", "b", "c")]).prompt(0, "guess"),
        V,
        r"intent='guess' is not one of \('context', 'prior'\)",
    ),
    Row(
        "ilab.das.KnobTask.prompts",
        lambda c: ilab.das.KnobTask([("a", "b", "c")]).prompts("guess"),
        V,
        "intent='guess'",
    ),
    Row(
        "ilab.das.KnobTask.answers",
        lambda c: ilab.das.KnobTask([("a", "b", "c")]).answers("guess"),
        V,
        "intent='guess'",
    ),
    Row(
        "ilab.das.KnobTask.logit_diffs",
        lambda c: ilab.das.KnobTask([("a", "b", "c")]).logit_diffs(c.model, ["a", "b"]),
        V,
        "Got 2 texts for 1 items",
    ),
    Row(
        "ilab.das.KnobTask.accuracy",
        lambda c: ilab.das.KnobTask([("a", "b", "c")]).accuracy("model"),
        T,
        "model must be an interplab Model, got str",
    ),
    Row("ilab.das.knob_sweep", lambda c: ilab.das.knob_sweep(c.model, "das", None), T, "das must be a DASResult"),
    Row(
        "ilab.das.KnobSweep",
        lambda c: ilab.das.knob_sweep(
            c.model,
            ilab.das.DASResult(SITE, [-1], torch.zeros(32, 1), *[0.0] * 5),
            ilab.das.KnobTask([("a", "b", "c")]),
            scales=[],
        ),
        V,
        "scales is empty",
    ),
    # ---------------------------------------------------------------- circuits
    Row("ilab.circuits.attribute", lambda c: ilab.circuits.attribute(c.model, [], "the cat"), V, "Supported families"),
    Row(
        "ilab.circuits.check_transcoders",
        lambda c: ilab.circuits.check_transcoders(c.model, "x"),
        T,
        "must be a list or a dict of transcoders",
    ),
    Row(
        "ilab.circuits.intervene",
        lambda c: ilab.circuits.intervene(_circuit()[0], _circuit()[1], "the cat", {}),
        V,
        "changes must be a non-empty",
    ),
    Row(
        "ilab.circuits.transcoder_quality",
        lambda c: ilab.circuits.transcoder_quality(c.model, [c.sae], ["a"]),
        T,
        "must be a transcoder",
    ),
    Row(
        "ilab.circuits.prune",
        lambda c: ilab.circuits.prune(torch.zeros(3, 3), 0, 2, 1, torch.ones(1), 2.0),
        V,
        r"node_threshold must be in \[0, 1\], got 2\.0",
    ),
    Row(
        "ilab.circuits.influence",
        lambda c: ilab.circuits.influence(torch.tensor([[0.0, 1], [1, 0]]), torch.tensor([1.0, 0])),
        RuntimeError,
        "cycle",
    ),
    Row("ilab.circuits.Graph.feature_index", lambda c: _circuit()[2].feature_index(99, 0, 0), V, "is not a node"),
    Row(
        "ilab.circuits.Graph.load",
        lambda c: ilab.circuits.Graph.load(c.tmp / "no-graph"),
        FileNotFoundError,
        "No attribution graph",
    ),
    Row("ilab.circuits.Graph.node", lambda c: _circuit()[2].node(10**6), IndexError, "out of range"),
    Row("ilab.circuits.Graph.prune", lambda c: _circuit()[2].prune(1.5), V, "node_threshold must be in \\[0, 1\\]"),
    Row(
        "ilab.circuits.Graph.to_json",
        lambda c: _circuit()[2].to_json(edge_threshold=-1),
        V,
        "edge_threshold must be in \\[0, 1\\]",
    ),
    Row("ilab.widgets.CircuitGraph", lambda c: ilab.widgets.CircuitGraph("g"), T, "shows an ilab.circuits.Graph"),
    Row(
        "ilab.widgets.CircuitGraph.group",
        lambda c: ilab.widgets.CircuitGraph(_circuit()[2]).group("", [0]),
        V,
        "non-empty label",
    ),
    Row(
        "ilab.widgets.CircuitGraph.set_row_text",
        lambda c: ilab.widgets.CircuitGraph(_circuit()[2]).set_row_text([1]),
        T,
        "labels must map latent ids",
    ),
    Row(
        "ilab.widgets.CircuitGraph.show_intervention",
        lambda c: ilab.widgets.CircuitGraph(_circuit()[2]).show_intervention({}),
        T,
        "takes an ilab.circuits.intervene",
    ),
    # ------------------------------------------------------------------ ilab.evals
    Row(
        "ilab.evals.polysemy",
        lambda c: ilab.evals.polysemy(
            c.sae, c.model, [ilab.evals.polysemy_word("dog cat", ["the dog cat"], ["a dog cat"])]
        ),
        V,
        "'dog cat' is not one token",
    ),
    Row(
        "ilab.evals.polysemy",
        lambda c: ilab.evals.polysemy(c.sae, c.model, batch_size=0),
        V,
        "batch_size must be a positive integer, got 0",
    ),
    Row(
        "ilab.evals.load_polysemy",
        lambda c: ilab.evals.load_polysemy(c.tmp / "none.json"),
        FileNotFoundError,
        r"none\.json",
    ),
    Row(
        "ilab.evals.polysemy_word",
        lambda c: ilab.evals.polysemy_word("bank", ["a bank"]),
        V,
        "needs at least two senses",
    ),
    Row(
        "ilab.evals.sparse_probing",
        lambda c: ilab.evals.sparse_probing(c.sae, c.model, TEXTS, ["a", "b"]),
        V,
        "one label per text: 3 texts, got 2 labels",
    ),
    Row(
        "ilab.evals.pooled_activations",
        lambda c: ilab.evals.pooled_activations(c.sae, c.model, TEXTS, SITE, max_tokens=0),
        V,
        "max_tokens must be a positive integer, got 0",
    ),
    Row(
        "ilab.evals.brown_genres",
        lambda c: ilab.evals.brown_genres(n_per_class=0),
        V,
        "n_per_class must be a positive integer, got 0",
    ),
    Row(
        "ilab.evals.absorption",
        lambda c: ilab.evals.absorption(c.sae, c.model, ["cat", "zebra"]),
        V,
        "'zebra' is not one token",
    ),
    Row(
        "ilab.evals.correlate",
        lambda c: ilab.evals.correlate(c.sae, c.model, TEXTS, "entropy"),
        V,
        "'entropy' is not one of",
    ),
    Row(
        "ilab.evals.CorrelationResult.causal_check",
        lambda c: ilab.evals.correlate(c.sae, c.model, TEXTS, "position").causal_check(
            c.sae, c.model, TEXTS, n_latents=0
        ),
        V,
        "n_latents must be a positive integer",
    ),
    Row(
        "ilab.evals.CorrelationResult.top",
        lambda c: ilab.evals.correlate(c.sae, c.model, TEXTS, "position").top(0),
        V,
        "n must be a positive integer, got 0",
    ),
    Row(
        "ilab.evals.CorrelationResult.chart",
        lambda c: ilab.evals.correlate(c.sae, c.model, TEXTS, "position").chart(-1),
        V,
        "n must be a positive integer, got -1",
    ),
    Row(
        "ilab.evals.attention_drift",
        lambda c: ilab.evals.attention_drift(c.model, "the cat sat", ["fox"], steer=(SITE, torch.ones(32))),
        V,
        "Target token 'fox' is not in the text",
    ),
    Row("ilab.evals.rank_one", lambda c: ilab.evals.rank_one("u", "v"), T, "u and v must be vectors"),
    Row(
        "ilab.evals.tiny_lm",
        lambda c: ilab.evals.tiny_lm(d_model=30, n_head=4),
        V,
        r"d_model \(30\) must be a multiple",
    ),
    Row("ilab.evals.byte_stream", lambda c: ilab.evals.byte_stream([]), V, "non-empty list of documents"),
    Row("ilab.evals.plant", lambda c: ilab.evals.plant(4, 1), V, "length must be an integer >= 2, got 1"),
    Row(
        "ilab.evals.sequence_losses",
        lambda c: ilab.evals.sequence_losses(_tiny_lm(), ilab.evals.plant(2, 40)),
        V,
        "length 40; the model reads 2..16",
    ),
    Row(
        "ilab.evals.perturbed_losses",
        lambda c: ilab.evals.perturbed_losses(_tiny_lm(), ilab.evals.plant(2, 8), sigma=-1),
        V,
        "sigma must be positive, got -1",
    ),
    Row(
        "ilab.evals.train_planted",
        lambda c: ilab.evals.train_planted(
            _tiny_lm(), torch.zeros(100, dtype=torch.long), ilab.evals.plant(2, 8)[:0], ilab.evals.plant(2, 8)
        ),
        V,
        "planted is empty",
    ),
    Row("ilab.evals.ce_diagnostic", lambda c: ilab.evals.ce_diagnostic([1.0], []), V, "control_ce_M is empty"),
    Row(
        "ilab.evals.latent_memorization", lambda c: ilab.evals.latent_memorization(None), T, "run must be a PlantedRun"
    ),
]


@functools.cache
def _tiny_lm() -> torch.nn.Module:
    return ilab.evals.tiny_lm(n_layer=1, d_model=16, n_head=2, n_ctx=16)


EXEMPT: dict[str, str] = {
    "ilab.jobs.train_suite": "the packaged suite's training recipe (python -m interplab train-suite)",
    "ilab.circuits.Graph": "built by ilab.circuits.attribute and Graph.load (which have rows)",
    "ilab.circuits.Graph.save": "writes the graph it holds to any folder path, atomically",
    "ilab.circuits.InterventionResult": "made by ilab.circuits.intervene (which has rows)",
    "ilab.circuits.InterventionResult.prob_change": "a token id indexes the logits it holds",
    "ilab.circuits.Pruned": "a NamedTuple of masks that prune returns",
    "ilab.circuits.embedded_transcoders": "takes no arguments",
    "ilab.widgets.CircuitGraph.view_index": "maps a graph node index to the widget's (None when pruned); no work",
    "ilab.das.DictionaryComparison": "the result compare_dictionaries builds (which has rows)",
    "ilab.circuits.graph_scores": "arrays of a Graph (Graph.scores); the thresholds-free twin of prune, which has rows",
    "ilab.default_corpus": "takes no arguments",
    "ilab.load_ipython_extension": "called by IPython's %load_ext with its own shell, never by users",
    "ilab.unload_ipython_extension": "called by IPython's %unload_ext with its own shell, never by users",
    "ilab.probes.ProbeResult": "a result built by ilab.probes.train (which has rows); users do not build it",
    "ilab.probes.BindingResult": "a result built by ilab.probes.fit_binding (which has rows)",
    "ilab.probes.BindingMatrix": "plain data built by BindingResult.matrix (which has rows)",
    "ilab.das.SupervisedDictionary": "built by ilab.das.supervised_dictionary (which has rows)",
    "ilab.probes.Probe": "one site's weights inside a ProbeResult (Probe.predict has rows)",
    "ilab.SAEEvaluation": "a result built by ilab.evaluate (which has rows); users do not construct it",
    "ilab.evals.PlantedRun": "a result built by ilab.evals.train_planted (which has rows)",
    "ilab.evals.MemorizationResult": "a result built by ilab.evals.latent_memorization (which has rows)",
    "ilab.SAEEvaluation.density_histogram": "bins: only numpy's histogram reads it, with numpy's own error",
    "ilab.HeatmapData": "a dataclass built by ilab.heatmap_data (which has rows)",
    "ilab.AttentionData": "a dataclass built by ilab.attention_data (which has rows)",
    "ilab.LogitLensResult": "a tensor made by ilab.logit_lens (which has rows); users do not construct it",
    "ilab.LogitLensResult.wrap": "how ilab.logit_lens builds its result from the logits it computed",
    "ilab.jobs.Job": "made by ilab.jobs.cache / feature_data / resume (which have rows)",
    "ilab.jobs.Job.result": "a Job exists only for a model on an NDIF server: tests/remote/test_ndif_jobs.py",
    "Model.remote_backend": "the per-request backend the engine builds for a remote model, from its own keywords",
    "ilab.jobs.jobs_dir": "takes no arguments",
    "ilab.jobs.list_jobs": "takes no arguments",
    "Model.forward_bytes": "the estimate behind the memory guards (Model.fit_batch has rows), fed by them",
    "Model.softcap": "applied by the engine to logit tensors it made",
    "ilab.SAE.with_defaults": "an architecture hook: training specs pass through _check_spec (train_sae has rows)",
    "ilab.SAE.tensor_shapes": "an architecture hook fed checked sizes by SAE.validate and the file readers",
    "ilab.SAE.skip_out": "the skip term forward adds after encode checked x (SAE.forward has rows)",
    "ilab.SAE.file_shapes": "tensor_shapes for a config SAE.validate or the file readers checked",
    "ilab.SAE.load_extra": "an architecture hook fed by the validated file readers (load_sae has rows)",
    "ilab.SAE.init_weights": "seed: any integer torch accepts; called by SAE.create and the trainer",
    "ilab.SAE.fold_input_scale": "called by the trainer with the scale it measured",
    "ilab.matching.fold": "takes an SAE (any SAE folds); match, which calls it, has rows",
    "ilab.matching.thresholds": "takes an SAE (any SAE has thresholds or ones); match has rows",
    "ilab.matching.align_ends": "lists of ints from token_ends; similarity, which calls it, has rows",
    "ilab.matching.explained_variance_chart": "draws the DataFrame explained_by_gap made (which has rows)",
    "ilab.matching.Folded": "a dataclass built by fold",
    "ilab.matching.Match": "a result built by match (which has rows)",
    "ilab.matching.Match.share_below": "bound: check_number, the same check every number passes",
    "ilab.matching.Similarity": "a result built by similarity / correlate (which have rows)",
    "ilab.matching.Stitching": "a result built by stitch (which has rows)",
    "ilab.evals.SAEEvaluation": "a result built by ilab.evaluate (which has rows); users do not construct it",
    "ilab.evals.AbsorptionResult": "a result built by ilab.evals.absorption (which has rows)",
    "ilab.evals.CorrelationResult": "a result built by ilab.evals.correlate (which has rows)",
    "ilab.evals.DriftResult": "a result built by ilab.evals.attention_drift (which has rows)",
    "ilab.evals.PolysemyResult": "a result built by ilab.evals.polysemy (which has rows)",
    "ilab.evals.ProbingResult": "a result built by ilab.evals.sparse_probing (which has rows)",
    "ilab.evals.SuiteResults": "a result built by ilab.evaluate(..., suites=) (which has rows)",
}


def resolve(name: str) -> Any:
    """The object a qualified public name (``ilab.features.FeatureData.load``, ``Model.logits``) names, or None."""
    head, *rest = name.split(".")
    obj: Any = {"ilab": ilab, "Model": Model}.get(head)
    for part in rest:
        obj = getattr(obj, part, None)
    return None if obj is None else _function(obj)


def test_every_public_function_has_a_row() -> None:
    public = public_callables()
    public_ids = {id(_function(obj)) for obj in public.values()}
    named = [r.target for r in ROWS] + list(EXEMPT)
    stale = sorted({n for n in named if resolve(n) is None or id(resolve(n)) not in public_ids})
    assert not stale, f"rows or exemptions for names that are not public functions: {stale}"
    covered = {id(resolve(n)) for n in named}
    missing = sorted(name for name, obj in public.items() if id(_function(obj)) not in covered)
    assert not missing, (
        "public functions without a bad-input row in tests/test_bad_input.py (add a Row, or an EXEMPT entry with "
        f"the reason): {missing}"
    )


def test_the_coverage_check_sees_a_new_function(monkeypatch: pytest.MonkeyPatch) -> None:
    def brand_new(x: int) -> int:
        return x

    monkeypatch.setattr(ilab.features, "brand_new", brand_new, raising=False)
    monkeypatch.setattr(ilab.features, "__all__", [*ilab.features.__all__, "brand_new"])
    with pytest.raises(AssertionError, match=r"without a bad-input row .*'ilab\.features\.brand_new'"):
        test_every_public_function_has_a_row()


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.target}-{i}" for i, r in enumerate(ROWS)])
def test_bad_input_gives_a_clear_error(row: Row, ctx: Ctx) -> None:
    with pytest.raises(row.exc, match=row.match):
        row.call(ctx)


def test_out_of_range_errors_are_both_index_and_value_errors() -> None:
    assert issubclass(OutOfRangeError, IndexError) and issubclass(OutOfRangeError, ValueError)


@pytest.mark.parametrize(("low", "high", "inside", "outside"), [
    ("(", ")", [0.5, 1e-9], [0.0, 1.0, -0.1]), ("(", "]", [1.0, 0.5], [0.0, 1.5]),
    ("[", "]", [0.0, 1.0], [-1e-9, 1.0000001]), ("[", ")", [0.0], [1.0]),
])  # fmt: skip
def test_one_fraction_check_for_every_interval(low, high, inside, outside):
    """core/checks.check_fraction: the interval's open and closed ends, and a message naming name, interval, value."""
    from interplab.core.checks import check_fraction

    for x in inside:
        assert check_fraction("share", x, low, high) == x
    for x in outside:
        with pytest.raises(ValueError, match=rf"share must be in \{low}0, 1\{high}, got {x!r}"):
            check_fraction("share", x, low, high)
    with pytest.raises(TypeError, match="share must be a number"):
        check_fraction("share", "0.5", low, high)
    with pytest.raises(ValueError, match=r"threshold is a cosine similarity in \(0, 1\)"):
        check_fraction("threshold", 2, what="a cosine similarity")
