"""interplab's attribution graphs against circuit-tracer 0.5.0's side by side (``bench_circuits.py`` section d).

The embedded model, the IOI prompt and, with ``--kind transcoders``, the 18 shipped per-layer JumpReLU skip
transcoders written in a Gemma Scope 2 release's layout (``params.safetensors`` per layer, read by circuit-tracer's
``load_transcoder_set(special_load_fn="gemma-scope-2")`` and interplab's ``build_transcoder``); with ``--kind clt``
one seeded random JumpReLU cross-layer transcoder with an affine skip
(``--clt-width`` latents per layer, each layer's threshold at the 95th percentile of its pre-activations on the
prompt, so about 5% of latents fire), written in Gemma Scope 2's multi-layer layout and read by each tool's own
loader (circuit-tracer's ``load_gemma_scope_2_clt``, interplab's ``load_clt``). For each kind, dtype, thread count
and feature-node cap (``--kind``, ``--dtypes``, ``--threads``, ``--nodes``: one configuration can be rerun alone) two
long-lived workers (interplab here, circuit-tracer in ``.ref/circuit-tracer``, ``circuit_tracer_worker.py``) load
the model once, build one warm-up graph each, then graphs interleaved A, B, A, B, ...; the JSON gives the medians,
the ratio circuit-tracer / interplab (above 1: interplab faster; of the medians and of the minima), each tool's
peak resident memory above the start of a graph (sampled every 50 ms; memory the allocator kept from the warm-up
graph is not counted) and the process's peak above its memory once the model was loaded (the warm-up graph
included), and the graphs' agreement (the same logit targets, the same feature nodes in the same order, the
adjacency's largest difference over its largest entry). Same settings for both: batch 32, 10 logits up to
probability 0.95, the feature nodes chosen by influence re-ranked every batch, position 0 a constant.

Threads: each worker's torch is set to the configuration's thread count. On an oversubscribed machine (load
above the cores) two threads cost interplab far more than one (a 128-node graph 16.6 s against 1.97 s under
load 5 on 2 cores): its passes are many small operations, each waiting for every thread; state the load.

bfloat16 graphs are not expected to be identical: circuit-tracer keeps the transcoders in bfloat16 and takes the
target probabilities from bfloat16 logits, interplab encodes in float32 and reads the logits in float32 (so the
active features near a threshold and the logit targets' cut can differ); float32 graphs are identical.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
CT_PYTHON = REPO_ROOT / ".ref" / "circuit-tracer" / "bin" / "python"
PROMPT = "When Mary and John went to the store, John gave a drink to"


def write_clt(model: Any, folder: Path, width: int, seed: int = 0) -> None:
    """A seeded random JumpReLU CLT for ``model`` in Gemma Scope 2's layout, about 5% of latents active."""
    from safetensors.torch import save_file

    n_layers, d = model.n_layers, model.d_model
    acts = model.collect(PROMPT, sites=[f"blocks.{layer}.hook_mlp_in" for layer in range(n_layers)])
    folder.mkdir(parents=True, exist_ok=True)
    for layer in range(n_layers):
        g = torch.Generator().manual_seed(seed + layer)
        x = acts[f"blocks.{layer}.hook_mlp_in"].reshape(-1, d)[1:].float()  # position 0 is no node
        w_enc = torch.randn(d, width, generator=g) / x.norm(dim=-1).mean()
        w_dec = torch.randn(width, n_layers, d, generator=g) * 0.02
        w_dec[:, :layer] = 0
        threshold = torch.quantile(x @ w_enc, 0.95, dim=0).clamp(min=1e-3)
        params = {"w_enc": w_enc, "w_dec": w_dec, "b_enc": torch.zeros(width), "b_dec": torch.zeros(d),
                  "threshold": threshold, "affine_skip_connection": torch.randn(d, d, generator=g) * 0.01}  # fmt: skip
        save_file({k: v.contiguous() for k, v in params.items()}, str(folder / f"params_layer_{layer}.safetensors"))
    config = {"architecture": "jump_relu_multi_layer", "affine_connection": True, "model_name": model.name}
    (folder / "config.json").write_text(json.dumps(config))


def write_transcoders(folder: Path) -> int:
    """The shipped per-layer transcoders in a Gemma Scope 2 release's layout (float32); returns the layer count."""
    from safetensors.torch import save_file

    import interplab as ilab

    tcs = ilab.circuits.embedded_transcoders()
    for layer, tc in enumerate(tcs):
        d_in = tc.W_enc.shape[0]
        with torch.no_grad():
            skip = tc.skip_out(torch.eye(d_in, dtype=tc.W_enc.dtype))  # [d_in, d_out]: x @ skip
            params = {"w_enc": tc.W_enc, "w_dec": tc.W_dec, "b_enc": tc.b_enc, "b_dec": tc.b_dec,
                      "threshold": tc.threshold, "affine_skip_connection": skip}  # fmt: skip
            params = {k: v.detach().float().contiguous() for k, v in params.items()}
        sub = folder / transcoder_id(layer, tc.W_dec.shape[0])
        sub.mkdir(parents=True, exist_ok=True)
        save_file(params, str(sub / "params.safetensors"))
        (sub / "config.json").write_text(json.dumps({"architecture": "jump_relu", "affine_connection": True,
                                                     "model_name": "gemma-3-270m"}))  # fmt: skip
    return len(tcs)


