"""Memory and load time of the embedded model, where its users run it (Binder allows 2 GB in all).

Run ``python bench/bench_memory.py`` (about 10 minutes on 2 cores). It prints ONE JSON object
on stdout; progress goes to stderr. Peak resident memory is the kernel's own high-water mark
(``VmHWM`` in ``/proc/self/status``, read by the process itself at its end), so nothing is
sampled and nothing is missed.

(a) ``notebooks``: the peak RSS of each notebook's kernel, running it top to bottom as
    ``tests/notebooks/test_notebooks.py`` does                        goal <= 1.4 GB each
(b) ``prepare``: ``python -m interplab prepare`` into an empty cache     goal <= 2.0 GB
(c) ``load``: ``load_model()`` in a fresh process (best of 3): seconds for the call, after
    ``import interplab``, and the process's peak RSS; the baseline is the format interplab
    wrote before (float32 weights, the Gemma tokenizer class rebuilt from its vocabulary),
    made from the prepared folder and loaded the old way in the same run  goal load_s <= 3
(d) ``throughput``: forward tokens/s of the default (bfloat16) against ``dtype=torch.float32``,
    8 prompts x 64 tokens through all 18 layers, medians of interleaved rounds, with the IOI
    logit difference each gives

Flags: ``--parts`` (abcd), ``--notebooks`` (stems, default all), ``--rounds`` (5).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import runpy
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / "nbs"
# Appended to each notebook: the kernel's own peak and current RSS (kB), from /proc.
PEAK_CELL = """
import json as _json
with open("/proc/self/status") as _f:
    _status = {_l.split(":")[0]: int(_l.split()[1]) for _l in _f if _l.startswith(("VmHWM", "VmRSS"))}
print("__interplab_peak__" + _json.dumps(_status))
"""
GB = 1024**2  # kB per GB
# Run in a child process: the time of one load_model() after the imports, then the peak RSS.
LOAD_SCRIPT = """
import json, sys, time
t0 = time.perf_counter()
import torch
import interplab as ilab
t1 = time.perf_counter()
model = ilab.load_model(sys.argv[1] if len(sys.argv) > 1 else None, dtype=torch.float32 if len(sys.argv) > 1 else None)
t2 = time.perf_counter()
status = {l.split(":")[0]: int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(("VmHWM", "VmRSS"))}
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "dtype": str(model.dtype), **status}))
"""
PREPARE_SCRIPT = """
import json, sys
from interplab.__main__ import main
rc = main(["prepare", *sys.argv[1:]])
status = {l.split(":")[0]: int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(("VmHWM", "VmRSS"))}
print(json.dumps({"rc": rc, **status}))
"""


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def last_json(text: str) -> dict:
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


def notebook_peak(path: Path) -> dict:
    """Run a notebook in a fresh kernel; its kernel's peak RSS (kB) and the wall time."""
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PEAK_CELL))
    start = time.perf_counter()
    client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})  # fmt: skip
    client.execute()
    wall = time.perf_counter() - start
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    found = json.loads(text.split("__interplab_peak__", 1)[1].splitlines()[0])
    return {"peak_rss_gb": round(found["VmHWM"] / GB, 3), "wall_s": round(wall, 1)}


def bench_notebooks(stems: list[str] | None) -> dict:
    out = {}
    shipped = runpy.run_path(str(ROOT / "lab" / "notebooks.py"))["shipped_notebooks"](ROOT)  # not a scratch notebook
    for path in shipped:
        if stems and path.stem not in stems:
            continue
        log(f"notebook {path.name}")
        try:
            out[path.stem] = notebook_peak(path)
        except Exception as err:  # a failing notebook is reported, the others still measured
            out[path.stem] = {"error": str(err).strip().splitlines()[-1][:300]}
        log(f"  {out[path.stem]}")
    return out


def bench_prepare() -> dict:
    """``python -m interplab prepare`` into an empty cache (corpus and web assets too when npm is here)."""
    flags = [] if shutil.which("npm") else ["--no-corpus", "--no-web"]
    with tempfile.TemporaryDirectory(prefix="bench-prepare-") as empty:
        env = {**os.environ, "INTERPLAB_CACHE": empty}
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", PREPARE_SCRIPT, *flags], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode:
            raise RuntimeError(done.stderr[-2000:])
        found = last_json(done.stdout)
        disk = sum(f.stat().st_size for f in Path(empty).rglob("*") if f.is_file())
    return {"peak_rss_gb": round(found["VmHWM"] / GB, 3), "wall_s": round(wall, 1), "flags": flags, "cache_bytes": disk}


