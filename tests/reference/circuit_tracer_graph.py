"""Reference attribution graphs of circuit-tracer 0.5.0 on tiny Gemma 3 and Llama models: run in .ref/circuit-tracer.

    .ref/circuit-tracer/bin/python tests/reference/circuit_tracer_graph.py tests/reference/circuit_tracer_graph.json

For each family it writes, under ``tests/reference/circuit_tracer/<family>/``: the tiny model as a Hugging Face
folder (``model/``: seeded random weights, norm gains included, and a word-level tokenizer), one JumpReLU
transcoder per layer with an affine skip in a Gemma Scope 2 release's layout
(``transcoders/layer_L_width_40_l0_tiny_affine/`` with ``config.json`` and ``params.safetensors``: ``w_enc``
[d_in, d_sae], ``w_dec`` [d_sae, d_out], ``b_enc``, ``b_dec``, ``threshold``, ``affine_skip_connection``
[d_in, d_out], applied as ``x @ affine_skip_connection`` as Gemma Scope 2's own tutorial does) and what
circuit-tracer's nnsight backend makes of them
(``graph.safetensors``: the unpruned adjacency, the active features, the pruning masks at node 0.8 / edge
0.98, and the graph capped at 48 feature nodes chosen by influence; ``viewer.json``: the pruned graph as its
``create_graph_files`` writes it for Neuronpedia's viewer). The JSON file holds the command, the versions, the
token ids, the logit targets, the node counts and the scores. interplab's side loads exactly these files.

circuit-tracer's Gemma token nodes: its nnsight backend takes a token node's vector from ``embed_tokens.weight``
while the gradient it contracts with is taken at ``embed_tokens``'s output, which Gemma scales by
``sqrt(d_model)``; its token edges are short by that factor (``raw_token_columns`` records them as it gives
them, ``raw_adjacency`` the whole graph where the scale is not 1). Everything else here is computed by
circuit-tracer with its token vectors multiplied by that one factor (``embed_scale`` in the JSON): the
attribution, the influence ranking of the capped graph, the pruning, the scores and the viewer JSON; every
row then adds up to its target as the method defines it. This file imports nothing of interplab (the two
environments differ).
"""

from __future__ import annotations

import json
import sys
import tempfile
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path

import circuit_tracer
import torch
from circuit_tracer import attribute
from circuit_tracer.graph import compute_graph_scores, prune_graph
from circuit_tracer.replacement_model.replacement_model_nnsight import NNSightReplacementModel
from circuit_tracer.transcoder.single_layer_transcoder import load_transcoder_set
from circuit_tracer.utils.create_graph_files import create_graph_files
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, pre_tokenizers
from tokenizers.processors import TemplateProcessing
from transformers import AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig, PreTrainedTokenizerFast

WORDS = (  # tests/tiny.py's vocabulary: ids 4.. are these words
    'the', 'a', 'cat', 'dog', 'sat', 'on', 'mat', 'and', 'ran', 'to', 'house', 'Mary', 'John', 'gave',
    'drink', 'store', 'when', 'went', 'bird', 'tree', 'red', 'blue', 'green', 'big', 'small', 'happy',
    'sad', 'quick', 'slow', 'fox', 'jumps', 'over', 'lazy', 'day', 'night',
)  # fmt: skip
PROMPT = "the cat sat on the mat and the dog ran"
COMMON = dict(vocab_size=64, bos_token_id=1, eos_token_id=2, pad_token_id=0, num_hidden_layers=2, hidden_size=32,
              intermediate_size=64, num_attention_heads=4, max_position_embeddings=128)  # fmt: skip