def transcoder_id(layer: int, width: int) -> str:
    return f"layer_{layer}_width_{width}_l0_shipped_affine"


def load_transcoders(folder: Path) -> list:
    """interplab's side of ``write_transcoders``: the folders read by its Gemma Scope 2 release loader."""
    from interplab.core.saes.releases import Release
    from interplab.core.saes.transcoder_releases import build_transcoder

    subs = sorted(folder.iterdir(), key=lambda p: int(p.name.split("_")[1]))
    release = Release("bench-transcoders", "local/bench", "gemma-3-270m", "transcoder", "", tuple(p.name for p in subs))
    return [build_transcoder(release, p.name, p).eval() for p in subs]


def model_copy(model_dir: Path, folder: Path) -> Path:
    """The model's folder as links, its tokenizer class named generically (circuit-tracer's older transformers
    does not know the class name newer ones write)."""
    if folder.exists():
        return folder
    folder.mkdir(parents=True)
    for f in model_dir.iterdir():
        if f.name != "tokenizer_config.json":
            (folder / f.name).symlink_to(f.resolve())
    tok = json.loads((model_dir / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**tok, "tokenizer_class": "PreTrainedTokenizerFast"}))
    return folder


def interplab_worker(settings: dict) -> None:
    """The interplab side of the protocol of ``circuit_tracer_worker.py``."""
    import time

    from circuit_tracer_worker import max_rss_mb, peak_during, rss_mb
    from interplab.core.circuits import attribute
    from interplab.core.saes.clt_io import load_clt
    from safetensors.torch import save_file

    import interplab as ilab

    torch.set_num_threads(settings["threads"])
    model = ilab.load_model(settings["model"], dtype=settings["dtype"])
    folder = Path(settings["clt"])
    clt = load_transcoders(folder) if settings["kind"] == "transcoders" else load_clt(folder)
    print("ready", flush=True)
    loaded = rss_mb()
    for line in sys.stdin:
        out = json.loads(line)["out"]
        t0 = time.perf_counter()
        graph, peak = peak_during(lambda: attribute(model, clt, PROMPT, batch_size=settings["batch_size"],
                                                    max_feature_nodes=settings["max_feature_nodes"], bos_error=False,
                                                    progress=False))  # fmt: skip
        seconds = time.perf_counter() - t0
        save_file({"adjacency": graph.adjacency.contiguous(), "features": graph.features.contiguous(),
                   "logit_ids": torch.tensor(graph.logit_ids)}, out)  # fmt: skip
        print(json.dumps({"s": seconds, "peak_mb": peak, "peak_over_loaded_mb": max_rss_mb() - loaded}), flush=True)


class Worker:
    def __init__(self, argv: list[str], threads: int):
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                     cwd=REPO_ROOT)  # fmt: skip
        self._read("ready")

    def _read(self, expect: str | None = None) -> str:
        while True:
            line = self.proc.stdout.readline() if self.proc.stdout else ""
            if not line:
                raise RuntimeError(f"worker {self.proc.args[:2]} ended (rc {self.proc.poll()})")
            if (expect is None and line.startswith("{")) or line.strip() == expect:
                return line

    def graph(self, out: str) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"out": out}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self._read())

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def agreement(ours_path: str, theirs_path: str) -> dict:
    from safetensors.torch import load_file

    a, b = load_file(ours_path), load_file(theirs_path)
    same_logits = torch.equal(a["logit_ids"], b["logit_ids"])
    same_nodes = a["features"].shape == b["features"].shape and torch.equal(a["features"], b["features"])
    out = {"same_logit_targets": same_logits, "n_feature_nodes": [len(a["features"]), len(b["features"])],
           "same_feature_nodes_in_order": same_nodes}  # fmt: skip
    if not same_nodes and a["features"].shape == b["features"].shape:  # the same set, another order?
        index = {tuple(f): i for i, f in enumerate(a["features"].tolist())}
        order = [index.get(tuple(f), -1) for f in b["features"].tolist()]
        out["same_feature_node_set"] = -1 not in order and len(set(order)) == len(order)
        if out["same_feature_node_set"]:
            n_f = len(order)
            perm = torch.tensor(order + list(range(n_f, a["adjacency"].shape[0])))
            a["adjacency"] = a["adjacency"][perm][:, perm]
            same_nodes = True
    if same_nodes and same_logits:
        scale = float(b["adjacency"].abs().max())
        out["adjacency_max_diff_over_max"] = float((a["adjacency"] - b["adjacency"]).abs().max()) / scale
    return out


