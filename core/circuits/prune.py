"""Influence, pruning and the replacement / completeness scores of an attribution graph.

The adjacency ``A`` [targets, sources] holds direct effects. With its rows normalised to sum to one in
absolute value (``|A| / rowsum``), a node's influence on the output is ``w @ (Â + Â² + ...)`` where ``w``
weights the logit nodes by their probabilities: the fraction of the output that flows through the node
along every path. Pruning keeps the most influential nodes up to a fraction of the total influence, then
the most influential edges among them, then drops features and errors left without an outgoing edge and
features without an incoming one, until nothing changes.

Example
-------
>>> keep = prune(adjacency, n_features=120, n_tokens=16, n_logits=3, logit_probs=p, node_threshold=0.8)
>>> keep.nodes.sum(), keep.edges.sum()
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..checks import check_fraction


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
    node_threshold: float = 0.8, edge_threshold: float = 0.98,
) -> Pruned:  # fmt: skip
    """Keep nodes up to ``node_threshold`` of the total influence and edges up to ``edge_threshold`` (see the
    module doc); token and logit nodes are always kept."""
    for name, value in (("node_threshold", node_threshold), ("edge_threshold", edge_threshold)):
        check_fraction(name, value, "[", "]")
    n = adjacency.shape[0]
    w = logit_weights(n, logit_probs)
    node_score = influence(normalise_rows(adjacency), w)
    nodes = node_score >= cutoff(node_score, node_threshold)
    fixed = n_tokens + n_logits
    nodes[n - fixed :] = True
    kept = adjacency.clone()
    kept[~nodes] = 0
    kept[:, ~nodes] = 0
    norm = normalise_rows(kept)
    through = influence(norm, w) + w
    edge_score = norm * through[:, None]
    edges = edge_score >= cutoff(edge_score, edge_threshold)
    edges &= edge_score > 0
    sources = slice(0, n - fixed)
    while True:
        before = nodes.clone()
        edges[~nodes] = False
        edges[:, ~nodes] = False
        nodes[sources] &= edges[:, sources].any(0)  # features and errors need an outgoing edge
        nodes[:n_features] &= edges[:n_features].any(1)  # features need an incoming one
        if bool((nodes == before).all()):
            break
    order = torch.argsort(node_score, descending=True)
    cumulative = torch.zeros_like(node_score)
    cumulative[order] = torch.cumsum(node_score[order], 0) / node_score.sum().clamp_min(1e-30)
    return Pruned(nodes, edges, cumulative)


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
