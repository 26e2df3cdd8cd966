"""CircuitGraph, the Python side: its data (binary arrays, client-side pruning ranks), selection, supernodes,
the dashboard link and an intervention shown next to the graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.circuits import attribute, intervene
from interplab.widgets import CircuitGraph
from interplab.widgets._kit import payload_array

from tests.circuits.test_attribute import PROMPT, transcoders
from tests.tiny import tiny_model


@pytest.fixture(scope="module")
def built():
    torch.set_num_threads(1)
    model = tiny_model("gemma3")
    tcs = transcoders(model.d_model)
    return model, tcs, attribute(model, tcs, PROMPT, batch_size=16, progress=False)


def test_circuit_graph_sends_binary_arrays_matching_the_pruned_graph(built):
    _, _, graph = built
    w = CircuitGraph(graph, node_threshold=0.9, edge_threshold=0.99)  # the default cap: at most 100 edges
    kept = graph.prune(0.9, 0.99, max_edges=100)
    d = w.graph
    assert d["n_edges"] <= 100 and "at most 100" in d["rule"]
    assert d["n_nodes"] == int(kept.nodes.sum())
    assert isinstance(d["kind"]["view"], memoryview) and d["kind"]["dtype"] == "uint8"
    kinds = payload_array(d["kind"])
    assert (kinds == 2).sum() == graph.n_pos and (kinds == 3).sum() == graph.n_logits  # tokens, logits always kept
    src, dst, weight = payload_array(d["src"]), payload_array(d["dst"]), payload_array(d["weight"])
    assert len(src) == d["n_edges"] == int(kept.edges.sum()) and (np.abs(weight) > 0).all()
    rank = payload_array(d["rank"])
    assert ((rank >= 0) & (rank <= 1.0 + 1e-6)).all()
    # an edge's weight is the adjacency entry between the nodes it joins
    idx = w._view["node_index"]
    assert np.allclose(weight, graph.adjacency[idx[dst], idx[src]].numpy())


def test_selection_supernodes_dashboard_link_and_intervention(built):
    model, tcs, graph = built
    w = CircuitGraph(graph, dashboard_layer=1)
    kinds = payload_array(w.graph["kind"])
    layers = payload_array(w.graph["layer"])
    feature = int(np.nonzero((kinds == 0) & (layers == 1))[0][0])
    w.selected = feature
    node = w.selected_node
    assert node["kind"] == "feature" and w.latent == node["latent"]
    w.group("subject", [feature, 0])
    assert w.supernodes == [{"label": "subject", "nodes": [feature, 0]}]
    with pytest.raises(ValueError, match="non-empty label"):
        w.group(" ", [0])
    layer, pos, latent = node["layer"], node["pos"], node["latent"]
    r = intervene(model, tcs, PROMPT, {(layer, pos, latent): 0.0})
    w.show_intervention(r)
    assert w.intervention["before"] and w.intervention["after"]
    with pytest.raises(TypeError, match=r"ilab\.circuits\.Graph"):
        CircuitGraph("nope")


def test_view_index_maps_graph_nodes_to_widget_nodes(built):
    _, _, graph = built
    w = CircuitGraph(graph, node_threshold=0.5)
    idx = w._view["node_index"]
    for view_i, graph_i in enumerate(idx.tolist()):
        assert w.view_index(graph_i) == view_i
    pruned = sorted(set(range(graph.n_nodes)) - set(idx.tolist()))
    assert pruned and w.view_index(pruned[0]) is None  # pruned away at 0.5: not in the widget
    logit = graph.n_nodes - 1
    w.group("answer", [w.view_index(logit)])
    assert w.supernodes[-1] == {"label": "answer", "nodes": [w.view_index(logit)]}


def test_cards_for_shown_features_pins_and_hides(built):
    model, tcs, graph = built
    from interplab.core.circuits import feature_cards

    cards = feature_cards(graph, model, tcs)
    w = CircuitGraph(graph, cards=cards)
    kinds, layers, latents = (payload_array(w.graph[k]) for k in ("kind", "layer", "latent"))
    shown = {f"{la}_{lt}" for k, la, lt in zip(kinds, layers, latents, strict=True) if k == 0}
    assert set(w.graph["cards"]) == shown and shown < set(cards)  # only what the view shows travels
    assert w.graph["linked"] is False and w.pinned == [] and w.hidden == []
    w.pinned, w.hidden = [0], [1]
    assert w.pinned == [0] and w.hidden == [1]
    with pytest.raises(TypeError, match="feature_cards"):
        CircuitGraph(graph, cards=[1])


def test_circuit_graph_draws_an_edge_circuit_and_names_the_clicked_head():
    from tests.circuits.test_edge_view import small_circuit

    w = CircuitGraph(small_circuit())
    assert w.graph["kind_names"] == ["head", "MLP", "input", "logits"] and w.graph["n_edges"] == 6
    w.selected = w.graph["names"].index("a1.g0")
    assert w.selected_node == {"kind": "head", "name": "a1.g0", "layer": 1}


def test_a_clicked_edge_names_its_graph_nodes_and_attention_edges_cross_positions(built):
    _, _, graph = built
    w = CircuitGraph(graph)
    assert w.selected_edge == -1 and w.selected_edge_nodes is None
    src, dst, idx = payload_array(w.graph["src"]), payload_array(w.graph["dst"]), w._view["node_index"]
    w.selected_edge = 3
    target, source = w.selected_edge_nodes
    assert (target, source) == (int(idx[dst[3]]), int(idx[src[3]]))
    assert graph.adjacency[target, source] != 0
    edges = w.attention_edges()
    assert edges and all(graph.node(s)["pos"] < graph.node(t)["pos"] for t, s in edges)
    drawn = {(int(idx[d]), int(idx[s])) for d, s in zip(dst, src, strict=True)}
    assert set(edges) <= drawn
    crossing = [
        (t, s) for t, s in drawn if graph.node(s)["pos"] < graph.node(t)["pos"] and graph.node(s)["kind"] != "logit"
    ]
    assert set(edges) == set(crossing)  # a later position is reached only through attention, above the source
    from tests.circuits.test_edge_view import small_circuit

    with pytest.raises(TypeError, match="attribution graph's CircuitGraph"):
        CircuitGraph(small_circuit()).attention_edges()
