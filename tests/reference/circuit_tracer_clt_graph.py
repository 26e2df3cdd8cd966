"""Reference attribution graphs of circuit-tracer 0.5.0 on a cross-layer transcoder: run in .ref/circuit-tracer.

    .ref/circuit-tracer/bin/python tests/reference/circuit_tracer_clt_graph.py \
        tests/reference/circuit_tracer_clt_graph.json

For each family it reads the tiny model that ``circuit_tracer_graph.py`` wrote (``tests/reference/circuit_tracer/
<family>/model``) and writes, under ``tests/reference/circuit_tracer_clt/<family>/``: one seeded random JumpReLU
cross-layer transcoder with an affine skip in Gemma Scope 2's multi-layer layout (``clt/params_layer_L.safetensors``
per layer: ``w_enc`` [d_model, d_sae], ``w_dec`` [d_sae, n_layers, d_model] whose slices before layer L are zero,
``b_enc``, ``b_dec``, ``threshold``, ``affine_skip_connection`` [d_model, d_model]), read by circuit-tracer's own
``load_gemma_scope_2_clt``, and what circuit-tracer's nnsight backend makes of it (``graph.safetensors``: the
unpruned adjacency, the active and selected features, activations, logit probabilities, the pruning masks at node
0.8 / edge 0.98, and the graph capped at 24 feature nodes chosen by influence). The JSON file holds the command,
the versions, token and logit ids, node counts and scores. Gemma's token vectors are scaled as in
``circuit_tracer_graph.py`` (circuit-tracer 0.5.0 reads them unscaled).

circuit-tracer 0.5.0's ``load_gemma_scope_2_clt`` reads layers ``range(max(paths))``, one short of the layers it is
given; the script hands it one key past the last layer (never read) so every layer is loaded, and checks that the
loaded CLT has them all. This file imports nothing of interplab (the two environments differ).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import circuit_tracer
import torch
from circuit_tracer import attribute
from circuit_tracer.graph import compute_graph_scores, prune_graph
from circuit_tracer.replacement_model.replacement_model_nnsight import NNSightReplacementModel
from circuit_tracer.transcoder.cross_layer_transcoder import load_gemma_scope_2_clt
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from circuit_tracer_graph import COMMON, CONFIGS, HOOKS, PROMPT, scaled_token_vectors, tokenizer, versions

D_SAE, NODE_THRESHOLD, EDGE_THRESHOLD, MAX_FEATURE_NODES = 40, 0.8, 0.98, 24
COMMAND = (
    ".ref/circuit-tracer/bin/python tests/reference/circuit_tracer_clt_graph.py "
    "tests/reference/circuit_tracer_clt_graph.json  (bash tests/reference/build_circuit_tracer.sh builds the env)"
)


def write_clt(folder: Path, d: int, n_layers: int) -> dict[int, str]:
    """Seeded random JumpReLU CLT with an affine skip, one Gemma Scope 2 multi-layer params file per layer."""
    paths = {}
    for layer in range(n_layers):
        g = torch.Generator().manual_seed(300 + layer)
        w_dec = torch.randn(D_SAE, n_layers, d, generator=g) * 0.2
        w_dec[:, :layer] = 0  # a latent of layer L writes to layers L.. only
        params = {
            "w_enc": torch.randn(d, D_SAE, generator=g) * 0.3,
            "w_dec": w_dec,
            "b_enc": torch.randn(D_SAE, generator=g) * 0.3,
            "b_dec": torch.randn(d, generator=g) * 0.3,
            "threshold": torch.rand(D_SAE, generator=g) * 0.3,
            "affine_skip_connection": torch.randn(d, d, generator=g) * 0.1,
        }
        path = folder / "clt" / f"params_layer_{layer}.safetensors"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in params.items()}, str(path))
        paths[layer] = str(path)
    config = {"architecture": "jump_relu_multi_layer", "affine_connection": True, "model_name": "tiny"}
    (folder / "clt" / "config.json").write_text(json.dumps(config))
    return paths


def run(family: str, model_folder: Path, folder: Path) -> dict:
    n_layers, d = COMMON["num_hidden_layers"], COMMON["hidden_size"]
    paths = write_clt(folder, d, n_layers)
    hook_in, hook_out = HOOKS[family]
    clt = load_gemma_scope_2_clt({**paths, n_layers: ""}, feature_input_hook=hook_in,
                                 feature_output_hook=hook_out, scan=f"tiny-clt-{family}",
                                 device=torch.device("cpu"), dtype=torch.float32)  # fmt: skip
    assert clt.n_layers == n_layers and clt.W_skip is not None, (clt.n_layers, n_layers)
    model = NNSightReplacementModel.from_pretrained_and_transcoders(str(model_folder), clt, device="cpu",
                                                                    dtype=torch.float32)  # fmt: skip
    ids = tokenizer()(PROMPT)["input_ids"]
    embed = model.embed_location._module
    scale = float(getattr(embed, "embed_scale", torch.tensor(1.0)))
    with scaled_token_vectors(scale):
        graph = attribute(ids, model, max_n_logits=10, desired_logit_prob=0.95, batch_size=16)
        capped = attribute(ids, model, max_n_logits=10, desired_logit_prob=0.95, batch_size=16,
                           max_feature_nodes=MAX_FEATURE_NODES, update_interval=1)  # fmt: skip
    kept = prune_graph(graph, NODE_THRESHOLD, EDGE_THRESHOLD)
    replacement, completeness = compute_graph_scores(graph)
    save_file(
        {
            "adjacency": graph.adjacency_matrix.float().contiguous(),
            "active_features": graph.active_features.long().contiguous(),
            "selected_features": graph.selected_features.long().contiguous(),
            "activation_values": graph.activation_values.float().contiguous(),
            "logit_probabilities": graph.logit_probabilities.float().contiguous(),
            "node_mask": kept.node_mask.to(torch.uint8).contiguous(),
            "edge_mask": kept.edge_mask.to(torch.uint8).contiguous(),
            "capped_adjacency": capped.adjacency_matrix.float().contiguous(),
            "capped_features": capped.active_features[capped.selected_features].long().contiguous(),
        },
        str(folder / "graph.safetensors"),
        metadata={"header": json.dumps({"command": COMMAND, **versions()})},
    )
    return {
        "token_ids": ids, "logit_ids": [int(t.vocab_idx) for t in graph.logit_targets], "n_layers": n_layers,
        "n_features": len(graph.selected_features), "embed_scale": scale, "node_threshold": NODE_THRESHOLD,
        "edge_threshold": EDGE_THRESHOLD, "replacement_score": replacement, "completeness_score": completeness,
        "n_pruned_nodes": int(kept.node_mask.sum()), "max_feature_nodes": MAX_FEATURE_NODES,
    }  # fmt: skip


def main(out: Path) -> None:
    torch.set_grad_enabled(True)
    assert circuit_tracer.__version__ == "0.5.0", circuit_tracer.__version__
    result = {"command": COMMAND, "versions": versions(), "prompt": PROMPT, "families": {}}
    models = Path(__file__).resolve().parent / "circuit_tracer"
    for family in CONFIGS:
        result["families"][family] = run(family, models / family / "model", out.parent / "circuit_tracer_clt" / family)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "families"}))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/reference/circuit_tracer_clt_graph.json"))