def compare(kind: str, model_dir: str, clt_dir: str, dtype: str, threads: int, repeats: int, nodes: int,
            ids: list[int], tmp: Path) -> dict:  # fmt: skip
    """One configuration: two workers, a warm-up each, ``repeats`` graphs each interleaved."""
    settings = {"kind": kind, "model": model_dir, "clt": clt_dir, "dtype": dtype, "threads": threads,
                "token_ids": ids, "max_feature_nodes": nodes, "batch_size": 32}  # fmt: skip
    here = str(Path(__file__).resolve())
    ours = Worker([sys.executable, here, json.dumps(settings)], threads)
    ct_settings = {**settings, "model": str(model_copy(Path(model_dir), tmp / "ct-model"))}
    theirs = Worker([str(CT_PYTHON), str(Path(here).with_name("circuit_tracer_worker.py")), json.dumps(ct_settings)],
                    threads)  # fmt: skip
    rows: dict[str, list[dict]] = {"interplab": [], "circuit_tracer": []}
    try:
        for name, w in (("interplab", ours), ("circuit_tracer", theirs)):
            w.graph(str(tmp / f"{name}.safetensors"))
        for _ in range(repeats):
            for name, w in (("interplab", ours), ("circuit_tracer", theirs)):
                rows[name].append(w.graph(str(tmp / f"{name}.safetensors")))
    finally:
        ours.close()
        theirs.close()
    med = {k: statistics.median(r["s"] for r in v) for k, v in rows.items()}
    return {"kind": kind, "dtype": dtype, "threads": threads, "max_feature_nodes": nodes, "load": os.getloadavg(),
            "interplab_s": [round(r["s"], 3) for r in rows["interplab"]],
            "circuit_tracer_s": [round(r["s"], 3) for r in rows["circuit_tracer"]],
            "interplab_median_s": round(med["interplab"], 3),
            "circuit_tracer_median_s": round(med["circuit_tracer"], 3),
            "speedup_circuit_tracer_over_interplab": round(med["circuit_tracer"] / med["interplab"], 3),
            "speedup_of_the_minima": round(min(r["s"] for r in rows["circuit_tracer"])
                                           / min(r["s"] for r in rows["interplab"]), 3),  # steadier under load
            "interplab_peak_mb": round(max(r["peak_mb"] for r in rows["interplab"]), 1),
            "circuit_tracer_peak_mb": round(max(r["peak_mb"] for r in rows["circuit_tracer"]), 1),
            "interplab_peak_over_loaded_mb": round(rows["interplab"][-1]["peak_over_loaded_mb"], 1),
            "circuit_tracer_peak_over_loaded_mb": round(rows["circuit_tracer"][-1]["peak_over_loaded_mb"], 1),
            "circuit_tracer_active_features": rows["circuit_tracer"][-1].get("n_active"),
            "graphs": agreement(str(tmp / "interplab.safetensors"), str(tmp / "circuit_tracer.safetensors")),
            }  # fmt: skip


def vs_circuit_tracer(kinds: list[str], width: int, nodes: list[int], repeats: int, dtypes: list[str],
                      threads: list[int]) -> dict:  # fmt: skip
    """Every configuration (kind x dtype x threads x feature-node cap) side by side; see the module doc."""
    import interplab as ilab

    if not CT_PYTHON.exists():
        return {"skipped": f"{CT_PYTHON} is missing: bash tests/reference/build_circuit_tracer.sh"}
    model = ilab.load_model(dtype="float32")
    model_dir = str(Path(model.module.config._name_or_path))
    ids = model.to_tokens(PROMPT)["input_ids"][0].tolist()
    out: dict[str, Any] = {"model": model.name, "prompt": PROMPT, "batch_size": 32, "repeats": repeats,
                           "load_before": os.getloadavg(), "configs": []}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        folders = {}
        if "clt" in kinds:
            write_clt(model, Path(tmp) / "clt", width)
            folders["clt"] = Path(tmp) / "clt"
            out["clt"] = f"random JumpReLU CLT with an affine skip, width {width} per layer"
        if "transcoders" in kinds:
            n = write_transcoders(Path(tmp) / "transcoders")
            folders["transcoders"] = Path(tmp) / "transcoders"
            out["transcoders"] = f"the {n} shipped JumpReLU skip transcoders in Gemma Scope 2's layout"
        del model
        for kind in kinds:
            for dtype in dtypes:
                for t in threads:
                    for n_nodes in nodes:
                        print(f"  {kind}, {dtype}, {t} thread(s), {n_nodes} nodes", file=sys.stderr, flush=True)
                        row = compare(kind, model_dir, str(folders[kind]), dtype, t, repeats, n_nodes, ids, Path(tmp))
                        print(f"    {json.dumps(row)}", file=sys.stderr, flush=True)
                        out["configs"].append(row)
    out["load_after"] = os.getloadavg()
    out["min_speedup"] = min(c["speedup_circuit_tracer_over_interplab"] for c in out["configs"])
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    interplab_worker(json.loads(sys.argv[1]))
