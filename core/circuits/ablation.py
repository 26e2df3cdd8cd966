"""Switching off a graph's top features in the real model, against random features of the same graph.

A graph claims its most influential features carry the answer; the claim's control is the same number of the
graph's features drawn at random. :func:`ablation_control` turns each set off with
:func:`~interplab.core.circuits.interventions.intervene` (the real model, not the linearised one) and compares how
far each moves a logit difference; :attr:`AblationControl.passes` is the claim's check (the top set moves it at
least ``ratio`` times as far as any random set).

Example
-------
>>> res = ablation_control(model, clt, graph, " Mary", " John", n=5)
>>> res.top_shift, res.random_shifts, res.passes
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..checks import check_int, check_number
from ..model.model import Model
from .graph import Graph
from .interventions import intervene
from .prune import node_shares

Feature = tuple[int, int, int]  # layer, position, latent


@dataclass
class AblationControl:
    """The logit difference ``clean``, and its shift when the ``features`` are off (``top_shift``) and when each
    random set is (``random_shifts``, the sets in ``random_sets``); ``ratio`` is the bar :attr:`passes` uses."""

    clean: float
    features: list[Feature]
    top_shift: float
    random_sets: list[list[Feature]] = field(default_factory=list)
    random_shifts: list[float] = field(default_factory=list)
    ratio: float = 4.0

    @property
    def passes(self) -> bool:
        """Whether the features moved the difference at least ``ratio`` times as far as every random set."""
        return abs(self.top_shift) >= self.ratio * max((abs(s) for s in self.random_shifts), default=0.0)


def top_features(graph: Graph, n: int) -> list[Feature]:
    """The ``n`` feature nodes of ``graph`` with the largest share of the influence on its logits.

    >>> top_features(graph, 5)[0]
    (3, 10, 41)
    """
    check_int("n", n, 1, graph.n_features)
    shares = node_shares(graph.adjacency, graph.logit_probs)[: graph.n_features]
    return [_as_feature(graph.features[int(i)]) for i in torch.argsort(shares, descending=True)[:n]]


def random_features(graph: Graph, n: int, seed: int = 0, exclude: list[Feature] | None = None) -> list[Feature]:
    """``n`` feature nodes of ``graph`` drawn at random (seeded), none of ``exclude``.

    >>> random_features(graph, 5, seed=1)
    """
    pool = [f for i in range(graph.n_features) if (f := _as_feature(graph.features[i])) not in set(exclude or [])]
    check_int("n", n, 1, len(pool))
    order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))
    return [pool[int(i)] for i in order[:n]]


def ablation_control(
    model: Model, transcoders: Any, graph: Graph, good: str | int, bad: str | int, *, n: int = 5,
    features: list[Feature] | None = None, n_random: int = 3, seed: int = 0, ratio: float = 4.0,
) -> AblationControl:  # fmt: skip
    """Turn off ``features`` (default: the graph's top ``n``, :func:`top_features`) and ``n_random`` random sets of
    as many of its other features; the shift of logit(``good``) - logit(``bad``) (each a one-token string or a token
    id) for each (see the module doc).

    >>> ablation_control(model, clt, graph, " Mary", " John").passes
    True
    """
    ids = [_token_id(model, t, name) for t, name in ((good, "good"), (bad, "bad"))]
    check_int("n_random", n_random, 0)
    check_number(ratio, "ratio")
    chosen = [_as_feature(f) for f in features] if features is not None else top_features(graph, n)
    for f in chosen:
        graph.feature_index(*f)  # a clear error for a feature that is not a node of the graph
    randoms = [random_features(graph, len(chosen), seed + i, exclude=chosen) for i in range(n_random)]

    def diff(logits: torch.Tensor) -> float:
        return float(logits[ids[0]] - logits[ids[1]])

    runs = [intervene(model, transcoders, graph.prompt, {f: 0.0 for f in s}) for s in [chosen, *randoms]]
    clean = diff(runs[0].logits_before)
    shifts = [diff(r.logits_after) - clean for r in runs]
    return AblationControl(clean, chosen, shifts[0], randoms, shifts[1:], float(ratio))


def _as_feature(feature: Any) -> Feature:
    values = tuple(int(v) for v in feature)
    if len(values) != 3:
        raise ValueError(f"A feature is (layer, position, latent); got {feature!r}.")
    return values[0], values[1], values[2]


def _token_id(model: Model, token: str | int, name: str) -> int:
    if isinstance(token, int) and not isinstance(token, bool):
        return check_int(name, token, 0, int(getattr(model.config, "vocab_size", 0) or len(model.tokenizer)) - 1)
    if not isinstance(token, str):
        raise TypeError(f"{name} must be a string that is one token or a token id, got {type(token).__name__}: "
                        f"{token!r}.")  # fmt: skip
    ids = model.tokenizer.encode(token, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(f"{name}={token!r} is {len(ids)} tokens ({ids}); give a string that is one token.")
    return int(ids[0])
