"""The data a CircuitGraph widget draws: nodes placed by position and layer, edges, influence ranks.

Nodes kept at ``node_threshold`` (and their edges kept at ``edge_threshold``) are sent with each
node's cumulative influence rank, so a pruning slider can hide nodes and edges in the browser
without asking Python: a node shows when its rank is at most the slider's value (tokens and logits
always show), an edge when both its ends show. Edges are capped at ``max_edges`` (the largest by
absolute weight).

Example
-------
>>> view = graph_view(graph, node_threshold=0.9)
>>> view["n_nodes"], view["n_edges"]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..checks import check_positive_int
from .graph import Graph

KINDS = ("feature", "error", "token", "logit")


def graph_view(
    graph: Graph, node_threshold: float = 0.9, edge_threshold: float = 0.99, max_edges: int = 10_000
) -> dict[str, Any]:
    """Plain arrays for the widget (see the module doc): ``kind``, ``layer``, ``pos``, ``latent``,
    ``activation``, ``rank`` per node; ``src``, ``dst``, ``weight`` per edge; labels and tokens."""
    check_positive_int("max_edges", max_edges)
    kept = graph.prune(node_threshold, edge_threshold)
    idx = kept.nodes.nonzero().flatten()
    where = {int(i): j for j, i in enumerate(idx.tolist())}
    info = [graph.node(int(i)) for i in idx]
    kinds = np.array([KINDS.index(n["kind"]) for n in info], dtype=np.uint8)
    dst, src = kept.edges.nonzero(as_tuple=True)
    weights = graph.adjacency[dst, src]
    if len(weights) > max_edges:
        top = torch.topk(weights.abs(), max_edges).indices
        dst, src, weights = dst[top], src[top], weights[top]
    labels = []
    for n in info:
        if n["kind"] == "feature":
            labels.append(f"L{n['layer']} #{n['latent']}")
        elif n["kind"] == "error":
            labels.append(f"error L{n['layer']}")
        elif n["kind"] == "token":
            labels.append(n["token"])
        else:
            labels.append(f"{n['token']} ({n['prob']:.2f})")
    return {
        "prompt_tokens": list(graph.tokens),
        "n_layers": graph.n_layers,
        "n_pos": graph.n_pos,
        "n_nodes": len(info),
        "n_edges": len(weights),
        "kind": kinds,
        "layer": np.array([n["layer"] for n in info], dtype=np.int32),
        "pos": np.array([n["pos"] for n in info], dtype=np.int32),
        "latent": np.array([n.get("latent", -1) for n in info], dtype=np.int32),
        "activation": np.array([n.get("activation", 0.0) for n in info], dtype=np.float32),
        "rank": kept.cumulative[idx].numpy().astype(np.float32),
        "node_index": idx.numpy().astype(np.int32),
        "labels": labels,
        "src": np.array([where[int(s)] for s in src], dtype=np.int32),
        "dst": np.array([where[int(d)] for d in dst], dtype=np.int32),
        "weight": weights.numpy().astype(np.float32),
        "node_threshold": float(node_threshold),
    }
