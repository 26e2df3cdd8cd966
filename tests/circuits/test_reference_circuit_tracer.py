"""Attribution graphs against circuit-tracer 0.5.0 on the same tiny models, transcoders and prompt.

``tests/reference/circuit_tracer_graph.py`` (run in ``.ref/circuit-tracer``, built by
``tests/reference/build_circuit_tracer.sh``) wrote a tiny Gemma 3 and a tiny Llama as Hugging Face folders,
one JumpReLU transcoder with an affine skip per layer in Gemma Scope 2's layout, and circuit-tracer's graph
of each. interplab loads the same folders and files, builds its graph with circuit-tracer's convention for
position 0 (``bos_error=False``), and must give the same adjacency to 1e-4 (after mapping circuit-tracer's
feature order to interplab's), the same logit targets, scores, pruned nodes and edges, feature nodes under
``max_feature_nodes``, and viewer JSON. When ``.ref/circuit-tracer`` is built the script is rerun into a
temporary folder and its outputs compared with the committed fixtures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from interplab.core.circuits import attribute
from interplab.core.saes import SAE
from interplab.core.saes.releases import Release
from interplab.core.saes.transcoder_releases import build_transcoder
from safetensors.torch import load_file

import interplab as ilab

ROOT = Path(__file__).resolve().parents[2]
REF = ROOT / "tests" / "reference"
FIXTURE = REF / "circuit_tracer_graph.json"
VENV = ROOT / ".ref" / "circuit-tracer"


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(FIXTURE.read_text())


@pytest.mark.skipif(
    not (VENV / ".built").exists(),
    reason="circuit-tracer's environment is not built: bash tests/reference/build_circuit_tracer.sh",
)
def test_the_fixtures_are_what_circuit_tracer_gives_now(tmp_path, reference):
    """Rerun the reference script (as tests/das/test_reference.py does for pyvene) and compare with the fixtures."""
    out = tmp_path / FIXTURE.name
    subprocess.run([str(VENV / "bin" / "python"), str(REF / "circuit_tracer_graph.py"), str(out)], check=True,
                   cwd=ROOT, capture_output=True, timeout=600)  # fmt: skip
    new = json.loads(out.read_text())
    assert new["versions"]["circuit-tracer"] == "0.5.0" and new["prompt"] == reference["prompt"]
    for family, old in reference["families"].items():
        fresh = new["families"][family]
        assert fresh.keys() == old.keys()
        for key, value in old.items():
            assert fresh[key] == (pytest.approx(value, abs=1e-5) if isinstance(value, float) else value), (family, key)
        made, kept = tmp_path / "circuit_tracer" / family, REF / "circuit_tracer" / family
        for name in ["model/model.safetensors", *(f"transcoders/layer_{i}_width_40_l0_tiny_affine/params.safetensors"
                                                  for i in range(old["n_layers"]))]:  # fmt: skip
            a, b = load_file(str(made / name)), load_file(str(kept / name))
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
        a, b = load_file(str(made / "graph.safetensors")), load_file(str(kept / "graph.safetensors"))
        assert a.keys() == b.keys()
        for k in a:
            # float32 sums in another order (another CPU's vector width) move a few entries by ~1e-4 relative
            scale = max(1.0, float(b[k].abs().max()))
            torch.testing.assert_close(a[k], b[k], atol=1e-5 * scale, rtol=1e-4)
    assert sys.executable != str(VENV / "bin" / "python")


def gemma_scope_2_transcoders(folder: Path, n_layers: int) -> list[SAE]:
    """The reference's transcoder folders (a Gemma Scope 2 release's layout) read by interplab's own loader."""
    ids = tuple(f"layer_{layer}_width_40_l0_tiny_affine" for layer in range(n_layers))
    release = Release("tiny-transcoders", "local/tiny", "tiny", "transcoder", "", ids)
    return [build_transcoder(release, sae_id, folder / "transcoders" / sae_id).eval() for sae_id in ids]


def interplab_graph(family: str, ref: dict, bos_error: bool = False):
    folder = REF / "circuit_tracer" / family
    model = ilab.load_model(folder / "model", dtype=torch.float32)
    tcs = gemma_scope_2_transcoders(folder, ref["n_layers"])
    graph = attribute(model, tcs, ref_prompt(), batch_size=16, bos_error=bos_error, progress=False)
    return graph, load_file(str(folder / "graph.safetensors"))


