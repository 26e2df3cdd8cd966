"""Influence, pruning and the replacement / completeness scores of an attribution graph.

The adjacency ``A`` [targets, sources] holds direct effects. With its rows normalised to sum to one in
absolute value (``|A| / rowsum``), a node's influence on the output is ``w @ (Â + Â² + ...)`` where ``w``
weights the logit nodes by their probabilities: the fraction of the output that flows through the node
along every path. Pruning keeps the most influential nodes up to a fraction of the total influence, then
the most influential edges among them, then drops features and errors left without an outgoing edge and
features without an incoming one, until nothing changes. A cap on edges (``max_edges``) keeps the edges
with the largest share of the influence (normalised weight times the influence of the edge's target) and
drops what is left dangling: a graph a person can read.

Example
-------
>>> keep = prune(adjacency, n_features=120, n_tokens=16, n_logits=3, logit_probs=p, node_threshold=0.8)
>>> keep.nodes.sum(), keep.edges.sum()
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..checks import check_fraction, check_positive_int


def normalise_rows(adjacency: torch.Tensor) -> torch.Tensor:
    """``|A|`` with each row divided by its sum (rows that are all zero stay zero)."""
    a = adjacency.abs().double()
    return a / a.sum(1, keepdim=True).clamp_min(1e-10)


def influence(normalised: torch.Tensor, weights: torch.Tensor, max_iter: int = 1000) -> torch.Tensor:
    """``weights @ (Â + Â² + ...)``: each node's influence on what ``weights`` weights (an acyclic graph ends)."""
    normalised = normalised.double()
    step = weights.double() @ normalised
    total = step.clone()
    for _ in range(max_iter):
        if not bool(step.any()):
            return total
        step = step @ normalised
        total += step
    raise RuntimeError(f"Influence did not converge in {max_iter} steps: the graph has a cycle.")


def cutoff(scores: torch.Tensor, fraction: float) -> float:
    """The score at which the largest scores first add up to ``fraction`` of their total."""
    ordered = torch.sort(scores.flatten().double(), descending=True).values
    total = float(ordered.sum())
    if total <= 0:
        return float("inf")
    cumulative = torch.cumsum(ordered, 0) / total
    index = min(int(torch.searchsorted(cumulative, torch.tensor(fraction, dtype=cumulative.dtype))),
                len(ordered) - 1)  # fmt: skip
    return float(ordered[index])


class Pruned(NamedTuple):
    """What pruning keeps: node [N] and edge [N, N] masks, and each node's cumulative influence rank [N]."""

    nodes: torch.Tensor
    edges: torch.Tensor
    cumulative: torch.Tensor


def logit_weights(n_nodes: int, logit_probs: torch.Tensor) -> torch.Tensor:
    """The weight vector over all nodes: the logit nodes (last) by their probabilities, zeros elsewhere."""
    w = torch.zeros(n_nodes, dtype=torch.float64)
    w[n_nodes - len(logit_probs) :] = logit_probs.double()
    return w


def prune(
    adjacency: torch.Tensor, n_features: int, n_tokens: int, n_logits: int, logit_probs: torch.Tensor,
    node_threshold: float = 0.8, edge_threshold: float = 0.98, max_edges: int | None = None,
) -> Pruned:  # fmt: skip
    """Keep nodes up to ``node_threshold`` of the total influence and edges up to ``edge_threshold`` (see the
    module doc); token and logit nodes are always kept. With ``max_edges``, only that many edges stay: those
    with the largest share of the influence (:func:`edge_influence`), and nodes left dangling go too.

    >>> prune(adjacency, 120, 16, 3, p, node_threshold=0.8, edge_threshold=0.9, max_edges=100).edges.sum()
    """
    for name, value in (("node_threshold", node_threshold), ("edge_threshold", edge_threshold)):
        check_fraction(name, value, "[", "]")
    if max_edges is not None:
        check_positive_int("max_edges", max_edges)
    n = adjacency.shape[0]
    w = logit_weights(n, logit_probs)
    node_score = influence(normalise_rows(adjacency), w)
    nodes = node_score >= cutoff(node_score, node_threshold)
    fixed = n_tokens + n_logits
    nodes[n - fixed :] = True
    edge_score = edge_influence(adjacency, nodes, w)
    edges = edge_score >= cutoff(edge_score, edge_threshold)
    edges &= edge_score > 0
    drop_dangling(nodes, edges, n_features, n - fixed)
    if max_edges is not None and int(edges.sum()) > max_edges:
        score = edge_influence(adjacency, nodes, w)
        score[~edges] = -1.0
        top = torch.topk(score.flatten(), max_edges).indices
        edges = torch.zeros_like(edges).flatten()
        edges[top] = True
        edges = edges.view(n, n)
        drop_dangling(nodes, edges, n_features, n - fixed)
    order = torch.argsort(node_score, descending=True)
    cumulative = torch.zeros_like(node_score)
    cumulative[order] = torch.cumsum(node_score[order], 0) / node_score.sum().clamp_min(1e-30)
    return Pruned(nodes, edges, cumulative)


def edge_influence(adjacency: torch.Tensor, nodes: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Each edge's share of the influence on the output [N, N] among the kept ``nodes``: its row-normalised
    weight times the influence its target carries on (the output's weight for a logit)."""
    kept = adjacency.clone()
    kept[~nodes] = 0
    kept[:, ~nodes] = 0
    norm = normalise_rows(kept)
    through = influence(norm, weights) + weights
    return norm * through[:, None]


def drop_dangling(nodes: torch.Tensor, edges: torch.Tensor, n_features: int, n_sources: int) -> None:
    """In place, until nothing changes: edges need both ends kept, features and errors (the first
    ``n_sources`` nodes) an outgoing edge, features an incoming one. Token and logit nodes stay."""
    sources = slice(0, n_sources)
    while True:
        before = nodes.clone()
        edges[~nodes] = False
        edges[:, ~nodes] = False
        nodes[sources] &= edges[:, sources].any(0)
        nodes[:n_features] &= edges[:n_features].any(1)
        if bool((nodes == before).all()):
            return


def node_shares(adjacency: torch.Tensor, logit_probs: torch.Tensor) -> torch.Tensor:
    """Each node's influence on the output as a fraction of all nodes' influence [N] (they sum to one)."""
    score = influence(normalise_rows(adjacency), logit_weights(adjacency.shape[0], logit_probs))
    return score / score.sum().clamp_min(1e-30)


def graph_scores(
    adjacency: torch.Tensor, n_features: int, n_errors: int, n_tokens: int, logit_probs: torch.Tensor
) -> tuple[float, float]:
    """(replacement score, completeness score).

    Replacement: of the influence the token nodes and error nodes have on the output, the fraction the
    tokens have (1.0: every path from the input runs through features). Completeness: over all nodes
    weighted by their influence on the output, the fraction of their input that comes from non-error nodes.
    """
    n = adjacency.shape[0]
    w = logit_weights(n, logit_probs)
    norm = normalise_rows(adjacency)
    node_score = influence(norm, w)
    errors = slice(n_features, n_features + n_errors)
    tokens = slice(n_features + n_errors, n_features + n_errors + n_tokens)
    token_inf, error_inf = float(node_score[tokens].sum()), float(node_score[errors].sum())
    replacement = token_inf / (token_inf + error_inf) if token_inf + error_inf > 0 else 0.0
    non_error = 1.0 - norm[:, errors].sum(1)
    out = node_score + w
    completeness = float((non_error * out).sum() / out.sum())
    return replacement, completeness
