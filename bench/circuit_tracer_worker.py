"""A long-lived circuit-tracer 0.5.0 worker for ``bench_circuits.py --vs-circuit-tracer``: run in .ref/circuit-tracer.

    .ref/circuit-tracer/bin/python bench/circuit_tracer_worker.py '<settings JSON>'

Settings: ``kind`` (``clt`` or ``transcoders``), ``model`` (a Hugging Face folder), ``clt`` (a folder of Gemma
Scope 2 multi-layer params files, or of per-layer transcoder folders each with ``params.safetensors``),
``dtype``, ``threads``, ``token_ids``, ``max_feature_nodes``, ``batch_size``. It loads the model and the CLT once,
prints ``ready``, then for each line ``{"out": path}`` on stdin builds the graph, writes it to ``path``
(safetensors) and prints one JSON line: seconds, the peak resident memory above the start of the graph and the
process's peak above its memory once loaded.
Gemma's token vectors are scaled as in ``tests/reference/circuit_tracer_graph.py``. Imports nothing of interplab.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reference"))


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def max_rss_mb() -> float:
    """The process's peak resident memory so far (ru_maxrss, KiB on Linux)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_during(fn):  # type: ignore[no-untyped-def]
    """(fn(), the peak resident MB above the start, sampled every 50 ms)."""
    start, peak, done = rss_mb(), [0.0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_mb() - start)
            time.sleep(0.05)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        out = fn()
    finally:
        done.set()
        t.join()
    return out, max(peak[0], rss_mb() - start)


def load_replacement(kind: str, folder: Path, dtype: torch.dtype):  # type: ignore[no-untyped-def]
    """circuit-tracer's own loaders: a Gemma Scope 2 CLT, or one Gemma Scope 2 transcoder folder per layer."""
    hooks = {"feature_input_hook": "mlp.hook_in", "feature_output_hook": "hook_mlp_out"}
    if kind == "transcoders":
        from circuit_tracer.transcoder.single_layer_transcoder import load_transcoder_set

        subs = sorted(folder.iterdir(), key=lambda p: int(p.name.split("_")[1]))
        paths = {layer: str(p / "params.safetensors") for layer, p in enumerate(subs)}
        return load_transcoder_set(paths, scan="bench-transcoders", device=torch.device("cpu"), dtype=dtype,
                                   special_load_fn="gemma-scope-2", lazy_encoder=False, lazy_decoder=False,
                                   **hooks)  # fmt: skip
    from circuit_tracer.transcoder.cross_layer_transcoder import load_gemma_scope_2_clt

    n_layers = len(list(folder.glob("params_layer_*.safetensors")))
    paths = {layer: str(folder / f"params_layer_{layer}.safetensors") for layer in range(n_layers)}
    return load_gemma_scope_2_clt({**paths, n_layers: ""}, scan="bench-clt", device=torch.device("cpu"), dtype=dtype,
                                  **hooks)  # fmt: skip


def main(settings: dict) -> None:
    torch.set_num_threads(settings["threads"])
    torch.set_grad_enabled(True)
    from circuit_tracer import attribute
    from circuit_tracer.replacement_model.replacement_model_nnsight import NNSightReplacementModel
    from circuit_tracer_graph import scaled_token_vectors
    from safetensors.torch import save_file

    dtype = getattr(torch, settings["dtype"])
    clt = load_replacement(settings["kind"], Path(settings["clt"]), dtype)
    model = NNSightReplacementModel.from_pretrained_and_transcoders(settings["model"], clt, device="cpu", dtype=dtype)
    scale = float(getattr(model.embed_location._module, "embed_scale", torch.tensor(1.0)))
    ids = settings["token_ids"]

    def build():  # type: ignore[no-untyped-def]
        with scaled_token_vectors(scale):
            return attribute(ids, model, max_n_logits=10, desired_logit_prob=0.95,
                             batch_size=settings["batch_size"], max_feature_nodes=settings["max_feature_nodes"],
                             update_interval=1, verbose=False)  # fmt: skip

    print("ready", flush=True)
    loaded = rss_mb()
    for line in sys.stdin:
        out = json.loads(line)["out"]
        t0 = time.perf_counter()
        graph, peak = peak_during(build)
        seconds = time.perf_counter() - t0
        sel = graph.selected_features
        save_file({"adjacency": graph.adjacency_matrix.float().contiguous(),
                   "features": graph.active_features[sel].long().contiguous(),
                   "logit_ids": torch.tensor([int(t.vocab_idx) for t in graph.logit_targets]),
                   "activations": graph.activation_values[sel].float().contiguous()}, out)  # fmt: skip
        print(json.dumps({"s": seconds, "peak_mb": peak, "peak_over_loaded_mb": max_rss_mb() - loaded,
                          "n_active": len(graph.active_features)}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
