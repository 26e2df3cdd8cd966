"""Benchmark the polysemy and sparse-probing suites against the bare forward + encode of the same tokens.

Run ``python bench/bench_evals.py`` (a few minutes on 2 busy cores). It prints ONE JSON object on
stdout; progress goes to stderr. ``--rounds N`` sets the number of timed rounds, ``--words`` and
``--per-class`` the size of each suite's data.

Setting: the embedded Gemma 3 270M and its shipped SAE on ``blocks.6.hook_resid_post`` (BatchTopK,
width 4096). Per suite, the baseline is the bare work any evaluation of those tokens needs: the same
tokens, in the same batches, through ``model.run_sites`` to the site (the pass stops there) and
``sae.encode`` of every token. The suite adds what makes it a suite: finding the word positions and
comparing pairs (polysemy), mean pooling and the scikit-learn probes, one per class for the full
activation and one per class and k (sparse probing). Goal (issue 17): suite / baseline <= 1.5.

Timing: one warm-up of everything, then ``--rounds`` rounds; each round runs every suite and its
baseline back to back, the order reversed every other round. Ratios are medians over rounds of
same-round ratios, so load that changes between rounds cancels. Peak RSS is reported too. The
machine may be shared: ``load_average`` is recorded before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
from interplab.core.evals.polysemy import check_polysemy

import interplab as ilab


def bare(model, sae, site, texts, batch_size, max_tokens=None):
    """The same tokens, the same batches: forward to the site and encode every real token."""
    enc = model.to_tokens(texts)
    if max_tokens:
        enc = {k: v[:, :max_tokens] for k, v in enc.items()}
    n = 0
    for start in range(0, len(texts), batch_size):
        rows = slice(start, start + batch_size)
        width = int(enc["attention_mask"][rows].sum(1).max())
        part = {k: v[rows, :width] for k, v in enc.items()}
        (x,) = model.run_sites(part, [site])
        with torch.no_grad():
            z = sae.encode(x.float()[part["attention_mask"].bool()])
        n += z.shape[0]
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--words", type=int, default=24, help="polysemous words (of 48)")
    ap.add_argument("--per-class", type=int, default=20, help="Brown passages per genre class")
    args = ap.parse_args()
    load_before = os.getloadavg()
    torch.manual_seed(0)
    model = ilab.load_model()
    sae = ilab.load_sae("embedded", layer=6)
    site = sae.site
    words = ilab.evals.load_polysemy()[: args.words]
    poly_texts = check_polysemy(model.tokenizer, words)[0]
    texts, labels = ilab.evals.brown_genres(n_per_class=args.per_class, n_words=40)
    max_tokens = 48
    runs = {
        "polysemy": (lambda: ilab.evals.polysemy(sae, model, words, batch_size=32, progress=False),
                     lambda: bare(model, sae, site, poly_texts, 32)),
        "sparse_probing": (lambda: ilab.evals.sparse_probing(sae, model, texts, labels, max_tokens=max_tokens,
                                                             batch_size=8, progress=False),
                           lambda: bare(model, sae, site, texts, 8, max_tokens)),
    }  # fmt: skip
    times = {name: {"suite": [], "baseline": []} for name in runs}
    results = {}
    for r in range(args.rounds + 1):
        for name, (suite, base) in runs.items():
            order = [("suite", suite), ("baseline", base)]
            for kind, fn in order if r % 2 == 0 else order[::-1]:
                t = time.perf_counter()
                out = fn()
                dt = time.perf_counter() - t
                if r > 0:
                    times[name][kind].append(dt)
                if kind == "suite":
                    results[name] = out
                print(f"round {r} {name} {kind}: {dt:.2f}s", file=sys.stderr)
    report = {"benchmark": "bench_evals", "model": model.name, "site": site,
              "sae": "embedded layer 6 (batchtopk 4096)", "rounds": args.rounds, "polysemy_words": len(words),
              "polysemy_contexts": len(poly_texts), "probing_texts": len(texts), "probing_max_tokens": max_tokens,
              "torch_threads": torch.get_num_threads()}  # fmt: skip
    for name, t in times.items():
        ratios = [s / b for s, b in zip(t["suite"], t["baseline"], strict=True)]
        report[name] = {"suite_s_median": statistics.median(t["suite"]),
                        "baseline_s_median": statistics.median(t["baseline"]),
                        "ratio_median": statistics.median(ratios), "ratios": ratios, "goal_ratio": 1.5,
                        "meets_goal": statistics.median(ratios) <= 1.5}  # fmt: skip
    report["polysemy"]["accuracy"] = results["polysemy"].metrics["accuracy"]
    report["sparse_probing"]["mean_scores"] = results["sparse_probing"].scores.loc["mean"].round(4).to_dict()
    report["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    report["load_average"] = {"before": load_before, "after": os.getloadavg()}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
