"""Metrics on final-position logits, one vocabulary for patching, steering and every later capability.

A metric is built unbound (``logit_diff(" Mary", " John")``) and bound to a tokenizer before use,
which checks every answer is one token before any forward pass. A bound metric maps logits
``[rows, vocab]`` (and, for per-pair answers, the pair each row belongs to) to one value per row.

An answer is a token (a string or an id), a **set** of tokens (their mean logit for
``logit_diff``, their total probability for ``prob``), or a **list** with one such answer per
prompt pair. Any callable ``f(logits_BV) -> [rows]`` (or ``f(logits_BV, pair_B)``) is a metric too.

Example
-------
>>> m = logit_diff(" Mary", " John")                                     # one answer for every row
>>> m = logit_diff([" Mary", " Anna"], [" John", " Tom"])                # one per pair
>>> m = logit_diff({" great", " good"}, {" bad", " awful"}).on(model)    # sets: mean logit of each
>>> m(model.logits(["The film was"])[:, -1]), m.score(model.logits(["The film was"])[:, -1])
>>> m = prob(" Paris"); m = kl_to_clean()
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..checks import single_token_id
from ..model.trace_ops import log_probs, token_probs

__all__ = ["Answer", "BoundMetric", "Metric", "as_metric", "kl_to_clean", "logit_diff", "prob"]

Answer = str | int | set[str | int] | frozenset[str | int] | Sequence[Any]


def _token_id(tokenizer: Any, answer: str | int, what: str) -> int:
    """:func:`single_token_id`, warning when a bare word was given whose spaced form is one token.

    After a word the next token usually starts with a space (``" Paris"``, not ``"Paris"``), so a bare
    answer is most often a slip that measures the wrong token.
    """
    token = single_token_id(tokenizer, answer, what)
    if isinstance(answer, str) and answer[:1].isalnum():
        spaced = tokenizer(" " + answer, add_special_tokens=False)["input_ids"]
        if len(spaced) == 1 and spaced[0] != token and spaced[0] != getattr(tokenizer, "unk_token_id", None):
            warnings.warn(
                f"{what} {answer!r} has no leading space, but {' ' + answer!r} is one token too: after a word the "
                f"model predicts {' ' + answer!r}. Pass {' ' + answer!r} unless you mean the bare token "
                "(e.g. at the start of a line).",
                UserWarning,
                stacklevel=5,
            )
    return token


def _group(tokenizer: Any, answer: Any, what: str) -> list[int]:
    """One answer (a token, or a set of tokens) as its token ids."""
    if isinstance(answer, (set, frozenset)):
        if not answer:
            raise ValueError(f"{what} is an empty set; give at least one token.")
        return sorted(_token_id(tokenizer, a, what) for a in answer)
    if answer is None or not isinstance(answer, (str, int)):
        raise TypeError(
            f"{what} must be a token (a string or an id), a set of tokens or a list of them (one per pair); "
            f"got {type(answer).__name__}: {answer!r}."
        )
    return [_token_id(tokenizer, answer, what)]


def _ids_per_pair(tokenizer: Any, answer: Answer, n_pairs: int | None, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids [n_pairs (1 if shared), G] and a mask of the real ones (groups padded to one width)."""
    if isinstance(answer, (str, int, set, frozenset)) or answer is None:
        groups = [_group(tokenizer, answer, what)]
    else:
        answers = list(answer)
        if n_pairs is None:
            raise ValueError(
                f"{what} is a list (one per pair), but this metric is not bound to pairs; give one token or a set "
                "of tokens, or bind it with metric.bind(tokenizer, n_pairs)."
            )
        if len(answers) != n_pairs:
            raise ValueError(
                f"Got {len(answers)} {what}s for {n_pairs} prompt pairs; give one per pair or a single one."
            )
        groups = [_group(tokenizer, a, f"{what}[{i}]") for i, a in enumerate(answers)]
    width = max(len(g) for g in groups)
    ids = torch.zeros(len(groups), width, dtype=torch.long)
    mask = torch.zeros(len(groups), width, dtype=torch.bool)
    for i, g in enumerate(groups):
        ids[i, : len(g)] = torch.tensor(g)
        mask[i, : len(g)] = True
    if n_pairs is not None and len(groups) == 1:
        ids, mask = ids.expand(n_pairs, -1), mask.expand(n_pairs, -1)
    return ids, mask


def check_logits(logits_BV: Any) -> torch.Tensor:
    """Final-position logits: a floating tensor [rows, vocab]; a clear error for anything else."""
    if not isinstance(logits_BV, torch.Tensor) or not logits_BV.is_floating_point():
        raise TypeError(f"A metric reads logits, a float tensor [rows, vocab]; got {type(logits_BV).__name__}.")
    if logits_BV.ndim != 2:
        raise ValueError(
            f"A metric reads final-position logits [rows, vocab]; got shape {tuple(logits_BV.shape)} "
            "(take [:, -1] of Model.logits)."
        )
    return logits_BV


