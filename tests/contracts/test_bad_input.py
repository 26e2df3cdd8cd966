"""Every public function with its bad inputs and the error each must give: one table, run in ``make test``.

The public surface is read from the code: every callable in ``ilab.__all__``, ``ilab.patching``,
``ilab.steering``, ``ilab.features``, ``ilab.metrics`` and ``ilab.widgets`` (classes are their
constructors), every method of those classes (and of :class:`~interplab.Model`) that takes an
argument. Each capability lists its rows in ``tests/<capability>/bad_input.py`` (``ROWS``, and
``EXEMPT`` with a reason for a function without bad input); this module gathers every such file.
:func:`test_every_public_function_has_a_row` fails for a name that has neither a row nor an
exemption, so a new function cannot ship without its row. Each row calls its function with one bad
input on tiny models and checks the exception type and that the message names the bad value or what
is valid.
"""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from interplab.core.checks import OutOfRangeError
from interplab.core.data.store import ActivationStore
from interplab.core.features import feature_data
from interplab.core.model.model import Model
from interplab.core.saes import train_sae

import interplab as ilab
from tests.contracts.rows import Ctx, Row, make_ctx
from tests.contracts.test_crash_safety import CORPUS, SITE, _sae
from tests.tiny import TEXTS, tiny_model

NAMESPACES = {"ilab": ilab, "ilab.patching": ilab.patching, "ilab.steering": ilab.steering,
              "ilab.features": ilab.features, "ilab.metrics": ilab.metrics, "ilab.widgets": ilab.widgets,
              "ilab.jobs": ilab.jobs, "ilab.matching": ilab.matching, "ilab.probes": ilab.probes,
              "ilab.das": ilab.das, "ilab.circuits": ilab.circuits, "ilab.evals": ilab.evals,
              "ilab.train": ilab.train, "ilab.agents": ilab.agents,
              "ilab.autointerp": ilab.autointerp, "ilab.vision": ilab.vision}  # fmt: skip
TESTS = Path(__file__).resolve().parents[1]
#: ``tests/<capability>/bad_input.py`` of every capability, in the order of their folders' names.
CAPABILITIES = {p.parent.name: importlib.import_module(f"tests.{p.parent.name}.bad_input")
                for p in sorted(TESTS.glob("*/bad_input.py"))}  # fmt: skip
ROWS: list[Row] = [row for module in CAPABILITIES.values() for row in module.ROWS]
EXEMPT: dict[str, str] = {name: why for module in CAPABILITIES.values() for name, why in
                          getattr(module, "EXEMPT", {}).items()}  # fmt: skip


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


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Ctx:
    tmp = tmp_path_factory.mktemp("bad-input")
    mp = pytest.MonkeyPatch()
    mp.setenv("INTERPLAB_CACHE", str(tmp / "cache"))
    yield make_ctx(tmp)
    mp.undo()


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
        "public functions without a bad-input row in tests/<capability>/bad_input.py (add a Row, or an EXEMPT "
        f"entry with the reason): {missing}"
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


@pytest.fixture(scope="module")
def gpt2():
    return tiny_model("gpt2")


@pytest.fixture
def cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TQDM_DISABLE", "1")


@pytest.fixture
def store(gpt2, tmp_path, cache_in_tmp) -> ActivationStore:
    return gpt2.cache(CORPUS, SITE, tmp_path / "acts", n_tokens=512, context_size=16)


def test_bad_arguments_give_errors_that_name_them(cache_in_tmp, gpt2, store, tmp_path):
    """One bad argument a call, on a real store and a corpus file broken at line 1,001: each error names it."""
    sae = _sae()
    acts = gpt2.collect(TEXTS, SITE)
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text("\n".join([json.dumps({"text": "the cat"})] * 1000 + ["{broken"]) + "\n")
    cases = [
        (lambda: gpt2.logits(TEXTS, positions=[]), ValueError, "positions is empty"),
        (lambda: gpt2.logits(TEXTS, positions=True), TypeError, "positions must be token indices.*True"),
        (lambda: gpt2.collect(TEXTS, sites=None), TypeError, "sites must be a name or a non-empty list"),
        (lambda: gpt2.to_str_tokens([10**9]), ValueError, r"Token id 1000000000 is outside the vocabulary \(0\."),
        (
            lambda: gpt2.cache(CORPUS, SITE, tmp_path / "c", batch_size=2.5),
            ValueError,
            "batch_size must be a positive integer, got 2.5",
        ),
        (lambda: store.batches(64, buffer_shards=0), ValueError, "buffer_shards must be a positive integer, got 0"),
        (lambda: train_sae(store, batch_size=0), ValueError, "batch_size must be a positive integer, got 0"),
        (lambda: ilab.metrics.logit_diff(None, " John"), TypeError, "answer must be a token .* got NoneType"),
        (
            lambda: ilab.patching.ioi(gpt2, templates=["When{A} and{B} went,{S} gave {0} to"]),
            ValueError,
            r"has fields \['0'\]; only \{A\}, \{B\} and \{S\}",
        ),
        (lambda: ilab.widgets.FeatureHeatmap(acts, features=[]), ValueError, "features is empty"),
        (
            lambda: setattr(ilab.widgets.TokenHeatmap(["a", "b"], [1.0, 2.0]), "selected_token", 5),
            Exception,
            r"selected_token=5 is out of range: tokens are 0\.\.1",
        ),
        (
            lambda: ilab.widgets.FeatureHeatmap(acts, "notasae"),
            TypeError,
            "the second argument is an SAE .* got str: 'notasae'",
        ),
        (lambda: feature_data(sae, gpt2, jsonl), ValueError, r"corpus\.jsonl:1001: expected a JSON object"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()