def ref_prompt() -> str:
    return json.loads(FIXTURE.read_text())["prompt"]


def feature_order(graph, ct: dict) -> torch.Tensor:
    """For each of circuit-tracer's selected feature nodes, interplab's node index of the same feature."""
    feats = ct["active_features"][ct["selected_features"]]
    return torch.tensor([graph.feature_index(*f) for f in feats.tolist()], dtype=torch.long)


@pytest.mark.parametrize("family", ["gemma3", "llama"])
def test_adjacency_and_pruning_equal_circuit_tracer(reference, family):
    ref = reference["families"][family]
    graph, ct = interplab_graph(family, ref)
    assert graph.token_ids == ref["token_ids"]
    assert graph.logit_ids == ref["logit_ids"]
    torch.testing.assert_close(graph.logit_probs, ct["logit_probabilities"], atol=1e-5, rtol=1e-4)
    # the same active features (as sets: circuit-tracer orders them layer, position, latent too)
    assert graph.n_features == ref["n_features"] > 20
    order = feature_order(graph, ct)
    assert sorted(order.tolist()) == list(range(graph.n_features))
    # interplab's node order for circuit-tracer's: features mapped, errors, tokens and logits as they are
    perm = torch.cat([order, torch.arange(graph.n_features, graph.n_nodes)])
    ours = graph.adjacency[perm][:, perm]
    expected = ct["adjacency"]
    scale = float(expected.abs().max())
    torch.testing.assert_close(ours, expected, atol=1e-4 * max(1.0, scale), rtol=0)
    assert int((expected.abs() > 1e-2 * scale).sum()) > 100  # the rows have teeth
    torch.testing.assert_close(graph.activations[order], ct["activation_values"], atol=1e-5, rtol=1e-5)
    # the same pruned graph
    kept = graph.prune(ref["node_threshold"], ref["edge_threshold"])
    assert torch.equal(kept.nodes[perm], ct["node_mask"].bool())
    assert torch.equal(kept.edges[perm][:, perm], ct["edge_mask"].bool())
    assert graph.scores() == pytest.approx((ref["replacement_score"], ref["completeness_score"]), abs=1e-4)


def test_circuit_tracer_gemma_token_nodes_miss_the_embedding_scale(reference):
    """circuit-tracer 0.5.0's nnsight backend reads Gemma's token vectors unscaled; the fixture corrects them."""
    ref = reference["families"]["gemma3"]
    assert ref["embed_scale"] == pytest.approx(32**0.5)
    assert reference["families"]["llama"]["embed_scale"] == 1.0
    ct = load_file(str(REF / "circuit_tracer" / "gemma3" / "graph.safetensors"))
    n_f, n_pos = ref["n_features"], len(ref["token_ids"])
    tok = slice(n_f + ref["n_layers"] * n_pos, n_f + (ref["n_layers"] + 1) * n_pos)
    torch.testing.assert_close(ct["raw_token_columns"] * ref["embed_scale"], ct["adjacency"][:, tok])
    assert float(ct["adjacency"][:, tok].abs().max()) > 0
    # only the token columns change: every other edge circuit-tracer gives as it is
    others = torch.ones(ct["adjacency"].shape[1], dtype=torch.bool)
    others[tok] = False
    torch.testing.assert_close(ct["raw_adjacency"][:, others], ct["adjacency"][:, others])
    torch.testing.assert_close(ct["raw_adjacency"][:, tok], ct["raw_token_columns"])


def test_bos_error_default_keeps_position_zero_as_error_nodes(reference):
    """The default (bos_error=True) differs from circuit-tracer only in position 0's error columns."""
    ref = reference["families"]["gemma3"]
    graph, ct = interplab_graph("gemma3", ref, bos_error=True)
    order = feature_order(graph, ct)
    perm = torch.cat([order, torch.arange(graph.n_features, graph.n_nodes)])
    ours = graph.adjacency[perm][:, perm]
    n_f, n_pos = graph.n_features, graph.n_pos
    bos_errors = [n_f + layer * n_pos for layer in range(graph.n_layers)]
    assert bool(ours[:, bos_errors].any()) and not bool(ct["adjacency"][:, bos_errors].any())
    rest = torch.ones(graph.n_nodes, dtype=torch.bool)
    rest[bos_errors] = False
    scale = float(ct["adjacency"].abs().max())
    torch.testing.assert_close(ours[:, rest], ct["adjacency"][:, rest], atol=1e-4 * max(1.0, scale), rtol=0)


