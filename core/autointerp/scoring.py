"""score: how well each explanation predicts its latent, beside two baselines measured in the same run.

* **detection** (delphi, SAEBench): shown one held-out example unmarked, does the latent fire in it? The scorer's
  P(Yes) over held-out activating examples and as many non-activating ones gives AUROC and balanced accuracy.
* **fuzzing** (delphi): shown an activating example with marked tokens, are the marked tokens the activating ones?
  Each example appears marked correctly and marked at as many random other tokens: AUROC and balanced accuracy.
* **simulation** (OpenAI's, SAEBench): from the explanation alone, predict every token's activation (the expected
  digit 0-9, all tokens in one forward pass); the Pearson correlation with the real activations. Local models only.

Each score is reported for the latent's own explanation, for another explained latent's (``shuffled``) and for a
constant explanation (``constant``); ``beats_shuffled`` says whether the own one scored higher.

Example
-------
>>> scores = ilab.autointerp.score(data, explanations, scorers=("detection", "fuzzing"))
>>> scores.table.groupby("scorer")[["explanation", "shuffled", "constant"]].mean()
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..checks import check_float, check_int, check_positive_int
from .clients import chat_client
from .examples import Example, marked_text, negative_examples, split_examples
from .explain import Explanations, check_latents
from .prompts import conversation, prompts_with

SCORERS = ("detection", "fuzzing", "simulation")
METRIC = {"detection": "auroc", "fuzzing": "auroc", "simulation": "correlation"}


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """The probability that a random positive scores above a random negative (ties count half)."""
    pos, neg = scores[labels], scores[~labels]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    above = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(above / (len(pos) * len(neg)))


def balanced_accuracy(scores: np.ndarray, labels: np.ndarray, threshold: float = 0.5) -> float:
    """The mean of the true-positive and true-negative rates at ``threshold``."""
    said = scores > threshold
    return float(0.5 * ((said[labels]).mean() + (~said[~labels]).mean()))


@dataclass
class Scores:
    """One row per (latent, scorer, metric): the own explanation's score and both baselines' (a pandas table)."""

    table: Any
    scorer_model: str

    def __repr__(self) -> str:
        return f"Scores({len(self.table)} rows by {self.scorer_model!r})"

    def summary(self) -> Any:
        """Mean score per scorer and metric, beside both baselines, and the share of latents beating shuffled."""
        cols = ["explanation", "shuffled", "constant", "beats_shuffled"]
        return self.table.groupby(["scorer", "metric"])[cols].mean()


def _detection_items(pos: list[Example], neg: list[Example]) -> tuple[list[str], np.ndarray]:
    return [e.text for e in pos + neg], np.array([True] * len(pos) + [False] * len(neg))


def _fuzzing_items(pos: list[Example], threshold: float, rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    texts, labels = [], []
    for e in pos:
        right = e.active(threshold)
        wrong = np.zeros_like(right)
        others = np.flatnonzero(~right)
        wrong[rng.choice(others, size=min(len(others), max(1, int(right.sum()))), replace=False)] = True
        texts += [marked_text(e.tokens, right), marked_text(e.tokens, wrong)]
        labels += [True, False]
    return texts, np.array(labels)


def _simulate(client: Any, templates: dict, explanation: str, examples: list[Example]) -> np.ndarray:
    asked = conversation(templates, "simulation", explanation=explanation)
    items = [(asked, [repr(t)[1:-1] or " " for t in e.tokens]) for e in examples]
    if hasattr(client, "digit_expectations_batch"):
        return np.concatenate(client.digit_expectations_batch(items))
    return np.concatenate([client.digit_expectations(m, lines) for m, lines in items])


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    if a.std() == 0 or b.std() == 0:
        return 0.0
    return float(np.corrcoef(a, b)[0, 1])


@dataclass
class _Planned:
    """One latent's questions of one scorer: the slice of the run's Yes/No questions each explanation asked, and
    their labels; or, for simulation, the scores already measured."""

    kind: str
    labels: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    spans: dict[str, slice] = field(default_factory=dict)
    got: dict[str, dict[str, float]] = field(default_factory=dict)


def _plan(kind: str, client: Any, templates: dict, explanations: dict[str, str], pos: list[Example],
          neg: list[Example], threshold: float, rng: np.random.Generator, questions: list) -> _Planned:  # fmt: skip
    """Scorer ``kind`` for one latent: its Yes/No questions appended to ``questions`` (asked later, all at once),
    or the simulation's correlations measured now."""
    if kind == "simulation":
        real = np.concatenate([e.acts for e in pos + neg])
        got = {w: {"correlation": _correlation(_simulate(client, templates, text, pos + neg), real)}
               for w, text in explanations.items()}  # fmt: skip
        return _Planned(kind, got=got)
    texts, labels = _detection_items(pos, neg) if kind == "detection" else _fuzzing_items(pos, threshold, rng)
    planned = _Planned(kind, labels)
    for which, text in explanations.items():
        start = len(questions)
        questions += [conversation(templates, kind, explanation=text, text=t) for t in texts]
        planned.spans[which] = slice(start, len(questions))
    return planned


