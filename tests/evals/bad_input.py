"""Bad inputs of ilab.evaluate and ilab.evals: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

import functools
from typing import Any

import pandas as pd
import torch

import interplab as ilab
from tests.contracts.rows import SITE, Row, T, V, before_work
from tests.tiny import TEXTS


def _narrow_sae() -> Any:
    return ilab.SAE.create("topk", d_in=8, d_sae=8, k=2, site=SITE)


def _pareto_result() -> Any:
    from interplab.core.evals.pareto import METRICS

    table = pd.DataFrame({"name": ["a", "b", "c"], "l0": [1.0, 2.0, 3.0], "nmse": [0.5, 0.4, 0.6],
                          "frontier_gap": [0.0, 0.0, 0.176], "on_frontier": [True, True, False],
                          **{m: [0.5, 0.6, 0.4] for m in METRICS}})  # fmt: skip
    return ilab.evals.ParetoResult(table)


def _edit(c: Any) -> Any:
    return ilab.evals.rank_one_edit(c.model, "the cat sat on the", " mat", 0, steps=1, progress=False)


def _td_result() -> Any:
    import numpy as np

    task = ilab.evals.bandit(2, 3)
    latents = pd.DataFrame({"latent": [0, 1], "r_td": [0.5, 0.1], "r_reward": [0.4, 0.1], "r_shuffled": [0.0, 0.1]})
    fit = {"alpha": 0.5, "beta": 1.0, "bias": 0.0, "r2": 0.1}
    return ilab.evals.TDResult(SITE, fit, np.zeros((2, 3)), np.zeros((2, 3)), latents, task)


def _td_result_checked() -> Any:
    td = _td_result()
    td.causal = pd.DataFrame({"which": ["top", "random"], "mean_abs_change": [0.1, 0.1]})
    return td


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
    Row(
        "ilab.evals.pareto",
        before_work(lambda c: ilab.evals.pareto([c.sae], c.model, torch.zeros(4, c.sae.cfg.d_in))),
        V,
        "saes must be a list of at least 2 SAEs",
    ),
    Row(
        "ilab.evals.pareto",
        before_work(lambda c: ilab.evals.pareto([c.sae, c.sae], c.model, torch.zeros(4, 3))),
        V,
        r"must be a tensor \[tokens >= 2, \d+\], got \(4, 3\)",
    ),
    Row(
        "ilab.evals.pareto",
        before_work(lambda c: ilab.evals.pareto([c.sae, c.sae], c.model, {"blocks.9.x": torch.zeros(4, 3)})),
        V,
        r"acts has no activations for .* site 'blocks\.1\.hook_resid_post'; it has \['blocks\.9\.x'\]",
    ),
    Row(
        "ilab.evals.pareto",
        before_work(lambda c: ilab.evals.pareto([c.sae, c.sae], c.model, torch.zeros(4, c.sae.cfg.d_in), names=["a"])),
        V,
        r"names must be 2 distinct strings, one per SAE, got \['a'\]",
    ),
    Row(
        "ilab.evals.ParetoResult.rank_correlation",
        lambda c: _pareto_result().rank_correlation("f1"),
        V,
        r"metric: 'f1' is not one of \['accuracy', 'precision', 'recall', 'specificity'\]",
    ),
    Row(
        "ilab.evals.ParetoResult.chart",
        lambda c: _pareto_result().chart("f1"),
        V,
        r"metric: 'f1' is not one of \['accuracy'",
    ),
    Row(
        "ilab.evals.ParetoResult.beats",
        lambda c: _pareto_result().beats([], "recall"),
        V,
        r"control must be a non-empty list of PolysemyResult, got \[\]",
    ),
    Row(
        "ilab.evals.frontier_gap",
        lambda c: ilab.evals.frontier_gap([1, 2], [0.5, 0.0]),
        V,
        r"nmse must be positive and finite and l0 finite, got nmse=\[0\.5, 0\.0\]",
    ),
    Row(
        "ilab.evals.rank_one_edit",
        before_work(lambda c: ilab.evals.rank_one_edit(c.model, "the cat sat on the", " mat", 5)),
        V,
        "layer must be",
    ),
    Row(
        "ilab.evals.rank_one_edit",
        before_work(lambda c: ilab.evals.rank_one_edit(c.model, "the cat sat on the", " mat dog", 0)),
        V,
        r"target ' mat dog' is 2 tokens, not one",
    ),
    Row(
        "ilab.evals.rank_one_edit",
        before_work(lambda c: ilab.evals.rank_one_edit(c.model, "the cat sat on the", " mat", 0, subject="the fox")),
        V,
        "subject 'the fox' is not in the text 'the cat sat on the'",
    ),
    Row(
        "ilab.evals.rank_one_edit",
        before_work(lambda c: ilab.evals.rank_one_edit(c.model, ["the cat", "a dog"], [" mat", " sat", " on"], 0)),
        V,
        r"target has 3 entries; give one per prompt \(2\)",
    ),
    Row(
        "ilab.evals.rank_one_edit",
        before_work(lambda c: ilab.evals.rank_one_edit(c.model, "the cat sat on the", " mat", 0, sadr=-1)),
        V,
        "sadr must be a number >= 0.0, got -1",
    ),
    Row("ilab.evals.RankOneEdit.weight_delta", lambda c: _edit(c).weight_delta(3), V, "fact must be"),
    Row("ilab.evals.RankOneEdit.applied", lambda c: _edit(c).applied(c.model, -1).__enter__(), V, "fact must be"),
    Row("ilab.evals.RankOneEdit.random_like", lambda c: _edit(c).random_like(-2), V, "seed must be"),
    Row(
        "ilab.evals.edit_effects",
        lambda c: ilab.evals.edit_effects(c.model, _edit(c), [("the dog sat on the", " mat")]),
        V,
        r"template 'the dog sat on the' has no '\{fact\}'",
    ),
    Row(
        "ilab.evals.edit_effects",
        lambda c: ilab.evals.edit_effects(c.model, _edit(c), []),
        V,
        "neighbours must be a non-empty list",
    ),
    Row("ilab.evals.bandit", lambda c: ilab.evals.bandit(n_rounds=0), V, "n_rounds must be a positive integer"),
    Row(
        "ilab.evals.bandit",
        lambda c: ilab.evals.bandit(p_reward=(0.8, 1.5)),
        V,
        r"p_reward must be a number >= 0.0 and <= 1.0, got 1.5",
    ),
    Row(
        "ilab.evals.td_latents",
        before_work(lambda c: ilab.evals.td_latents(c.model, c.sae, ilab.evals.bandit(2, 3))),
        V,
        "arm ' A' is the unknown token",
    ),
    Row(
        "ilab.evals.td_latents",
        before_work(lambda c: ilab.evals.td_latents(c.model, c.sae, ["Round 1: machine A, win."])),
        T,
        "task must be a Bandit from ilab.evals.bandit",
    ),
    Row("ilab.evals.TDResult.top", lambda c: _td_result().top(0), V, "n must be a positive integer"),
    Row("ilab.evals.TDResult.chart", lambda c: _td_result().chart(0), V, "n must be a positive integer"),
    Row(
        "ilab.evals.TDResult.causal_check",
        lambda c: _td_result().causal_check(c.model, c.sae, n_latents=0),
        V,
        "n_latents must be a positive integer",
    ),
    Row("ilab.evals.TDResult.claims", lambda c: _td_result().claims(), V, r"claims needs the causal check"),
    Row(
        "ilab.evals.TDResult.claims",
        lambda c: _td_result_checked().claims(min_p_better=0.2),
        V,
        r"min_p_better",
    ),
]

EXEMPT: dict[str, str] = {
    "ilab.evals.Bandit": "plain data built by ilab.evals.bandit (which has rows)",
    "ilab.evals.TDResult": "a result built by ilab.evals.td_latents (which has rows)",
    "ilab.evals.RankOneEdit": "a result built by ilab.evals.rank_one_edit (which has rows)",
    "ilab.evals.EditEffects": "a result built by ilab.evals.edit_effects (which has rows)",
    "ilab.SAEEvaluation": "a result built by ilab.evaluate (which has rows); users do not construct it",
    "ilab.evals.PlantedRun": "a result built by ilab.evals.train_planted (which has rows)",
    "ilab.evals.MemorizationResult": "a result built by ilab.evals.latent_memorization (which has rows)",
    "ilab.SAEEvaluation.density_histogram": "bins: only numpy's histogram reads it, with numpy's own error",
    "ilab.evals.SAEEvaluation": "a result built by ilab.evaluate (which has rows); users do not construct it",
    "ilab.evals.AbsorptionResult": "a result built by ilab.evals.absorption (which has rows)",
    "ilab.evals.CorrelationResult": "a result built by ilab.evals.correlate (which has rows)",
    "ilab.evals.DriftResult": "a result built by ilab.evals.attention_drift (which has rows)",
    "ilab.evals.ParetoResult": "a result built by ilab.evals.pareto (which has rows)",
    "ilab.evals.PolysemyResult": "a result built by ilab.evals.polysemy (which has rows)",
    "ilab.evals.ProbingResult": "a result built by ilab.evals.sparse_probing (which has rows)",
    "ilab.evals.SuiteResults": "a result built by ilab.evaluate(..., suites=) (which has rows)",
}