@pytest.mark.parametrize("family", ["gemma3", "llama"])
def test_max_feature_nodes_picks_circuit_tracers_features(reference, family):
    """Capped at 48 feature nodes, ranked by influence after every batch of 16 rows: the same nodes and rows."""
    ref = reference["families"][family]
    folder = REF / "circuit_tracer" / family
    model = ilab.load_model(folder / "model", dtype=torch.float32)
    tcs = gemma_scope_2_transcoders(folder, ref["n_layers"])
    graph = attribute(model, tcs, ref_prompt(), batch_size=16, bos_error=False, progress=False,
                      max_feature_nodes=ref["max_feature_nodes"])  # fmt: skip
    ct = load_file(str(folder / "graph.safetensors"))
    assert graph.n_features == ref["max_feature_nodes"] < ref["n_features"]
    order = torch.tensor([graph.feature_index(*f) for f in ct["capped_features"].tolist()], dtype=torch.long)
    assert sorted(order.tolist()) == list(range(graph.n_features))
    perm = torch.cat([order, torch.arange(graph.n_features, graph.n_nodes)])
    expected = ct["capped_adjacency"]
    scale = float(expected.abs().max())
    torch.testing.assert_close(graph.adjacency[perm][:, perm], expected, atol=1e-4 * max(1.0, scale), rtol=0)


def _key(node: dict) -> tuple:
    return node["feature_type"], node["layer"], node["ctx_idx"], node["feature"]


def _circuit_tracer_id(node: dict) -> str:
    """circuit-tracer 0.5.0 names error nodes ``0_{layer}_{pos}`` (which can collide with a layer-0 feature's id);
    interplab names them ``{layer}_-1_{pos}``. Every other node id is the same."""
    if node["feature_type"] == "mlp reconstruction error":
        return f"0_{node['layer']}_{node['ctx_idx']}"
    return node["node_id"]


@pytest.mark.parametrize("family", ["gemma3", "llama"])
def test_viewer_json_matches_circuit_tracer(reference, family):
    """The pruned graph's viewer JSON has circuit-tracer's nodes, fields and links (error node ids aside)."""
    ref = reference["families"][family]
    graph, _ = interplab_graph(family, ref)
    ours = graph.to_json(slug=f"tiny-{family}", node_threshold=ref["node_threshold"],
                         edge_threshold=ref["edge_threshold"])  # fmt: skip
    theirs = json.loads((REF / "circuit_tracer" / family / "viewer.json").read_text())
    assert ours["metadata"]["prompt_tokens"] == theirs["metadata"]["prompt_tokens"]
    assert ours["qParams"] == theirs["qParams"]
    mine, other = {_key(n): n for n in ours["nodes"]}, {_key(n): n for n in theirs["nodes"]}
    assert set(mine) == set(other) and len(mine) == len(ours["nodes"]) == len(theirs["nodes"]) == ref["n_pruned_nodes"]
    for k, theirs_node in other.items():
        node = mine[k]
        assert _circuit_tracer_id(node) == theirs_node["node_id"]
        for field in ("is_target_logit", "run_idx", "reverse_ctx_idx", "clerp"):
            assert node[field] == theirs_node[field], (k, field)
        if k[0] != "mlp reconstruction error":
            assert node["jsNodeId"] == theirs_node["jsNodeId"]
        for field in ("influence", "activation", "token_prob"):
            assert node.get(field) == pytest.approx(theirs_node.get(field), abs=1e-5), (k, field)
    # interplab's ids are unique; circuit-tracer's error ids collide with layer-0 features here (a viewer keys by id)
    assert len({n["node_id"] for n in ours["nodes"]}) == len(ours["nodes"])
    collisions = len(theirs["nodes"]) - len({n["node_id"] for n in theirs["nodes"]})
    assert collisions == (2 if family == "gemma3" else 0)
    ids = {n["node_id"]: _circuit_tracer_id(n) for n in ours["nodes"]}
    mine_links = sorted((ids[e["source"]], ids[e["target"]], e["weight"]) for e in ours["links"])
    other_links = sorted((e["source"], e["target"], e["weight"]) for e in theirs["links"])
    assert len(mine_links) == len(other_links) > 100
    scale = max(abs(w) for *_, w in other_links)
    for a, b in zip(mine_links, other_links, strict=True):
        assert a[:2] == b[:2] and a[2] == pytest.approx(b[2], abs=1e-4 * max(1.0, scale))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
