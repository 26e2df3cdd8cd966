"""Bad inputs of ilab.evaluate and ilab.evals: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

import interplab as ilab
from tests.contracts.rows import SITE, Row, T, V, before_work
from tests.tiny import TEXTS


def _narrow_sae() -> Any:
    return ilab.SAE.create("topk", d_in=8, d_sae=8, k=2, site=SITE)


@functools.cache
def _tiny_lm() -> torch.nn.Module:
    return ilab.evals.tiny_lm(n_layer=1, d_model=16, n_head=2, n_ctx=16)


ROWS: list[Row] = [
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
    Row(
        "ilab.evals.null_run",
        lambda c: ilab.evals.null_run("run"),
        T,
        r"run must be a PlantedRun \(from train_planted\), got str",
    ),
    Row("ilab.evals.uncovered_later", lambda c: ilab.evals.uncovered_later(None), T, "run must be a PlantedRun"),
    Row(
        "ilab.evals.MemorizationResult.claims",
        lambda c: ilab.evals.MemorizationResult(*[None] * 4).claims(p=2),
        V,
        r"p must be in \(0, 1\), got 2",
    ),
    Row("ilab.evals.one_sided_p", lambda c: ilab.evals.one_sided_p([True], []), V, "control_hits is empty"),
    Row(
        "ilab.evaluate",
        before_work(lambda c: ilab.evaluate(c.sae, c.model, TEXTS, dense_threshold=float("nan"))),
        V,
        "dense_threshold must be finite, got nan",
    ),
    Row(
        "ilab.evaluate",
        before_work(lambda c: ilab.evaluate(c.sae, c.model, TEXTS, dense_threshold=-1)),
        V,
        r"dense_threshold is a fraction of tokens, so in \[0, 1\], got -1",
    ),
    Row(
        "ilab.evaluate",
        before_work(lambda c: ilab.evaluate(None, c.model, TEXTS)),
        T,
        r"sae must be an interplab SAE \(ilab\.SAE\), got NoneType",
    ),
]

EXEMPT: dict[str, str] = {
    "ilab.SAEEvaluation": "a result built by ilab.evaluate (which has rows); users do not construct it",
    "ilab.evals.PlantedRun": "a result built by ilab.evals.train_planted (which has rows)",
    "ilab.evals.MemorizationResult": "a result built by ilab.evals.latent_memorization (which has rows)",
    "ilab.SAEEvaluation.density_histogram": "bins: only numpy's histogram reads it, with numpy's own error",
    "ilab.evals.SAEEvaluation": "a result built by ilab.evaluate (which has rows); users do not construct it",
    "ilab.evals.AbsorptionResult": "a result built by ilab.evals.absorption (which has rows)",
    "ilab.evals.CorrelationResult": "a result built by ilab.evals.correlate (which has rows)",
    "ilab.evals.DriftResult": "a result built by ilab.evals.attention_drift (which has rows)",
    "ilab.evals.PolysemyResult": "a result built by ilab.evals.polysemy (which has rows)",
    "ilab.evals.ProbingResult": "a result built by ilab.evals.sparse_probing (which has rows)",
    "ilab.evals.SuiteResults": "a result built by ilab.evaluate(..., suites=) (which has rows)",
}
