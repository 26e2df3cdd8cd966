"""A node's incoming attention and its strongest head's QK contributors (core/circuits/qk_heads.py).

The query-side and key-side shares are the row and column sums of ``qk``'s pair table, which
``test_qk.py`` checks against brute-force removals in the real module; the attention pattern and values
behind ``moved`` rebuild each head's output that the model itself computes.
"""

from __future__ import annotations

import json
from itertools import pairwise

import pytest
import torch
from interplab.core.circuits import attribute, qk_cards, qk_edge
from interplab.core.circuits.qk import qk
from interplab.core.circuits.qk_heads import QKSession, attention_pattern

from tests.circuits.test_attribute import PROMPT, transcoders
from tests.tiny import tiny_model


@pytest.fixture(scope="module")
def circuit():
    model = tiny_model("gemma3")  # local layers with a sliding window of 8: the 11-token prompt crosses it
    tcs = transcoders(model.d_model)
    return model, tcs, attribute(model, tcs, PROMPT, batch_size=16, progress=False)


def test_each_side_adds_up_the_pair_table_of_the_same_head(circuit):
    model, tcs, graph = circuit
    node = next(i for i, (layer, pos, _) in enumerate(graph.features.tolist()) if layer == 1 and pos == 9)
    strongest = qk_edge(model, tcs, graph, node, batch_size=16)
    assert strongest.heads.moved.abs().is_monotonic_decreasing
    assert strongest.head[0] <= 1 and 0 < strongest.key_pos < 9
    result = qk_edge(model, tcs, graph, node, head=(1, 2), batch_size=16)  # layer 1: features on both sides
    assert result.head == (1, 2)
    table = qk(model, tcs, graph, node, result.head, result.key_pos, batch_size=16)
    assert result.score == pytest.approx(table.attrs["score"], abs=1e-4)
    for side, column in ((result.query, "query"), (result.key, "key")):
        sums = {str(k): v for k, v in table.groupby(column, observed=True).contribution.sum().items()}
        shares = {k: v for k, v in zip(side.source, side.contribution, strict=True) if abs(v) > 1e-5}
        assert shares == pytest.approx({k: v for k, v in sums.items() if abs(v) > 1e-5}, abs=1e-4)
        assert len(shares) > 3
        assert float(side.contribution.sum()) == pytest.approx(result.score, abs=1e-4)
    json.dumps(result.to_dict(top=3))  # plain data for the widget


def test_patterns_and_values_rebuild_each_heads_output(circuit):
    model, tcs, graph = circuit
    session = QKSession(model, tcs, graph, batch_size=4)
    d_head = model.d_head
    for layer in range(model.n_layers):
        z_PHD = session.io[layer]["z"][0].detach().float().view(graph.n_pos, -1, d_head)
        v_PKD = session.io[layer]["v"][0].detach().float().view(graph.n_pos, -1, d_head)
        for head in range(model.n_heads):
            maps = session.maps(layer, head)
            pattern_K = attention_pattern(maps, session.run.attn_in[layer][0], 10, model.config)
            assert float(pattern_K.sum()) == pytest.approx(1.0, abs=1e-5)
            rebuilt = pattern_K @ v_PKD[:11, maps.kv_head]
            torch.testing.assert_close(rebuilt, z_PHD[10, head], atol=1e-4, rtol=1e-4)


def test_an_attention_edge_reads_its_source_position_through_a_higher_head(circuit):
    model, tcs, graph = circuit
    target = next(i for i, (layer, pos, _) in enumerate(graph.features.tolist()) if layer == 1 and pos == 8)
    source = next(i for i, (layer, pos, _) in enumerate(graph.features.tolist()) if layer == 0 and pos == 4)
    result = qk_edge(model, tcs, graph, (target, source), batch_size=16)
    assert result.key_pos == 4 and result.head[0] == 1
    at_key = result.heads[(result.heads.key_pos == 4) & (result.heads.layer == 1)]
    assert result.head[1] == int(at_key.iloc[0]["head"])
    cards = qk_cards(model, tcs, graph, [target, graph.n_nodes - 1], top=2, batch_size=16)
    assert set(cards) == {str(target), str(graph.n_nodes - 1)}
    sides = [c[side] for c in cards.values() for side in ("query", "key")]
    # at most ``top`` contributors a side, strongest first; a source whose share is zero is left out (here the
    # bias: float noise of ~3e-8 on some CPUs, exactly 0 on others)
    assert all(1 <= len(rows) <= 2 and abs(rows[0]["contribution"]) > 0.1 for rows in sides)
    assert all(abs(a["contribution"]) >= abs(b["contribution"]) for rows in sides for a, b in pairwise(rows))


def test_an_edge_card_is_its_qk_edge_and_the_view_keys_it_by_drawn_ends(circuit):
    from interplab.core.circuits.view import attention_edges, graph_view, qk_view

    model, tcs, graph = circuit
    view = graph_view(graph, 1.0, 1.0, max_edges=400)
    edges = attention_edges(graph, view)
    assert edges and all(graph.node(s)["pos"] < graph.node(t)["pos"] for t, s in edges)
    target, source = edges[0]
    cards = qk_cards(model, tcs, graph, [(target, source), target], top=3, batch_size=16)
    alone = qk_edge(model, tcs, graph, (target, source), batch_size=16).to_dict(top=3)
    entry = cards[f"{target},{source}"]
    assert entry["edge"] == [target, source] and entry["key_pos"] == graph.node(source)["pos"]
    assert entry["head"] == alone["head"] and entry["score"] == pytest.approx(alone["score"], abs=1e-5)
    assert [r["source"] for r in entry["query"]] == [r["source"] for r in alone["query"]]
    shown = qk_view(cards, view["node_index"])
    where = {int(n): j for j, n in enumerate(view["node_index"].tolist())}
    assert set(shown) == {f"{where[target]},{where[source]}", str(where[target])}
