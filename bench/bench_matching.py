"""Benchmark: SAE Match of two 16k-wide SAEs (d_in 640, the embedded model's width; random weights).

In the same run, each in its own process (so peak memory is its own):

* ``sparse``: ``ilab.matching.match`` as shipped: the cost computed block by block, each latent's
  32 cheapest partners kept both ways, :func:`scipy.sparse.csgraph.min_weight_full_bipartite_matching`;
* ``dense``: the straightforward way: the whole 16k x 16k cost matrix, then
  :func:`scipy.optimize.linear_sum_assignment` (``match(..., dense=True)``), stopped after ``--dense-timeout`` s.

For each: seconds, peak resident memory above the process's memory once the SAEs exist (MB), and
for the dense run the total cost, so ``cost_ratio`` (sparse / dense total MSE) says how far from the
optimum the sparse graph lands on unrelated random SAEs (on matched SAEs it is 1).
Goal: the sparse path under 30 s and 2 GB. Prints one JSON object. Run: ``python bench/bench_matching.py``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
import torch
torch.set_num_threads(int(sys.argv[4]))
from interplab.core.saes import SAE
from interplab.core.matching import match
width, dense, seed = int(sys.argv[1]), sys.argv[2] == "dense", int(sys.argv[3])
def make(s):
    sae = SAE.create("jumprelu", d_in=640, d_sae=width, site=f"blocks.{s}.hook_resid_post")
    g = torch.Generator().manual_seed(s)
    with torch.no_grad():
        sae.W_dec.copy_(torch.nn.functional.normalize(torch.randn(width, 640, generator=g), dim=1))
        sae.W_enc.copy_(sae.W_dec.T)
        sae.set_threshold(torch.rand(width, generator=g) * 0.5 + 0.05)
    return sae
a, b = make(seed), make(seed + 1)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
m = match(a, b, dense=dense, progress=False)
seconds = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": round(seconds, 2), "peak_mb_above_saes": round((peak - base) / 1024, 1),
                  "total_cost": float(m.error.astype("float64").sum()), "share_below_0.003": m.share_below(0.003),
                  "info": m.info}))
"""


def run(width: int, mode: str, timeout: float, threads: int) -> dict:
    start = time.perf_counter()
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, str(width), mode, "0", str(threads)], capture_output=True,
                             text=True, timeout=timeout, cwd=ROOT, check=True)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"timed_out_after_s": round(time.perf_counter() - start, 1)}
    except subprocess.CalledProcessError as err:
        return {"failed": err.stderr[-400:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=16384)
    parser.add_argument("--dense-timeout", type=float, default=600)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    sparse = run(args.width, "sparse", 600, args.threads)
    dense = run(args.width, "dense", args.dense_timeout, args.threads)
    report = {"width": args.width, "d_in": 640, "threads": args.threads, "sparse": sparse, "dense_baseline": dense}
    if "seconds" in sparse and "seconds" in dense:
        report["speedup"] = round(dense["seconds"] / max(sparse["seconds"], 1e-9), 2)
        report["memory_ratio"] = round(dense["peak_mb_above_saes"] / max(sparse["peak_mb_above_saes"], 1e-9), 2)
        report["cost_ratio"] = round(sparse["total_cost"] / dense["total_cost"], 5)
    elif "seconds" in sparse and "timed_out_after_s" in dense:
        report["speedup_at_least"] = round(dense["timed_out_after_s"] / max(sparse["seconds"], 1e-9), 2)
    report["goal_met"] = bool("seconds" in sparse and sparse["seconds"] < 30 and sparse["peak_mb_above_saes"] < 2048)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