def _rows(planned: _Planned, p_yes: np.ndarray) -> list[dict]:
    """The metric rows of one latent's scorer from the answers ``p_yes`` to the run's questions."""
    got = planned.got or {
        which: {
            "auroc": auroc(p_yes[span], planned.labels),
            "balanced_accuracy": balanced_accuracy(p_yes[span], planned.labels),
        }
        for which, span in planned.spans.items()
    }
    return [{"scorer": planned.kind, "metric": m, **{w: got[w][m] for w in got}} for m in got["explanation"]]


def score(
    data: Any,
    explanations: Explanations,
    scorers: Sequence[str] | str = ("detection", "fuzzing"),
    model: Any = None,
    *,
    n_examples: int = 10,
    threshold: float = 0.3,
    seed: int = 0,
    prompts: dict[str, str] | None = None,
) -> Scores:
    """Score every explained latent with each of ``scorers`` (:data:`SCORERS`) on up to ``n_examples`` held-out
    examples (and as many non-activating ones), beside the shuffled and constant baselines.

    ``model`` asks the questions: as ``explain``'s ``explainer`` (default the embedded SmolLM2-135M-Instruct).
    ``threshold``: tokens above it x the example's max count as activating (fuzzing's marks).
    """
    scorers = [scorers] if isinstance(scorers, str) else list(scorers)
    unknown = [s for s in scorers if s not in SCORERS]
    if unknown or not scorers:
        raise ValueError(f"scorers={scorers!r} holds an unknown scorer {unknown[:1]}; choose from {list(SCORERS)}.")
    if not isinstance(explanations, Explanations):
        raise TypeError(f"explanations must be what ilab.autointerp.explain gives, not {type(explanations).__name__}.")
    ids = check_latents(data, list(explanations.texts))
    if len(ids) < 2:
        raise ValueError("score needs at least 2 explained latents: the shuffled baseline is another latent's.")
    n_examples, seed = check_positive_int("n_examples", n_examples), check_int("seed", seed)
    threshold = check_float("threshold", threshold, 0.0, 1.0)
    templates = prompts_with(prompts)
    client = chat_client(model)
    if "simulation" in scorers and not hasattr(client, "digit_expectations"):
        raise ValueError(f"simulation needs per-token log-probabilities of a local model; {client.name!r} gives none.")
    rng = np.random.default_rng(seed)
    shuffled = dict(zip(ids, np.roll(ids, 1 + int(rng.integers(len(ids) - 1))).tolist()))
    n_explain = int(explanations.settings.get("n_examples", 8))
    planned: list[tuple[int, _Planned]] = []
    questions: list = []
    for i in ids:
        pos = split_examples(data, i, n_explain)[1][:n_examples]
        neg = negative_examples(data, i, len(pos), rng)
        texts = {"explanation": explanations.texts[i], "shuffled": explanations.texts[shuffled[i]],
                 "constant": templates["constant"]}  # fmt: skip
        for kind in scorers:
            planned.append((i, _plan(kind, client, templates, texts, pos, neg, threshold, rng, questions)))
    # every latent's Yes/No questions in one call: a local model batches them all over their shared prefix
    p_yes = np.asarray(client.yes_probability(questions), dtype=np.float64) if questions else np.zeros(0)
    rows = [{"latent": i, **row, "shuffled_from": shuffled[i]} for i, plan in planned for row in _rows(plan, p_yes)]
    return scores_table(rows, client.name)


def scores_table(rows: list[dict], name: str) -> Scores:
    """The :class:`Scores` of metric rows (``latent``, ``scorer``, ``metric``, the three scores, ``shuffled_from``)."""
    import pandas as pd

    table = pd.DataFrame(rows)
    table["beats_shuffled"] = table["explanation"] > table["shuffled"]
    return Scores(table, name)