CONFIGS = {
    "gemma3": lambda: Gemma3TextConfig(**COMMON, num_key_value_heads=1, head_dim=16, sliding_window=8,
                                       architectures=["Gemma3ForCausalLM"]),
    "llama": lambda: LlamaConfig(**COMMON, num_key_value_heads=2, architectures=["LlamaForCausalLM"]),
}  # fmt: skip
HOOKS = {"gemma3": ("mlp.hook_in", "hook_mlp_out"), "llama": ("mlp.hook_in", "mlp.hook_out")}
D_SAE, NODE_THRESHOLD, EDGE_THRESHOLD, MAX_FEATURE_NODES = 40, 0.8, 0.98, 48


def tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3, **{w: 4 + i for i, w in enumerate(WORDS)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                   unk_token="<unk>")  # fmt: skip


def write_model(family: str, folder: Path) -> None:
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(CONFIGS[family]()).eval()
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():  # norm gains away from their initial 1 (Gemma: 1 + 0), so freezing them is tested
        for name, param in hf.named_parameters():
            if "norm" in name:
                param.add_(torch.randn(param.shape, generator=g) * 0.3)
    hf.save_pretrained(folder / "model", safe_serialization=True)
    tokenizer().save_pretrained(folder / "model")


def write_transcoders(folder: Path, d: int, n_layers: int) -> list[str]:
    """Seeded random JumpReLU transcoders with an affine skip, in Gemma Scope 2's params layout."""
    paths = []
    for layer in range(n_layers):
        g = torch.Generator().manual_seed(100 + layer)
        params = {
            "w_enc": torch.randn(d, D_SAE, generator=g) * 0.3,
            "w_dec": torch.randn(D_SAE, d, generator=g) * 0.3,
            "b_enc": torch.randn(D_SAE, generator=g) * 0.3,
            "b_dec": torch.randn(d, generator=g) * 0.3,
            "threshold": torch.rand(D_SAE, generator=g) * 0.3,
            "affine_skip_connection": torch.randn(d, d, generator=g) * 0.1,
        }
        path = folder / "transcoders" / f"layer_{layer}_width_{D_SAE}_l0_tiny_affine" / "params.safetensors"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in params.items()}, str(path))
        (path.parent / "config.json").write_text(json.dumps({"architecture": "jump_relu", "affine_connection": True,
                                                             "model_name": "tiny"}))  # fmt: skip
        paths.append(str(path))
    return paths


@contextmanager
def scaled_token_vectors(scale: float):
    """circuit-tracer 0.5.0 with its token vectors multiplied by the embedding's scale (Gemma's sqrt(d_model))."""
    original = NNSightReplacementModel.setup_attribution

    def setup_attribution(self, inputs):
        ctx = original(self, inputs)
        ctx.token_vectors = ctx.token_vectors * scale
        return ctx

    NNSightReplacementModel.setup_attribution = setup_attribution
    try:
        yield
    finally:
        NNSightReplacementModel.setup_attribution = original


