"""What a CircuitGraph draws for an edge-level circuit (core/circuits/edge_view.py): heads, key-value groups and
MLPs by layer and column, a group's key and value edges drawn as one, scores summed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.circuits.edge_circuit import Circuit
from interplab.core.circuits.edge_graph import EdgeGraph
from interplab.core.circuits.edge_view import circuit_view


def small_circuit() -> Circuit:
    graph = EdgeGraph.build(2, 4, 2)
    edges = [("input", "a0.h2<q>", 2.0), ("a0.h1", "a1.g0<k>", 1.0), ("a0.h1", "a1.g0<v>", 0.5),
             ("a0.h2", "m0", -0.5), ("m0", "a1.h3<q>", 0.25), ("a1.h3", "logits", 3.0),
             ("m1", "logits", 1.0)]  # fmt: skip
    scores = torch.zeros(graph.valid.shape)
    pairs = []
    for up, down, score in edges:
        u, d = graph.upstream.index(up), graph.downstream.index(down)
        assert graph.valid[u, d]
        scores[u, d] = score
        pairs.append([u, d])
    return Circuit.from_indices(graph, torch.tensor(pairs), scores)


def test_heads_groups_and_mlps_are_placed_by_layer_and_column():
    view = circuit_view(small_circuit())
    assert view["prompt_names"] == ["h0", "h1", "h2", "h3", "kv0", "kv1", "MLP"]
    places = zip(view["names"], view["kind"], view["layer"], view["pos"], strict=True)
    at = {name: (view["kind_names"][k], int(layer), int(pos)) for name, k, layer, pos in places}
    assert at["a0.h2"] == ("head", 0, 2) and at["a1.g0"] == ("head", 1, 4) and at["a1.h3"] == ("head", 1, 3)
    assert at["m0"] == ("MLP", 0, 6) and at["m1"] == ("MLP", 1, 6)
    assert at["input"][:2] == ("input", -1) and at["logits"][:2] == ("logits", 2)
    edges = {(view["names"][s], view["names"][d]): float(w)
             for s, d, w in zip(view["src"], view["dst"], view["weight"], strict=True)}  # fmt: skip
    assert edges[("a0.h1", "a1.g0")] == pytest.approx(1.5)  # the key and value edges into one group, summed
    assert edges[("a0.h2", "m0")] == pytest.approx(-0.5) and len(edges) == 6
    assert float(view["influence"].sum()) == pytest.approx(1.0)
    assert view["names"][int(np.argmin(view["order"]))] == "logits"  # it touches the most |score|
    assert view["rule"].startswith("head-level circuit: 7 of ")
    with pytest.raises(TypeError, match="must be an edge-level circuit"):
        circuit_view("a circuit")
