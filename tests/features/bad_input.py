"""Bad inputs of feature data, labels and search (ilab.features): each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from interplab.core.memory.budget import MemoryBudgetError
from interplab.core.storage.readers import FileError

import interplab as ilab
from tests.contracts.rows import Ctx, I, Row, T, V, before_work
from tests.tiny import TEXTS


def _json_file(c: Ctx, name: str, content: Any) -> Path:
    folder = c.tmp / name
    folder.mkdir(exist_ok=True)
    (folder / "meta.json").write_text(json.dumps(content))
    return folder


ROWS: list[Row] = [
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
    Row(
        "ilab.features.FeatureData.to_neuronpedia",
        lambda c: c.data.to_neuronpedia(c.tmp / "np", sae_set="../up"),
        V,
        r"sae_set='\.\./up' must be a name of letters",
    ),
    Row(
        "ilab.features.FeatureData.to_neuronpedia",
        lambda c: c.data.to_neuronpedia(c.tmp / "np", batch_size=0),
        V,
        "batch_size",
    ),
    Row(
        "ilab.features.FeatureData.set_explanations",
        lambda c: c.data.set_explanations({0: "cats"}),
        T,
        "explained must be what ilab.autointerp.explain gives, not dict",
    ),
    Row(
        "ilab.features.FeatureData.distinct_top", lambda c: c.data.distinct_top([0, 99]), I, "Latent 99 is out of range"
    ),
    Row("ilab.features.FeatureData.max_tokens", lambda c: c.data.max_tokens(-1), I, "Latent -1 is out of range"),
    Row("ilab.features.FeatureData.suggest_label", lambda c: c.data.suggest_label(1.5), T, "got float"),
    Row("ilab.features.FeatureData.set_label", lambda c: c.data.set_label(1, 5), T, "A label is a string, got int"),
    Row(
        "ilab.features.FeatureData.set_label",
        lambda c: c.data.set_label(1, "x" * 3000),
        V,
        "A label is at most 2000 characters",
    ),
    Row(
        "ilab.features.FeatureData.set_label",
        lambda c: c.data.set_label(1, "bad\ud800label", save=False),
        V,
        r"The label is not valid Unicode: character 3 is a lone surrogate '\\ud800'",
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
    Row(
        "ilab.features.set_label",
        lambda c: ilab.features.set_label(c.sae, 1, "bad\ud800label"),
        V,
        r"The label is not valid Unicode: character 3 is a lone surrogate '\\ud800'",
    ),
    Row("ilab.features.suggest_label", lambda c: ilab.features.suggest_label(c.data, 99), I, "Latent 99"),
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
        "ilab.features.contrast",
        lambda c: ilab.features.contrast(c.sae, c.model, "the cat", ["a dog"]),
        T,
        r"positive is a list of texts; got one string 'the cat': write \['the cat'\]",
    ),
    Row(
        "ilab.features.contrast",
        lambda c: ilab.features.contrast(c.sae, c.model, ["the cat"], []),
        V,
        "negative: texts is empty",
    ),
    Row(
        "ilab.features.contrast",
        lambda c: ilab.features.contrast(c.sae, c.model, ["the cat"], ["a dog"], positions="first"),
        V,
        r"positions='first' is not one of \['all', 'last'\]",
    ),
    Row(
        "ilab.features.contrast",
        lambda c: ilab.features.contrast(c.sae, c.model, ["the cat"], ["a dog"], statistic="ratio"),
        V,
        r"statistic='ratio' is not one of \['diff', 'standardized'\]",
    ),
    Row(
        "ilab.features.contrast",
        lambda c: ilab.features.contrast(c.sae, c.model, ["the cat"], ["a dog"], max_density=10),
        V,
        r"max_density=10 is not a fraction of tokens in \(0, 1\]",
    ),
    Row(
        "ilab.features.contrast",
        lambda c: ilab.features.contrast(c.sae, c.model, ["the cat"], ["a dog"], density=[0.1, 0.2]),
        V,
        r"density needs one value per latent, shape \(24,\); got \(2,\)",
    ),
    Row(
        "ilab.features.contrast",
        lambda c: ilab.features.contrast(c.sae, c.model, ["the cat"], ["a dog"], top=0),
        V,
        "top must be a positive integer, got 0",
    ),
    Row(
        "ilab.features.text_activations",
        lambda c: ilab.features.text_activations(c.sae, c.model, ["the cat"], latents=[99]),
        V,
        r"latents \[99\] are out of range: the SAE has latents 0\.\.23",
    ),
    Row(
        "ilab.features.Contrast.held_out",
        lambda c: ilab.features.contrast(c.sae, c.model, ["the cat"], ["a dog"]).held_out(c.sae, c.model, [], ["x"]),
        V,
        "positive: texts is empty",
    ),
    Row(
        "ilab.features.active_latents",
        lambda c: ilab.features.active_latents(c.sae, c.model, "the cat", max_density="10%"),
        T,
        r"max_density is a fraction of tokens in \(0, 1\] or None, got '10%'",
    ),
    Row(
        "ilab.features.active_latents",
        lambda c: ilab.features.active_latents(c.sae, c.model, "the cat", density={"a": 1}),
        T,
        "density is FeatureData or one fraction per latent, got dict",
    ),
    Row(
        "ilab.feature_data",
        before_work(lambda c: ilab.feature_data(c.sae, c.model, TEXTS, n_logit=10**9)),
        V,
        r"n_logit \(tokens per latent, within the vocabulary\) must be an integer in 1\.\.\d+, got 1000000000",
    ),
    Row(
        "ilab.feature_data",
        before_work(
            lambda c: ilab.feature_data(c.sae, c.model, TEXTS, checkpoint_every=float("nan"), path=c.tmp / "fd-nan")
        ),
        V,
        r"checkpoint_every \(seconds\) must be finite, got nan",
    ),
]

EXEMPT: dict[str, str] = {
    "ilab.features.Contrast": "a result built by ilab.features.contrast (which has rows); users do not construct it",
}
