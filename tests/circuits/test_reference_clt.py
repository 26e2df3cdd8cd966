"""Attribution graphs on a cross-layer transcoder against circuit-tracer 0.5.0's on the same tiny models and CLT.

``tests/reference/circuit_tracer_clt_graph.py`` (run in ``.ref/circuit-tracer``) wrote one JumpReLU CLT with an
affine skip per family in Gemma Scope 2's multi-layer layout, read it with circuit-tracer's own
``load_gemma_scope_2_clt`` and saved circuit-tracer's graph over the tiny models of ``circuit_tracer_graph.py``.
interplab reads the same files with its own loader and must give the same adjacency to 1e-4 of its largest
entry (after mapping circuit-tracer's feature order to interplab's), the same logit targets, activations,
pruned nodes and edges, replacement and completeness scores, and the same nodes under ``max_feature_nodes``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from interplab.core.circuits import attribute
from interplab.core.saes.clt_io import load_clt
from safetensors.torch import load_file

import interplab as ilab

ROOT = Path(__file__).resolve().parents[2]
REF = ROOT / "tests" / "reference"
FIXTURE = REF / "circuit_tracer_clt_graph.json"
VENV = ROOT / ".ref" / "circuit-tracer"


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(FIXTURE.read_text())


def interplab_graph(family: str, ref: dict, **kwargs):
    model = ilab.load_model(REF / "circuit_tracer" / family / "model", dtype=torch.float32)
    clt = load_clt(REF / "circuit_tracer_clt" / family / "clt")
    prompt = json.loads(FIXTURE.read_text())["prompt"]
    graph = attribute(model, clt, prompt, batch_size=16, bos_error=False, progress=False, **kwargs)
    return graph, load_file(str(REF / "circuit_tracer_clt" / family / "graph.safetensors"))


def _permutation(graph, feats_F3: torch.Tensor) -> torch.Tensor:
    order = torch.tensor([graph.feature_index(*f) for f in feats_F3.tolist()], dtype=torch.long)
    assert sorted(order.tolist()) == list(range(graph.n_features))
    return torch.cat([order, torch.arange(graph.n_features, graph.n_nodes)])


@pytest.mark.parametrize("family", ["gemma3", "llama"])
def test_clt_graph_equals_circuit_tracers(reference, family):
    ref = reference["families"][family]
    graph, ct = interplab_graph(family, ref)
    assert graph.token_ids == ref["token_ids"] and graph.logit_ids == ref["logit_ids"]
    torch.testing.assert_close(graph.logit_probs, ct["logit_probabilities"], atol=1e-5, rtol=1e-4)
    assert graph.n_features == ref["n_features"] > 100
    perm = _permutation(graph, ct["active_features"][ct["selected_features"]])
    expected = ct["adjacency"]
    scale = float(expected.abs().max())
    torch.testing.assert_close(graph.adjacency[perm][:, perm], expected, atol=1e-4 * max(1.0, scale), rtol=0)
    assert int((expected.abs() > 1e-2 * scale).sum()) > 100  # the rows have teeth
    n_f = graph.n_features
    torch.testing.assert_close(graph.activations[perm[:n_f]], ct["activation_values"], atol=1e-5, rtol=1e-5)
    kept = graph.prune(ref["node_threshold"], ref["edge_threshold"])
    assert torch.equal(kept.nodes[perm], ct["node_mask"].bool())
    assert torch.equal(kept.edges[perm][:, perm], ct["edge_mask"].bool())
    assert graph.scores() == pytest.approx((ref["replacement_score"], ref["completeness_score"]), abs=1e-4)


def test_clt_features_write_to_later_layers(reference):
    """A layer-0 feature's edges reach layer-1 features through its decoder to layer 1 (a per-layer set has none)."""
    ref = reference["families"]["gemma3"]
    graph, _ = interplab_graph("gemma3", ref)
    layer0 = (graph.features[:, 0] == 0).nonzero().flatten()
    layer1 = (graph.features[:, 0] == 1).nonzero().flatten()
    same_pos = graph.features[layer1][:, None, 1] == graph.features[layer0][None, :, 1]
    block = graph.adjacency[layer1][:, layer0]
    assert bool((block[same_pos] != 0).any())


@pytest.mark.parametrize("family", ["gemma3", "llama"])
def test_clt_max_feature_nodes_picks_circuit_tracers_features(reference, family):
    ref = reference["families"][family]
    graph, ct = interplab_graph(family, ref, max_feature_nodes=ref["max_feature_nodes"])
    assert graph.n_features == ref["max_feature_nodes"]
    perm = _permutation(graph, ct["capped_features"])
    expected = ct["capped_adjacency"]
    scale = float(expected.abs().max())
    torch.testing.assert_close(graph.adjacency[perm][:, perm], expected, atol=1e-4 * max(1.0, scale), rtol=0)


@pytest.mark.skipif(
    not (VENV / ".built").exists(),
    reason="circuit-tracer's environment is not built: bash tests/reference/build_circuit_tracer.sh",
)
def test_the_clt_fixtures_are_what_circuit_tracer_gives_now(tmp_path, reference):
    out = tmp_path / FIXTURE.name
    subprocess.run([str(VENV / "bin" / "python"), str(REF / "circuit_tracer_clt_graph.py"), str(out)], check=True,
                   cwd=ROOT, capture_output=True, timeout=600)  # fmt: skip
    new = json.loads(out.read_text())
    for family, old in reference["families"].items():
        fresh = new["families"][family]
        for key, value in old.items():
            assert fresh[key] == (pytest.approx(value, abs=1e-5) if isinstance(value, float) else value), (family, key)
        made, kept = tmp_path / "circuit_tracer_clt" / family, REF / "circuit_tracer_clt" / family
        for name in [f"clt/params_layer_{i}.safetensors" for i in range(old["n_layers"])] + ["graph.safetensors"]:
            a, b = load_file(str(made / name)), load_file(str(kept / name))
            assert a.keys() == b.keys()
            for k in a:
                # float32 sums in another order (another CPU's vector width) move a few entries by ~1e-4 relative
                scale = max(1.0, float(b[k].abs().max()))
                torch.testing.assert_close(a[k], b[k], atol=1e-5 * scale, rtol=1e-4)