def run(family: str, folder: Path) -> dict:
    write_model(family, folder)
    n_layers, d = COMMON["num_hidden_layers"], COMMON["hidden_size"]
    paths = write_transcoders(folder, d, n_layers)
    hook_in, hook_out = HOOKS[family]
    tcs = load_transcoder_set(dict(enumerate(paths)), scan=f"tiny-{family}", feature_input_hook=hook_in,
                              feature_output_hook=hook_out, device=torch.device("cpu"), dtype=torch.float32,
                              special_load_fn="gemma-scope-2", lazy_encoder=False, lazy_decoder=False)  # fmt: skip
    model = NNSightReplacementModel.from_pretrained_and_transcoders(str(folder / "model"), tcs, device="cpu",
                                                                    dtype=torch.float32)  # fmt: skip
    ids = tokenizer()(PROMPT)["input_ids"]
    as_given = attribute(ids, model, max_n_logits=10, desired_logit_prob=0.95, batch_size=16)
    n_f, n_pos = len(as_given.selected_features), len(ids)
    raw_tokens = as_given.adjacency_matrix[:, n_f + n_layers * n_pos : n_f + (n_layers + 1) * n_pos].clone()
    embed = model.embed_location._module  # Gemma: ScaledWordEmbedding (embed_scale), Llama: plain (1.0)
    scale = float(getattr(embed, "embed_scale", torch.tensor(1.0)))
    with scaled_token_vectors(scale):
        graph = attribute(ids, model, max_n_logits=10, desired_logit_prob=0.95, batch_size=16)
        # with a cap on feature nodes, ranked by influence on the logits after every batch of rows
        capped = attribute(ids, model, max_n_logits=10, desired_logit_prob=0.95, batch_size=16,
                           max_feature_nodes=MAX_FEATURE_NODES, update_interval=1)  # fmt: skip
    kept = prune_graph(graph, NODE_THRESHOLD, EDGE_THRESHOLD)
    replacement, completeness = compute_graph_scores(graph)
    with tempfile.TemporaryDirectory() as tmp:  # the viewer JSON (Neuronpedia's format) as circuit-tracer writes it
        create_graph_files(graph, slug=f"tiny-{family}", output_path=tmp, scan=f"tiny-{family}",
                           node_threshold=NODE_THRESHOLD, edge_threshold=EDGE_THRESHOLD)  # fmt: skip
        viewer = json.loads((Path(tmp) / f"tiny-{family}.json").read_text())
    (folder / "viewer.json").write_text(json.dumps(viewer, separators=(",", ":")) + "\n")
    save_file(
        {
            "adjacency": graph.adjacency_matrix.float().contiguous(),
            "raw_token_columns": raw_tokens.float().contiguous(),
            "active_features": graph.active_features.long().contiguous(),  # [n_active, 3]: layer, pos, latent
            "selected_features": graph.selected_features.long().contiguous(),
            "activation_values": graph.activation_values.float().contiguous(),
            "logit_probabilities": graph.logit_probabilities.float().contiguous(),
            "node_mask": kept.node_mask.to(torch.uint8).contiguous(),
            "edge_mask": kept.edge_mask.to(torch.uint8).contiguous(),
            "capped_adjacency": capped.adjacency_matrix.float().contiguous(),
            "capped_features": capped.active_features[capped.selected_features].long().contiguous(),
            **({"raw_adjacency": as_given.adjacency_matrix.float().contiguous()} if scale != 1.0 else {}),
        },
        str(folder / "graph.safetensors"),
        metadata={"header": json.dumps({"command": COMMAND, **versions()})},
    )
    return {
        "token_ids": ids, "logit_ids": [int(t.vocab_idx) for t in graph.logit_targets], "n_layers": n_layers,
        "n_features": n_f, "embed_scale": scale, "feature_input_hook": hook_in, "feature_output_hook": hook_out,
        "node_threshold": NODE_THRESHOLD, "edge_threshold": EDGE_THRESHOLD, "replacement_score": replacement,
        "completeness_score": completeness, "n_pruned_nodes": int(kept.node_mask.sum()),
        "n_pruned_edges": int(kept.edge_mask.sum()), "max_feature_nodes": MAX_FEATURE_NODES,
    }  # fmt: skip


COMMAND = (
    "bash tests/reference/build_circuit_tracer.sh  (runs: .ref/circuit-tracer/bin/python "
    "tests/reference/circuit_tracer_graph.py tests/reference/circuit_tracer_graph.json)"
)


def versions() -> dict[str, str]:
    return {name: version(name) for name in ("circuit-tracer", "torch", "transformers", "nnsight", "transformer-lens",
                                             "safetensors")}  # fmt: skip


def main(out: Path) -> None:
    torch.set_grad_enabled(True)
    result = {
        "command": COMMAND,
        "versions": versions(),
        "prompt": PROMPT,
        "families": {},
    }
    assert circuit_tracer.__version__ == "0.5.0", circuit_tracer.__version__
    for family in CONFIGS:
        result["families"][family] = run(family, out.parent / "circuit_tracer" / family)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "families"}))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/reference/circuit_tracer_graph.json"))
