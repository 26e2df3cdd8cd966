"""What a CircuitGraph draws (core/circuits/view.py): the readable default pruning on the 09 notebook's graph
(at most 100 edges, the answer's strongest path kept), labels with visible spaces, each node's influence as a
share and a place, and a repr that cuts the prompt at a word."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from interplab.core.circuits import Graph, attribute, embedded_transcoders, prune
from interplab.core.circuits.prune import drop_dangling, edge_influence, logit_weights
from interplab.core.circuits.view import graph_view, visible_token

from tests.circuits.test_attribute import PROMPT, transcoders
from tests.tiny import tiny_model

IOI = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture(scope="module")
def tiny_graph() -> Graph:
    model = tiny_model("gemma3")
    return attribute(model, transcoders(model.d_model), PROMPT, batch_size=16, progress=False)


def strongest_path(graph: Graph, token: str, logit: str) -> list[int]:
    """The path from the prompt's ``token`` through features to the ``logit`` node with the largest product of
    positive edge weights (the 09 notebook's walk over the adjacency, in layer order)."""
    A = graph.adjacency
    source = graph.n_features + graph.n_errors + graph.tokens.index(token)
    target = graph.n_nodes - graph.n_logits + graph.logit_tokens.index(logit)
    best = {source: (1.0, [source])}
    for v in [*sorted(range(graph.n_features), key=lambda i: int(graph.features[i, 0])), target]:
        reach = [(s * float(A[v, u]), path) for u, (s, path) in best.items() if float(A[v, u]) > 0]
        if reach:
            s, path = max(reach, key=lambda r: r[0])
            best[v] = (s, [*path, v])
    return best[target][1]


@pytest.mark.embedded
def test_default_pruning_leaves_a_readable_graph_with_the_answers_strongest_path(embedded):
    graph = attribute(embedded, embedded_transcoders(), IOI, max_feature_nodes=48, batch_size=16, progress=False)
    control = graph_view(graph, 0.9, 0.99, max_edges=10_000)  # circuit-tracer's thresholds, no cap: a hairball
    view = graph_view(graph)
    assert control["n_edges"] > 500
    assert 20 <= view["n_edges"] <= 100 and view["n_nodes"] < control["n_nodes"]
    logits = [view["names"][i] for i in np.nonzero(view["kind"] == 3)[0]]
    assert logits[0] == "␣Mary" and "␣Mary" in view["prompt_names"] and " Mary" not in logits
    assert view["rule"] == "nodes carrying 80% of the influence on the logits; edges carrying 90% of it, at most 100"
    path = strongest_path(graph, " Mary", " Mary")
    where = {int(g): v for v, g in enumerate(view["node_index"])}
    assert len(path) >= 3 and all(node in where for node in path)
    edges = set(zip(view["src"].tolist(), view["dst"].tolist()))
    assert all((where[a], where[b]) in edges for a, b in itertools.pairwise(path))


def test_max_edges_keeps_the_edges_with_the_most_influence_and_nothing_dangling(tiny_graph):
    g = tiny_graph
    args = (g.adjacency, g.n_features, g.n_pos, g.n_logits, g.logit_probs, 0.9, 0.99)
    full, capped = prune(*args), prune(*args, max_edges=30)
    assert int(full.edges.sum()) > 30 >= int(capped.edges.sum()) > 0
    assert not (capped.edges & ~full.edges).any() and not (capped.nodes & ~full.nodes).any()
    # the 30 edges of the thresholded graph with the largest share of the influence, less the dangling ones
    score = edge_influence(g.adjacency, full.nodes, logit_weights(g.n_nodes, g.logit_probs))
    score[~full.edges] = -1
    expected = torch.zeros(g.n_nodes * g.n_nodes, dtype=torch.bool)
    expected[torch.topk(score.flatten(), 30).indices] = True
    expected, nodes = expected.view(g.n_nodes, g.n_nodes), full.nodes.clone()
    drop_dangling(nodes, expected, g.n_features, g.n_nodes - g.n_pos - g.n_logits)
    assert torch.equal(capped.edges, expected) and torch.equal(capped.nodes, nodes)
    sources = g.n_nodes - g.n_pos - g.n_logits
    kept = capped.nodes.nonzero().flatten()
    assert all(capped.edges[:, i].any() for i in kept if i < sources)  # every feature and error leads on
    assert all(capped.edges[i].any() for i in kept if i < g.n_features)  # every feature is reached
    assert capped.nodes[sources:].all()  # tokens and logits stay


def test_logit_and_token_nodes_are_labelled_with_visible_spaces(tiny_graph):
    view = graph_view(tiny_graph)
    kinds = view["kind"]
    logits = [view["names"][i] for i in np.nonzero(kinds == 3)[0]]
    assert logits == [visible_token(t) for t in tiny_graph.logit_tokens] and all(logits)
    assert view["prompt_names"] == [visible_token(t) for t in tiny_graph.tokens]
    assert visible_token(" Mary") == "␣Mary" and visible_token("Mary ") == "Mary␣" and visible_token("\n") == "↵"
    assert visible_token("evening") != visible_token(" evening")
    features = [view["names"][i] for i in np.nonzero(kinds == 0)[0]]
    assert features and all(n.startswith("L") and " #" in n for n in features)


def test_influence_is_a_share_and_a_place_not_a_cumulative_fraction(tiny_graph):
    view = graph_view(tiny_graph)
    share, order, rank = view["influence"], view["order"], view["rank"]
    assert ((share >= 0) & (share <= 1)).all() and ((order >= 1) & (order <= tiny_graph.n_nodes)).all()
    top = int(np.argmin(order))
    assert order[top] == 1 and share[top] == share.max() and np.isclose(rank[top], share[top], atol=1e-6)
    assert len(set(order.tolist())) == len(order)  # each node its own place


def test_repr_cuts_the_prompt_at_a_word():
    g = Graph(prompt=IOI, token_ids=[1], tokens=["x"], n_layers=1, features=torch.zeros(0, 3, dtype=torch.long),
              activations=torch.zeros(0), logit_ids=[1], logit_tokens=["x"], logit_probs=torch.ones(1),
              adjacency=torch.zeros(3, 3))  # fmt: skip
    shown = repr(g).split("'")[1]
    assert shown.endswith("…") and IOI.startswith(shown[:-1]) and IOI[len(shown) - 1] == " "
