"""Bad inputs of ilab.circuits: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

import interplab as ilab
from tests.contracts.rows import Row, T, V
from tests.tiny import tiny_model


@functools.cache
def tiny_circuit() -> tuple[Any, Any, Any]:
    """A tiny Gemma 3 with random transcoders and its attribution graph (built once)."""
    from tests.circuits.test_attribute import PROMPT, transcoders

    model = tiny_model("gemma3")
    tcs = transcoders(model.d_model)
    return model, tcs, ilab.circuits.attribute(model, tcs, PROMPT, batch_size=16, progress=False)


def _feature_at_layer(layer: int) -> int:
    """The first feature node of the tiny graph at ``layer``."""
    return int((tiny_circuit()[2].features[:, 0] == layer).nonzero()[0])


@functools.cache
def _qk_result() -> Any:
    """The QK result of the tiny graph's last logit node."""
    return ilab.circuits.qk_edge(*tiny_circuit(), tiny_circuit()[2].n_nodes - 1)


def _other_transcoders() -> Any:
    """Transcoders of the tiny model other than the ones its graph was built from."""
    from tests.circuits.test_attribute import transcoders

    return transcoders(tiny_circuit()[0].d_model, seed=7)


ROWS: list[Row] = [
    Row("ilab.circuits.attribute", lambda c: ilab.circuits.attribute(c.model, [], "the cat"), V, "Supported families"),
    Row(
        "ilab.circuits.check_transcoders",
        lambda c: ilab.circuits.check_transcoders(c.model, "x"),
        T,
        "must be a list or a dict of transcoders",
    ),
    Row(
        "ilab.circuits.intervene",
        lambda c: ilab.circuits.intervene(tiny_circuit()[0], tiny_circuit()[1], "the cat", {}),
        V,
        "changes must be a non-empty",
    ),
    Row(
        "ilab.circuits.transcoder_quality",
        lambda c: ilab.circuits.transcoder_quality(c.model, [c.sae], ["a"]),
        T,
        "must be a transcoder",
    ),
    Row(
        "ilab.circuits.prune",
        lambda c: ilab.circuits.prune(torch.zeros(3, 3), 0, 2, 1, torch.ones(1), 2.0),
        V,
        r"node_threshold must be in \[0, 1\], got 2\.0",
    ),
    Row(
        "ilab.circuits.influence",
        lambda c: ilab.circuits.influence(torch.tensor([[0.0, 1], [1, 0]]), torch.tensor([1.0, 0])),
        RuntimeError,
        "cycle",
    ),
    Row(
        "ilab.circuits.feature_cards",
        lambda c: ilab.circuits.feature_cards(tiny_circuit()[2], tiny_circuit()[0], tiny_circuit()[1], context=0),
        V,
        "context",
    ),
    Row("ilab.circuits.Graph.feature_index", lambda c: tiny_circuit()[2].feature_index(99, 0, 0), V, "is not a node"),
    Row(
        "ilab.circuits.Graph.load",
        lambda c: ilab.circuits.Graph.load(c.tmp / "no-graph"),
        FileNotFoundError,
        "No attribution graph",
    ),
    Row(
        "ilab.circuits.qk",
        lambda c: ilab.circuits.qk(*tiny_circuit(), tiny_circuit()[2].n_features, (0, 0), 0),
        V,
        r"node \d+ is of kind 'error', which no attention head writes to .*need a feature node \(0\.\.\d+\) or a logit",
    ),
    Row(
        "ilab.circuits.qk",
        lambda c: ilab.circuits.qk(*tiny_circuit(), _feature_at_layer(0), (1, 0), 0),
        V,
        r"head=\(1, 0\) does not write to node \d+ \(a feature at layer 0, .*layer in 0\.\.0 and head in 0\.\.3",
    ),
    Row(
        "ilab.circuits.qk",
        lambda c: ilab.circuits.qk(*tiny_circuit(), 0, (0, 0), 99),
        V,
        r"key_pos=99 is not a position the query at \d+ attends to: give one in 0\.\.\d+",
    ),
    Row(
        "ilab.circuits.qk",
        lambda c: ilab.circuits.qk(tiny_circuit()[0], _other_transcoders(), tiny_circuit()[2], 0, (0, 0), 0),
        V,
        "graph was not built from this model's tokens and these transcoders",
    ),
    Row(
        "ilab.circuits.qk_edge",
        lambda c: ilab.circuits.qk_edge(*tiny_circuit(), (_feature_at_layer(1), _feature_at_layer(1))),
        V,
        r"\(\d+, \d+\) is not an attention edge: the source is a feature at layer 1, .*joins a feature, error or "
        r"token at an earlier position",
    ),
    Row(
        "ilab.circuits.qk_edge",
        lambda c: ilab.circuits.qk_edge(*tiny_circuit(), "last"),
        T,
        r"node_or_edge must be a node index or a \(target, source\) pair .*got 'last'",
    ),
    Row(
        "ilab.circuits.qk_cards",
        lambda c: ilab.circuits.qk_cards(*tiny_circuit(), []),
        V,
        "nodes must be a non-empty list of node indices",
    ),
    Row(
        "ilab.circuits.QKResult.to_dict",
        lambda c: _qk_result().to_dict(top=0),
        V,
        "top",
    ),
    Row(
        "ilab.circuits.ablation_control",
        lambda c: ilab.circuits.ablation_control(*tiny_circuit(), "the cat", "x", n=1),
        V,
        r"good='the cat' is 2 tokens .*give a string that is one token",
    ),
    Row(
        "ilab.circuits.ablation_control",
        lambda c: ilab.circuits.ablation_control(*tiny_circuit(), "x", "y", features=[(99, 0, 0)]),
        V,
        r"Feature \(layer=99, pos=0, latent=0\) is not a node of this graph",
    ),
    Row("ilab.circuits.top_features", lambda c: ilab.circuits.top_features(tiny_circuit()[2], 0), V, "n must be"),
    Row(
        "ilab.circuits.random_features",
        lambda c: ilab.circuits.random_features(tiny_circuit()[2], 10**6),
        V,
        "n must be",
    ),
    Row("ilab.circuits.Graph.node", lambda c: tiny_circuit()[2].node(10**6), IndexError, "out of range"),
    Row("ilab.circuits.Graph.prune", lambda c: tiny_circuit()[2].prune(1.5), V, "node_threshold must be in \\[0, 1\\]"),
    Row(
        "ilab.circuits.Graph.to_json",
        lambda c: tiny_circuit()[2].to_json(edge_threshold=-1),
        V,
        "edge_threshold must be in \\[0, 1\\]",
    ),
]