def old_format_copy(folder: Path, dest: Path) -> Path:
    """The folder interplab <= 0.1 wrote: float32 weights and a tokenizer config naming the Gemma class."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    dest.mkdir(parents=True)
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        tensors = {k: f.get_tensor(k).to(torch.float32) for k in f.keys()}  # noqa: SIM118
    save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
    del tensors
    config = json.loads((folder / "config.json").read_text())
    (dest / "config.json").write_text(json.dumps({**config, "dtype": "float32"}))
    shutil.copy(folder / "generation_config.json", dest)
    shutil.copy(folder / "tokenizer.json", dest)
    tok = json.loads((folder / "tokenizer_config.json").read_text())
    for key in ("added_tokens_decoder", "padding_side"):
        tok.pop(key)
    (dest / "tokenizer_config.json").write_text(json.dumps({**tok, "tokenizer_class": "GemmaTokenizer"}))
    return dest


def load_once(folder: Path | None) -> dict:
    args = [str(folder)] if folder else []
    done = subprocess.run([sys.executable, "-c", LOAD_SCRIPT, *args], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    return last_json(done.stdout)


def bench_load(tries: int = 3) -> dict:
    from interplab.core.loading.embedded import prepare_embedded_model

    folder = prepare_embedded_model()
    with tempfile.TemporaryDirectory(prefix="bench-old-format-") as tmp:
        old = old_format_copy(folder, Path(tmp) / "gemma-3-270m-float32")
        runs: dict[str, list[dict]] = {"default": [], "old_format_float32": []}
        for i in range(tries):  # interleaved, so machine load hits both alike
            for name, target in (("default", None), ("old_format_float32", old)):
                runs[name].append(load_once(target))
                log(f"load {name} try {i + 1}: {runs[name][-1]}")
    out = {}
    for name, rs in runs.items():
        best = min(rs, key=lambda r: r["load_s"])
        out[name] = {
            "load_s": round(best["load_s"], 2),
            "import_s": round(min(r["import_s"] for r in rs), 2),
            "peak_rss_gb": round(max(r["VmHWM"] for r in rs) / GB, 3),
            "dtype": best["dtype"],
            "load_s_all": [round(r["load_s"], 2) for r in rs],
        }
    out["load_ratio_vs_old"] = round(out["default"]["load_s"] / out["old_format_float32"]["load_s"], 3)
    return out


def bench_throughput(rounds: int) -> dict:
    import torch

    import interplab as ilab

    models = {"bfloat16": ilab.load_model(), "float32": ilab.load_model(dtype=torch.float32)}
    docs = ilab.default_corpus()
    ids = [models["float32"].tokenizer(d, return_tensors="pt")["input_ids"][0, :64] for d in docs[:40]]
    batch = torch.stack([i for i in ids if len(i) == 64][:8])
    times: dict[str, list[float]] = {name: [] for name in models}
    with torch.no_grad():
        for r in range(rounds + 1):
            for name in list(models)[r % 2 :] + list(models)[: r % 2]:
                start = time.perf_counter()
                models[name].module(input_ids=batch, logits_to_keep=1)
                if r:
                    times[name].append(time.perf_counter() - start)
    clean = "When Mary and John went to the store, John gave a drink to"
    corrupt = "When Mary and John went to the store, Mary gave a drink to"
    out = {}
    for name, model in models.items():
        mary, john = (model.tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in (" Mary", " John"))
        logits = model.logits([clean, corrupt])[:, -1]
        out[name] = {
            "forward_ms": round(1000 * statistics.median(times[name]), 1),
            "tokens_per_s": round(batch.numel() / statistics.median(times[name])),
            "ioi_logit_diff": [round(float(v), 3) for v in logits[:, mary] - logits[:, john]],
        }
    out["speedup_bf16_vs_fp32"] = round(out["float32"]["forward_ms"] / out["bfloat16"]["forward_ms"], 2)
    out["shape"] = list(batch.shape)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="abcd")
    parser.add_argument("--notebooks", nargs="*", help="notebook stems, e.g. 00_tour (default: all)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import torch

    result: dict = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
        "goals": {"notebook_peak_rss_gb": 1.4, "prepare_peak_rss_gb": 2.0, "load_s": 3.0},
    }
    if "a" in args.parts:
        result["notebooks"] = bench_notebooks(args.notebooks)
        peaks = [v["peak_rss_gb"] for v in result["notebooks"].values() if "peak_rss_gb" in v]
        result["notebooks_max_peak_rss_gb"] = max(peaks, default=None)
    if "b" in args.parts:
        log("prepare into an empty cache")
        result["prepare"] = bench_prepare()
    if "c" in args.parts:
        result["load"] = bench_load()
    if "d" in args.parts:
        log("throughput")
        result["throughput"] = bench_throughput(args.rounds)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
