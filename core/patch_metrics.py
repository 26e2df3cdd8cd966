"""Patching metrics: functions of the final-position logits that say how "clean" a run looks.

A metric is built unbound (``logit_diff(" Mary", " John")``) and bound to a model and a set
of prompt pairs before use; the bound form maps logits ``[batch, vocab]`` and the pair each
row belongs to (``[batch]``) to one value per row. Any callable ``f(logits_BV) -> [batch]``
works too (or ``f(logits_BV, pair_B)`` to see which pair a row is).

Example
-------
>>> m = logit_diff(" Mary", " John")          # one answer for every pair
>>> m = logit_diff([" Mary", " Anna"], [" John", " Tom"])   # one per pair
>>> m = prob(" Paris"); m = kl_to_clean()
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .model import single_token_id

Answer = str | int | Sequence[str | int]


def _ids_per_pair(tokenizer: Any, answer: Answer, n_pairs: int, what: str) -> torch.Tensor:
    if isinstance(answer, (str, int)):
        return torch.full((n_pairs,), single_token_id(tokenizer, answer, what), dtype=torch.long)
    answers = list(answer)
    if len(answers) != n_pairs:
        raise ValueError(f"Got {len(answers)} {what}s for {n_pairs} prompt pairs; give one per pair or a single one.")
    return torch.tensor([single_token_id(tokenizer, a, what) for a in answers], dtype=torch.long)


@dataclass
class Metric:
    """An unbound patching metric; :meth:`bind` resolves tokens for a model and pairs."""

    name: str
    kind: str  # "logit_diff", "prob", "kl", "callable"
    answer: Any = None
    wrong: Any = None
    fn: Callable[..., Any] | None = None

    def bind(self, tokenizer: Any, n_pairs: int) -> BoundMetric:
        """Check answers against the tokenizer (before any forward pass) and fix them per pair."""
        ids = {}
        if self.kind in ("logit_diff", "prob"):
            ids["answer"] = _ids_per_pair(tokenizer, self.answer, n_pairs, "answer")
        if self.kind == "logit_diff":
            ids["wrong"] = _ids_per_pair(tokenizer, self.wrong, n_pairs, "wrong answer")
        return BoundMetric(self, ids)


class BoundMetric:
    """A metric ready to score logits: ``bound(logits_BV, pair_B) -> values_B``."""

    def __init__(self, metric: Metric, ids: dict[str, torch.Tensor]):
        self.metric = metric
        self.ids = ids
        self.clean_logprobs: torch.Tensor | None = None  # [n_pairs, vocab], for kl_to_clean
        self._two_args = False
        if metric.fn is not None:
            try:
                params = inspect.signature(metric.fn).parameters.values()
                positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
                self._two_args = len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)
            except (TypeError, ValueError):
                self._two_args = False

    @property
    def name(self) -> str:
        return self.metric.name

    def set_clean(self, clean_logits_NV: torch.Tensor) -> None:
        """Give the clean run's final logits (needed by ``kl_to_clean``)."""
        self.clean_logprobs = torch.log_softmax(clean_logits_NV.detach().float(), dim=-1)

    def __call__(self, logits_BV: torch.Tensor, pair_B: torch.Tensor) -> torch.Tensor:
        kind = self.metric.kind
        logits_BV = logits_BV.float()
        rows = torch.arange(logits_BV.shape[0])
        if kind == "logit_diff":
            a, w = self.ids["answer"][pair_B], self.ids["wrong"][pair_B]
            return logits_BV[rows, a] - logits_BV[rows, w]
        if kind == "prob":
            return torch.softmax(logits_BV, dim=-1)[rows, self.ids["answer"][pair_B]]
        if kind == "kl":
            if self.clean_logprobs is None:
                raise RuntimeError("kl_to_clean needs the clean logits: call set_clean first.")
            ref = self.clean_logprobs[pair_B]
            return (ref.exp() * (ref - torch.log_softmax(logits_BV, dim=-1))).sum(-1)
        assert self.metric.fn is not None
        out = self.metric.fn(logits_BV, pair_B) if self._two_args else self.metric.fn(logits_BV)
        out = torch.as_tensor(out, dtype=torch.float32)
        if out.ndim == 0:
            out = out.expand(logits_BV.shape[0]) if logits_BV.shape[0] == 1 else out
        if out.shape != (logits_BV.shape[0],):
            raise ValueError(
                f"The metric {self.name!r} returned shape {tuple(out.shape)} for logits of shape "
                f"{tuple(logits_BV.shape)}; it must return one value per row ([{logits_BV.shape[0]}])."
            )
        return out


def logit_diff(answer: Answer, wrong: Answer) -> Metric:
    """Logit of ``answer`` minus logit of ``wrong`` at the last position (per pair, or one for all).

    >>> ilab.patching.logit_diff(" Mary", " John")
    """
    return Metric("logit_diff", "logit_diff", answer=answer, wrong=wrong)


def prob(answer: Answer) -> Metric:
    """Probability of ``answer`` at the last position.

    >>> ilab.patching.prob(" Paris")
    """
    return Metric("prob", "prob", answer=answer)


def kl_to_clean() -> Metric:
    """KL(clean || patched) of the next-token distributions, in nats (0 for the clean run).

    >>> ilab.patching.kl_to_clean()
    """
    return Metric("kl_to_clean", "kl")


def as_metric(metric: Metric | Callable[..., Any]) -> Metric:
    """Accept a :class:`Metric` or any callable on final logits ``[batch, vocab]``."""
    if isinstance(metric, Metric):
        return metric
    if isinstance(metric, BoundMetric):
        return metric.metric
    if callable(metric):
        return Metric(getattr(metric, "__name__", "metric"), "callable", fn=metric)
    raise TypeError(
        f"metric must be logit_diff(...), prob(...), kl_to_clean() or a callable on logits [batch, vocab]; "
        f"got {type(metric).__name__}: {metric!r}."
    )