@functools.cache
def tiny_edges() -> Any:
    """Edge scores of a tiny Llama on two pairs (built once)."""
    from tests.circuits.test_edges import METRIC
    from tests.patching.test_reference import CLEAN, CORRUPT

    return ilab.circuits.edges(tiny_model("llama"), (CLEAN, CORRUPT), "eap", metric=METRIC)


_LLAMA = functools.cache(lambda: tiny_model("llama"))

ROWS += [
    Row(
        "ilab.circuits.edges",
        lambda c: ilab.circuits.edges(_LLAMA(), (["the cat sat on"], ["the cat sat on the"]), metric=lambda x: x[:, 0]),
        V,
        r"prompt pairs of one length: pair 0 has 5 clean and 6 corrupted tokens",
    ),
    Row(
        "ilab.circuits.edges",
        lambda c: ilab.circuits.edges(_LLAMA(), (["the cat"], ["the dog"]), "acdc", metric=lambda x: x[:, 0]),
        V,
        r"method='acdc' is not one of \('eap', 'eap-ig'\)",
    ),
    Row(
        "ilab.circuits.edges",
        lambda c: ilab.circuits.edges(tiny_model("neox"), (["the cat"], ["the dog"]), metric=lambda x: x[:, 0]),
        V,
        r"model family 'neox' is not one of them",
    ),
    Row("ilab.circuits.edges", lambda c: ilab.circuits.edges(_LLAMA(), 3), T, "pairs must be PromptPairs .*got int"),
    Row(
        "ilab.circuits.EdgeScores.circuit",
        lambda c: tiny_edges().circuit(0),
        V,
        r"n_edges must be an integer in 1\.\.82, got 0",
    ),
    Row(
        "ilab.circuits.EdgeScores.random_circuit",
        lambda c: tiny_edges().random_circuit(83),
        V,
        r"n_edges must be an integer in 1\.\.82, got 83",
    ),
    Row("ilab.circuits.EdgeScores.faithfulness", lambda c: tiny_edges().faithfulness([]), V, "ns is empty"),
    Row(
        "ilab.circuits.EdgeScores.chart",
        lambda c: tiny_edges().chart([5, 0]),
        V,
        r"ns\[1\] must be an integer in 1\.\.82, got 0",
    ),
]