@dataclass
class Metric:
    """An unbound metric; :meth:`bind` (or :meth:`on`) resolves its tokens for a tokenizer."""

    name: str
    kind: str  # "logit_diff", "prob", "kl", "callable"
    answer: Any = None
    wrong: Any = None
    fn: Callable[..., Any] | None = None

    def bind(self, tokenizer: Any, n_pairs: int | None = None) -> BoundMetric:
        """Check answers against the tokenizer (before any forward pass) and fix them per pair.

        With ``n_pairs`` a list answer gives one per pair; without, answers are shared by every row.
        """
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        ids = {}
        if self.kind in ("logit_diff", "prob"):
            ids["answer"] = _ids_per_pair(tokenizer, self.answer, n_pairs, "answer")
        if self.kind == "logit_diff":
            ids["wrong"] = _ids_per_pair(tokenizer, self.wrong, n_pairs, "wrong answer")
        return BoundMetric(self, ids)

    def on(self, model_or_tokenizer: Any) -> BoundMetric:
        """Bound to a model's tokenizer, shared answers: ``metric.on(model)(logits_BV)``."""
        return self.bind(model_or_tokenizer)


class BoundMetric:
    """A metric ready to score logits: ``bound(logits_BV, pair_B=None) -> values_B``."""

    def __init__(self, metric: Metric, ids: dict[str, tuple[torch.Tensor, torch.Tensor]]):
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
        check_logits(clean_logits_NV)
        self.clean_logprobs = log_probs(clean_logits_NV.detach())

    def _gather(self, logits_BV: torch.Tensor, key: str, pair_B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ids, mask = self.ids[key]
        rows = pair_B.clamp(max=ids.shape[0] - 1)
        ids_BG, mask_BG = ids[rows], mask[rows].to(logits_BV.dtype)
        return logits_BV.gather(1, ids_BG), mask_BG

    def __call__(self, logits_BV: torch.Tensor, pair_B: torch.Tensor | None = None) -> torch.Tensor:
        check_logits(logits_BV)
        kind = self.metric.kind
        logits_BV = logits_BV.float()
        if pair_B is None:
            pair_B = torch.zeros(logits_BV.shape[0], dtype=torch.long)
        if kind == "logit_diff":
            a, ma = self._gather(logits_BV, "answer", pair_B)
            w, mw = self._gather(logits_BV, "wrong", pair_B)
            return (a * ma).sum(1) / ma.sum(1) - (w * mw).sum(1) / mw.sum(1)
        if kind == "prob":
            p, mp = self._gather(token_probs(logits_BV), "answer", pair_B)
            return (p * mp).sum(1)
        if kind == "kl":
            if self.clean_logprobs is None:
                raise RuntimeError("kl_to_clean needs the clean logits: call set_clean first.")
            ref = self.clean_logprobs[pair_B]
            return (ref.exp() * (ref - log_probs(logits_BV))).sum(-1)
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

    def score(self, logits_BV: torch.Tensor, pair_B: torch.Tensor | None = None) -> float:
        """The mean over rows, as a float."""
        return float(self(logits_BV, pair_B).mean())


def check_answer(answer: Any, what: str) -> Any:
    """Refuse an answer of the wrong kind when a metric is built (tokens are checked when it is bound)."""

    def one(a: Any, where: str) -> None:
        if isinstance(a, bool) or not isinstance(a, (str, int)):
            raise TypeError(
                f"{where} must be a token (a string or an id), a set of tokens or a list of them (one per pair); "
                f"got {type(a).__name__}: {a!r:.80}."
            )

    if isinstance(answer, (set, frozenset)):
        if not answer:
            raise ValueError(f"{what} is an empty set; give at least one token.")
        for a in answer:
            one(a, f"each token of {what}")
    elif isinstance(answer, (list, tuple)):
        if not answer:
            raise ValueError(f"{what} is an empty list; give one answer per pair, or one answer for all.")
        for i, a in enumerate(answer):
            if isinstance(a, (set, frozenset)):
                check_answer(a, f"{what}[{i}]")
            else:
                one(a, f"{what}[{i}]")
    else:
        one(answer, what)
    return answer


def logit_diff(answer: Answer, wrong: Answer) -> Metric:
    """Logit of ``answer`` minus logit of ``wrong`` (a set: the mean logit of its tokens).

    >>> ilab.metrics.logit_diff(" Mary", " John")
    """
    return Metric("logit_diff", "logit_diff", answer=check_answer(answer, "answer"),
                  wrong=check_answer(wrong, "wrong answer"))  # fmt: skip


def prob(answer: Answer) -> Metric:
    """Probability of ``answer`` (a set: the total probability of its tokens).

    >>> ilab.metrics.prob(" Paris")
    """
    return Metric("prob", "prob", answer=check_answer(answer, "answer"))


def kl_to_clean() -> Metric:
    """KL(clean || patched) of the next-token distributions, in nats (0 for the clean run).

    >>> ilab.metrics.kl_to_clean()
    """
    return Metric("kl_to_clean", "kl")


def as_metric(metric: Metric | BoundMetric | Callable[..., Any]) -> Metric:
    """Accept a :class:`Metric`, a bound one, or any callable on final logits ``[rows, vocab]``."""
    if isinstance(metric, Metric):
        return metric
    if isinstance(metric, BoundMetric):
        return metric.metric
    if callable(metric):
        return Metric(getattr(metric, "__name__", "metric"), "callable", fn=metric)
    raise TypeError(
        f"metric must be logit_diff(...), prob(...), kl_to_clean() or a callable on logits [rows, vocab]; "
        f"got {type(metric).__name__}: {metric!r}."
    )
