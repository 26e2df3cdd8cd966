"""Counterfactual pairs for DAS: a base prompt, a source prompt, and the token the intervention should produce.

An interchange intervention runs the base prompt with some of the site's coordinates taken from the
source prompt's run; if the subspace holds the concept, the model then answers ``labels[i]`` (usually
the source's answer) instead of ``base_labels[i]`` (the base's own answer). Prompts of a pair may differ
in length: positions count from each prompt's end (-1: the last token) unless they are non-negative.
Patching's :class:`~interplab.core.patching.prompts.PromptPairs` convert directly: the corrupted prompt is
the base, the clean one the source, and the clean answer the label.

Example
-------
>>> pairs = counterfactual_pairs(model, ["Paris is in"], ["Rome is in"], [" Italy"], [" France"])
>>> pairs = as_pairs(model, ilab.patching.ioi(model, n=32))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..checks import check_texts, single_token_id
from ..patching.prompts import PromptPairs


@dataclass
class CounterfactualPairs:
    """Base and source prompts with the label the intervention should produce (and, optionally, the base's own)."""

    base: list[str]
    source: list[str]
    labels: list[str]
    base_labels: list[str] | None = None

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: Any) -> CounterfactualPairs:
        idx = index.tolist() if isinstance(index, torch.Tensor) else index
        if isinstance(idx, int):
            idx = [idx]
        if isinstance(idx, slice):
            idx = list(range(len(self)))[idx]

        def pick(xs: list[str]) -> list[str]:
            return [xs[i] for i in idx]

        base_labels = None if self.base_labels is None else pick(self.base_labels)
        return CounterfactualPairs(pick(self.base), pick(self.source), pick(self.labels), base_labels)

    def __add__(self, other: CounterfactualPairs) -> CounterfactualPairs:
        base_labels = None
        if self.base_labels is not None and other.base_labels is not None:
            base_labels = self.base_labels + other.base_labels
        return CounterfactualPairs(self.base + other.base, self.source + other.source, self.labels + other.labels,
                                   base_labels)  # fmt: skip

    def __repr__(self) -> str:
        first = f", first={self.base[0]!r} <- {self.source[0]!r} -> {self.labels[0]!r}" if self.base else ""
        return f"CounterfactualPairs({len(self)} pairs{first})"


def counterfactual_pairs(
    model_or_tokenizer: Any,
    base: str | Sequence[str],
    source: str | Sequence[str],
    labels: str | Sequence[str],
    base_labels: str | Sequence[str] | None = None,
) -> CounterfactualPairs:
    """Build and check pairs: one source and one label per base prompt, every label a single token.

    >>> counterfactual_pairs(model, ["Paris is in"], ["Rome is in"], [" Italy"], [" France"])
    """
    tok = getattr(model_or_tokenizer, "tokenizer", model_or_tokenizer)
    as_list = lambda x: [x] if isinstance(x, str) else list(x)  # noqa: E731
    base, source = check_texts(base), check_texts(source)
    labels = as_list(labels)
    others = {"source prompts": source, "labels": labels}
    if base_labels is not None:
        base_labels = as_list(base_labels)
        others["base_labels"] = base_labels
    for name, values in others.items():
        if len(values) != len(base):
            raise ValueError(f"Got {len(base)} base prompts but {len(values)} {name}; give one per pair.")
    for i, label in enumerate(labels):
        single_token_id(tok, label, f"labels[{i}]")
    for i, label in enumerate(base_labels or []):
        single_token_id(tok, label, f"base_labels[{i}]")
    return CounterfactualPairs(base, source, labels, base_labels)


def as_pairs(model: Any, pairs: CounterfactualPairs | PromptPairs) -> CounterfactualPairs:
    """Counterfactual pairs from either kind (patching's pairs: base = corrupted, source = clean), checked."""
    if isinstance(pairs, PromptPairs):
        return counterfactual_pairs(model, pairs.corrupt, pairs.clean, pairs.answers, pairs.wrong)
    if isinstance(pairs, CounterfactualPairs):
        return counterfactual_pairs(model, pairs.base, pairs.source, pairs.labels, pairs.base_labels)
    raise TypeError(f"pairs must be CounterfactualPairs (ilab.das.counterfactual_pairs) or PromptPairs "
                    f"(ilab.patching.ioi / prompt_pairs), got {type(pairs).__name__}.")  # fmt: skip


def label_ids(model: Any, labels: Sequence[str]) -> torch.Tensor:
    """Token ids of one-token labels."""
    return torch.tensor([single_token_id(model.tokenizer, x, "label") for x in labels])
