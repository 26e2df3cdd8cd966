"""The data a CircuitGraph draws for an edge-level circuit: heads and MLPs by layer, edges by score.

Rows are layers (the embeddings ``input`` at the bottom, ``logits`` at the top); columns are the heads
``h0``..., then the key-value groups ``kv0``... (a head's key and value inputs are shared by its group, so an
edge into them is drawn into the group), then the ``MLP``. A head's query edges are drawn into the head.
Each drawn edge is one (upstream node, downstream node) pair with the summed scores of the circuit's edges
between them (a group's key and value edges add up); a node's influence is its share of the summed
``|score|`` of the edges it touches. The arrays have the keys of :func:`interplab.core.circuits.view.graph_view`
and ``kind_names`` (head, MLP, input, logits), so the same canvas draws them.

Example
-------
>>> view = circuit_view(edge_scores.circuit(100))
>>> view["n_nodes"], view["n_edges"], view["prompt_names"]   # columns: ['h0', 'h1', ..., 'kv0', 'MLP']
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .edge_circuit import Circuit

KIND_NAMES = ("head", "MLP", "input", "logits")
_NAME = re.compile(r"^(?:a(\d+)\.([hg])(\d+)(?:<[qkv]>)?|m(\d+)|input|logits)$")


def _place(name: str, n_heads: int, n_layers: int) -> tuple[str, int, int, int]:
    """(node name, kind, layer, column) of an upstream node or downstream input."""
    match = _NAME.match(name)
    if match is None:
        raise ValueError(f"{name!r} is not a node of an edge graph (a{{L}}.h{{H}}, a{{L}}.g{{G}}<k|v>, m{{L}}, "
                         f"input, logits).")  # fmt: skip
    layer, head_or_group, index, mlp = match.groups()
    if layer is not None:
        column = int(index) + (0 if head_or_group == "h" else n_heads)
        return f"a{layer}.{head_or_group}{index}", 0, int(layer), column
    if mlp is not None:
        return name, 1, int(mlp), -1
    return name, (2 if name == "input" else 3), (-1 if name == "input" else n_layers), -1


def circuit_view(circuit: Circuit) -> dict[str, Any]:
    """Plain arrays for the widget (see the module doc), one node per head, key-value group and MLP the
    circuit touches, plus ``input`` and ``logits``.

    >>> circuit_view(edge_scores.circuit(50))["names"][:3]
    """
    if not isinstance(circuit, Circuit):
        raise TypeError(f"circuit must be an edge-level circuit (EdgeScores.circuit), got {type(circuit).__name__}.")
    g = circuit.graph
    columns = [f"h{h}" for h in range(g.n_heads)] + [f"kv{k}" for k in range(g.n_kv_heads)] + ["MLP"]
    where: dict[str, int] = {}
    placed: list[tuple[str, int, int, int]] = []
    summed: dict[tuple[int, int], float] = {}
    for up, down, score in zip(circuit.edges["upstream"], circuit.edges["downstream"], circuit.edges["score"],
                               strict=True):  # fmt: skip
        ends = []
        for name in (up, down):
            node = _place(name, g.n_heads, g.n_layers)
            if node[0] not in where:
                where[node[0]] = len(placed)
                placed.append(node)
            ends.append(where[node[0]])
        summed[ends[0], ends[1]] = summed.get((ends[0], ends[1]), 0.0) + float(score)
    mlp_column, middle = len(columns) - 1, (len(columns) - 1) // 2
    column = [c if c >= 0 else (mlp_column if kind == 1 else middle) for _, kind, _, c in placed]
    pairs = list(summed)
    weight = np.array([summed[p] for p in pairs], dtype=np.float32)
    touch = np.zeros(len(placed))
    for (src, dst), w in zip(pairs, weight, strict=True):
        touch[[src, dst]] += abs(w)
    influence = touch / max(touch.sum(), 1e-30)
    order = np.empty(len(placed), dtype=np.int32)
    order[np.argsort(-influence, kind="stable")] = np.arange(1, len(placed) + 1)
    names = [name for name, _, _, _ in placed]
    return {
        "prompt_tokens": columns, "prompt_names": columns, "n_layers": g.n_layers, "n_pos": len(columns),
        "n_nodes": len(placed), "n_edges": len(pairs), "n_graph_nodes": len(placed),
        "kind": np.array([k for _, k, _, _ in placed], dtype=np.uint8),
        "layer": np.array([layer for _, _, layer, _ in placed], dtype=np.int32),
        "pos": np.array(column, dtype=np.int32), "latent": np.full(len(placed), -1, dtype=np.int32),
        "activation": np.zeros(len(placed), dtype=np.float32), "rank": np.zeros(len(placed), dtype=np.float32),
        "influence": influence.astype(np.float32), "order": order,
        "node_index": np.arange(len(placed), dtype=np.int32), "names": names, "labels": names,
        "src": np.array([s for s, _ in pairs], dtype=np.int32), "dst": np.array([d for _, d in pairs], dtype=np.int32),
        "weight": weight, "node_threshold": 1.0, "kind_names": list(KIND_NAMES),
        "rule": f"head-level circuit: {circuit.n_edges} of {g.n_edges:,} edges, by score",
    }  # fmt: skip