EXEMPT: dict[str, str] = {
    "ilab.circuits.EdgeScores": "made by ilab.circuits.edges (which has rows)",
    "ilab.circuits.Circuit": "made by EdgeScores.circuit and random_circuit (which have rows)",
    "ilab.circuits.Circuit.from_indices": "how EdgeScores builds a circuit from the edges it chose",
    "ilab.circuits.Graph": "built by ilab.circuits.attribute and Graph.load (which have rows)",
    "ilab.circuits.Graph.save": "writes the graph it holds to any folder path, atomically",
    "ilab.circuits.InterventionResult": "made by ilab.circuits.intervene (which has rows)",
    "ilab.circuits.InterventionResult.prob_change": "a token id indexes the logits it holds",
    "ilab.circuits.Pruned": "a NamedTuple of masks that prune returns",
    "ilab.circuits.QKResult": "made by ilab.circuits.qk_edge (which has rows)",
    "ilab.circuits.embedded_transcoders": "takes no arguments",
    "ilab.circuits.embedded_clt": "takes no arguments",
    "ilab.circuits.AblationControl": "made by ilab.circuits.ablation_control (which has rows)",
    "ilab.circuits.graph_scores": "arrays of a Graph (Graph.scores); the thresholds-free twin of prune, which has rows",
}


def _three_layer_clt() -> Any:
    from interplab.core.saes.clt import CrossLayerTranscoder

    return CrossLayerTranscoder(n_layers=3, d_model=tiny_circuit()[0].d_model, d_sae=8)


def _two_layer_clt() -> Any:
    from interplab.core.saes.clt import CrossLayerTranscoder

    return CrossLayerTranscoder(n_layers=2, d_model=tiny_circuit()[0].d_model, d_sae=8)


ROWS += [
    Row(
        "ilab.circuits.attribute",
        lambda c: ilab.circuits.attribute(tiny_circuit()[0], _three_layer_clt(), "the cat"),
        V,
        r"cross-layer transcoder has 3 layers and .* has 2: a CLT covers every layer",
    ),
    Row(
        "ilab.circuits.intervene",
        lambda c: ilab.circuits.intervene(tiny_circuit()[0], _three_layer_clt(), "the cat", {(0, 1, 0): 0.0}),
        V,
        r"cross-layer transcoder has 3 layers and .* has 2: a CLT covers every layer",
    ),
    Row(
        "ilab.circuits.feature_cards",
        lambda c: ilab.circuits.feature_cards(tiny_circuit()[2], tiny_circuit()[0], _three_layer_clt()),
        V,
        r"cross-layer transcoder has 3 layers and .* has 2: a CLT covers every layer",
    ),
    Row(
        "ilab.circuits.qk_edge",
        lambda c: ilab.circuits.qk_edge(tiny_circuit()[0], _two_layer_clt(), tiny_circuit()[2], 0),
        V,
        "graph was not built from this model's tokens and these transcoders",
    ),
    Row(
        "ilab.circuits.check_transcoders",
        lambda c: ilab.circuits.check_transcoders(tiny_circuit()[0], _three_layer_clt()),
        T,
        "checks one transcoder per layer; a CrossLayerTranscoder is checked by its own check_fits",
    ),
    Row(
        "ilab.circuits.load_clt",
        lambda c: ilab.circuits.load_clt(c.tmp / "no-clt"),
        FileNotFoundError,
        "No cross-layer transcoder folder at .*no-clt",
    ),
    Row("ilab.circuits.save_clt", lambda c: ilab.circuits.save_clt(c.sae, c.tmp / "clt"), T, "got TopKSAE"),
    Row(
        "ilab.circuits.train_clt",
        lambda c: ilab.circuits.train_clt(c.model, ["the cat"], d_sae=8, activation="jumprelu"),
        V,
        r"train_clt trains activation='topk' or 'relu', got 'jumprelu'",
    ),
]
