"""Benchmark feature-dashboard data: one streaming pass against the bare forward + encode it needs anyway.

Run ``python bench/bench_dashboards.py`` (about 10-15 minutes on 2 busy cores); ``--n-tokens 4096``
for a quick run. It prints ONE JSON object on stdout; progress goes to stderr.

Setting: the embedded Gemma 3 270M, its pretrained layer-6 BatchTopK SAE (width 4096, k 32),
the default corpus, rows of 128 tokens ([BOS] + 127), batches of 16 rows, fp32 on CPU.

- baseline: the same rows through ``Model._run_sites`` (the forward stops after layer 6) and
  ``sae.encode`` of the non-BOS tokens: the least any dashboard pass must do.
- dashboards: ``ilab.feature_data`` for all 4096 latents on the same tokens (top 20 contexts of 24
  tokens, 10 quantile examples from a 40-token reservoir, 32-bin histograms, density, mean), plus the
  weight-only parts (logit effects over the 262k vocabulary, decoder neighbours).

``in_pass_ratio`` = (forward+encode + bookkeeping) / forward+encode, both timed batch by batch inside
the same pass, so machine load cancels; ``in_pass_total_ratio`` adds the weight-only parts.
Ratios: ``pass_ratio`` = (dashboard forward+encode + bookkeeping) / baseline, the streaming cost the
goal (<= 1.3) is about; ``total_ratio`` also counts the logit effects and neighbours, a fixed cost
(about 1.4 TFLOP for 4096 x 640 x 262k) that does not grow with the corpus. The baseline runs on half
the tokens before and again after the pass; its mean time per token, times the pass's tokens, is the
reference, so load that drifts on a shared machine is seen (compare ``tokens_per_s``).
Peak memory is the process's max RSS (it includes the model weights, and the 262k x 640
unembedding paged in from the memory-mapped safetensors by the logit effects, about 0.67 GB);
``running_state_mb`` is what the pass itself keeps; ``load_average`` (1, 5, 15 min) is recorded before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

SITE = "blocks.6.hook_resid_post"
SEQ_LEN, BATCH = 128, 16


def log(msg: str) -> None:
    print(f"[bench_dashboards {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def baseline(model, sae, docs, n_tokens: int) -> tuple[float, int]:
    from interplab.core.data.rows import text_batches

    parsed = model.parse_sites(SITE)
    n, start = 0, time.perf_counter()
    for batch, enc in text_batches(model, docs, SEQ_LEN, BATCH, n_tokens):
        with torch.no_grad():
            x = model.run_sites(enc, parsed)[0]
            n += int(sae.encode(x[batch.valid_BL]).shape[0])
    return time.perf_counter() - start, n


def measure(n_tokens: int) -> dict:
    """Load the embedded model, SAE and corpus; time the baseline before and after one dashboard pass."""
    import interplab as ilab

    m: dict = {"load_before": [round(v, 2) for v in os.getloadavg()]}
    m["model"] = model = ilab.load_model()
    m["sae"] = sae = ilab.load_sae("embedded", layer=6)
    docs = ilab.default_corpus()
    m["rss_loaded"] = rss_mb()
    half = max(1, n_tokens // 2)
    log(f"model, SAE and corpus loaded ({m['rss_loaded']:.0f} MB); baseline 1 on {half} tokens")
    m["base1"], m["n1"] = baseline(model, sae, docs, half)
    log(f"baseline {m['base1']:.1f}s for {m['n1']} tokens; dashboards on {n_tokens}")
    m["rss_before_pass"] = rss_mb()
    start = time.perf_counter()
    m["data"] = ilab.feature_data(sae, model, docs, n_tokens=n_tokens, seq_len=SEQ_LEN, batch_size=BATCH)
    m["total"] = time.perf_counter() - start
    m["rss_after_pass"] = rss_mb()
    log(f"dashboards {m['total']:.1f}s; baseline 2")
    m["base2"], m["n2"] = baseline(model, sae, docs, half)
    return m


def summary(m: dict) -> dict:
    """The JSON this bench prints, from :func:`measure`'s numbers."""
    from interplab.core.features.stats import FeatureAccumulator

    model, sae, data, total = m["model"], m["sae"], m["data"], m["total"]
    base1, base2, n1, n2 = m["base1"], m["base2"], m["n1"], m["n2"]
    per_token = (base1 + base2) / (n1 + n2)  # baseline seconds per token, before and after
    base = per_token * data.n_tokens  # the baseline's time for the pass's tokens
    t = data.timings
    streaming = t["forward_encode"] + t["update"]
    alive = data.density > 0
    state = FeatureAccumulator(sae.d_sae, data.n_top, data.n_quantile, data.context, data.lead, 32).state()
    return {
        "bench": "dashboards",
        "setting": {
            "model": model.name,
            "site": SITE,
            "d_sae": sae.d_sae,
            "arch": type(sae).__name__,
            "seq_len": SEQ_LEN,
            "batch_rows": BATCH,
            "n_top": data.n_top,
            "n_quantile": data.n_quantile,
            "context": data.context,
            "torch_threads": torch.get_num_threads(),
        },
        "n_tokens": data.n_tokens,
        "baseline_forward_encode_s": {
            "before": round(base1, 2),
            "after": round(base2, 2),
            "tokens_each": n1,
            "scaled_to_pass_tokens": round(base, 2),
        },
        "dashboard_total_s": round(total, 2),
        "dashboard_stages_s": {k: round(v, 2) for k, v in t.items()},
        "pass_ratio": round(streaming / base, 3),
        "in_pass_ratio": round(streaming / t["forward_encode"], 3),
        "in_pass_total_ratio": round(total / t["forward_encode"], 3),
        "total_ratio": round(total / base, 3),
        "bookkeeping_share_of_pass": round(t["update"] / streaming, 3),
        "tokens_per_s": {
            "baseline_before": round(n1 / base1),
            "baseline_after": round(n2 / base2),
            "dashboard_pass": round(data.n_tokens / streaming),
        },
        "running_state_mb": round(sum(v.numel() * v.element_size() for v in state.values()) / 2**20, 1),
        "goal_pass_ratio": 1.3,
        "peak_rss_mb": round(rss_mb()),
        "rss_mb": {
            "after_load": round(m["rss_loaded"]),
            "before_pass": round(m["rss_before_pass"]),
            "after_pass": round(m["rss_after_pass"]),
        },
        "result": {
            "alive_latents": int(alive.sum()),
            "mean_l0": round(float(data.density.sum()), 2),
            "latents_with_full_top": int((data.top_max[:, -1] > 0).sum()),
        },
        "load_average": {"before": m["load_before"], "after": [round(v, 2) for v in os.getloadavg()]},
        "cpu_count": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-tokens", type=int, default=200_000)
    args = parser.parse_args()
    print(json.dumps(summary(measure(args.n_tokens)), indent=1))


if __name__ == "__main__":
    main()
