"""Edge-level circuits (core/circuits/edge_graph.py, edge_forward.py, edges.py, edge_circuit.py).

The edge runner is checked against the model itself (no patch is the clean run, every edge patched is the
corrupted run, through Gemma's post-attention norm too), EAP-IG against exact per-edge patching (whose
equality with TransformerLens is in test_edges_reference.py), and circuits by their faithfulness: the
full graph is 1, and on the embedded model's IOI pairs the top circuits beat random circuits of their size.
"""

from __future__ import annotations

import pytest
import torch
from interplab.core.circuits.edge_forward import EdgeForward
from interplab.core.circuits.edge_graph import EdgeGraph

import interplab as ilab
from tests.patching.test_reference import ANSWERS, CLEAN, CORRUPT, WRONG, louder
from tests.tiny import tiny_hf_model, tiny_model, tiny_tokenizer

METRIC = ilab.metrics.logit_diff(ANSWERS, WRONG)


def test_graph_joins_each_node_to_every_input_after_it():
    graph = EdgeGraph.build(2, 4, 2)
    assert graph.upstream == ["input", *[f"a0.h{h}" for h in range(4)], "m0", *[f"a1.h{h}" for h in range(4)], "m1"]
    assert graph.downstream[4:9] == ["a0.g0<k>", "a0.g1<k>", "a0.g0<v>", "a0.g1<v>", "m0"]
    into = lambda u: {graph.downstream[v] for v in graph.valid[graph.upstream.index(u)].nonzero().flatten()}  # noqa: E731
    assert into("input") == set(graph.downstream)
    assert into("a0.h2") == {"m0", "logits"} | {n for n in graph.downstream if n.startswith("a1") or n == "m1"}
    assert into("m1") == {"logits"}
    assert graph.n_edges == len(graph.edge_names()) == 19 + 4 * 11 + 10 + 4 * 2 + 1  # input, a0, m0, a1, m1
    parallel = EdgeGraph.build(2, 4, 2, parallel=True)  # the MLP reads the stream its heads read
    assert not parallel.valid[1:5, graph.downstream.index("m0")].any()


@pytest.mark.parametrize("family", ["gemma3", "llama", "gpt2"])
def test_no_patch_is_the_clean_run_and_every_edge_patched_the_corrupted_run(family):
    model = tiny_model(family)
    ids_clean, ids_corrupt = model.to_tokens(CLEAN)["input_ids"], model.to_tokens(CORRUPT)["input_ids"]
    graph = EdgeGraph.of(model)
    run = EdgeForward(model, graph)
    clean, corrupt = run(ids_clean), run(ids_corrupt)
    torch.testing.assert_close(clean.logits, model.logits(CLEAN)[:, -1].float(), atol=1e-5, rtol=0)
    # the upstream outputs add up to the stream the logits read (Gemma: heads through the post-attention norm)
    hidden = model.run_sites(model.to_tokens(CLEAN), [f"blocks.{model.n_layers - 1}.hook_resid_post"])
    last = hidden[0].float()
    if family != "gpt2":  # GPT-2's biases and position embeddings are in no node
        torch.testing.assert_close(clean.upstream.sum(0), last, atol=1e-4, rtol=1e-4)
    everything = run(ids_clean, patch=(corrupt.upstream, graph.valid.float()))
    torch.testing.assert_close(everything.logits, corrupt.logits, atol=1e-5, rtol=0)
    assert (clean.logits - corrupt.logits).abs().max() > 1e-3  # the control: the runs differ


def exact_scores(model, scores) -> torch.Tensor:
    """Each edge patched alone: the change of the mean metric (the definition EAP approximates)."""
    run = EdgeForward(model, scores.graph)
    exact = torch.zeros_like(scores.scores)
    rows = torch.arange(scores.ids_clean.shape[0])
    for u, v in scores.graph.valid.nonzero().tolist():
        mask = torch.zeros(scores.graph.valid.shape)
        mask[u, v] = 1
        out = run(scores.ids_clean, patch=(scores.corrupt_upstream, mask))
        exact[u, v] = float(scores.metric(out.logits, rows).mean()) - scores.clean_metric
    return exact


@pytest.mark.parametrize("name", ["gemma3", "llama", "gpt2"])
def test_eap_ig_is_closer_to_exact_edge_patching_than_eap(name):
    model = (ilab.load_model(louder(tiny_hf_model("gpt2", seed=3)), tokenizer=tiny_tokenizer()) if name == "gpt2"
             else tiny_model(name))  # fmt: skip
    eap = ilab.circuits.edges(model, (CLEAN, CORRUPT), "eap", metric=METRIC)
    ig = ilab.circuits.edges(model, (CLEAN, CORRUPT), "eap-ig", metric=METRIC, steps=16)
    one = ilab.circuits.edges(model, (CLEAN, CORRUPT), "eap-ig", metric=METRIC, steps=1)
    torch.testing.assert_close(one.scores, eap.scores, atol=0, rtol=0)  # one step is EAP
    valid = eap.graph.valid
    exact = exact_scores(model, eap)[valid]
    error = lambda s: float((s.scores[valid] - exact).abs().mean())  # noqa: E731
    corr = lambda s: float(torch.corrcoef(torch.stack([s.scores[valid], exact]))[0, 1])  # noqa: E731
    assert error(ig) < error(eap) < float(exact.abs().mean())
    assert corr(ig) > max(0.9, corr(eap))


def test_faithfulness_of_the_whole_graph_is_one_and_a_circuit_lists_its_edges():
    model = tiny_model("llama")
    scores = ilab.circuits.edges(model, (CLEAN, CORRUPT), "eap-ig", metric=METRIC, steps=3)
    table = scores.faithfulness([1, 10, scores.graph.n_edges], random=2)
    assert list(table.columns) == ["circuit", "n_edges", "metric", "faithfulness"] and len(table) == 9
    full = table[table["n_edges"] == scores.graph.n_edges]
    assert full["faithfulness"].tolist() == pytest.approx([1.0] * 3, abs=1e-5)
    circuit = scores.circuit(10)
    assert circuit.n_edges == 10 and list(circuit.edges["score"].abs()) == sorted(circuit.edges["score"].abs(),
                                                                                  reverse=True)  # fmt: skip
    assert scores.table()["edge"].head(10).tolist() == (circuit.edges["upstream"] + "->" +
                                                        circuit.edges["downstream"]).tolist()  # fmt: skip
    assert scores.random_circuit(10, seed=1).n_edges == 10
    chart = scores.chart([1, 10], random=1)
    assert "faithfulness" in chart.to_json()
    assert "EdgeScores(eap-ig, 82 edges, 2 pairs" in repr(scores)


@pytest.mark.embedded
def test_embedded_ioi_circuit_is_more_faithful_than_random_circuits_of_its_size(embedded):
    pairs = ilab.patching.ioi(embedded, n=8, seed=0)
    pairs = next(iter(pairs.by_length(embedded).values()))
    scores = ilab.circuits.edges(embedded, pairs, "eap-ig", steps=3)
    assert scores.clean_metric - scores.corrupt_metric > 1.0
    table = scores.faithfulness([100, 400], random=2)
    top = table[table["circuit"] == "top"].set_index("n_edges")["faithfulness"]
    random = table[table["circuit"] == "random"].groupby("n_edges")["faithfulness"].max()
    assert (top > random + 0.1).all(), table  # measured: 0.12 and 0.43 against at most 0.00
    assert top[400] > 0.3, table
