"""Benchmark: exact activation-patching grids, interplab vs TransformerLens, and attribution vs exact.

1. The exact residual grid (all layers x all positions, ``resid_pre``) on a randomly initialised
   GPT-2-small-sized model (12 layers, d_model 768, vocab 50257; built from its config, no download),
   with the same weights in a TransformerLens ``HookedTransformer`` (no weight processing), 16 tokens:
   wall time of ``ilab.patching.grid`` (cached passes, and full passes with ``reuse_cache=False``) vs
   ``transformer_lens.patching.get_act_patch_resid_pre`` in the same process, and the max |difference|.
   Two prompt pairs: every token different (no cell can be skipped) and one token different (IOI-like:
   cells before it are not rerun).
2. On the embedded Gemma 3 270M and an IOI pair: correlation of attribution grids with exact grids,
   per site kind and pooled over all of them, for plain attribution (``steps=1``) and integrated
   gradients (``steps`` 4 and 8 on the embedding path, 4 on the per-site path), with the time of each.
3. The IOI grid of ``nbs/04`` on the embedded model (8 pairs, 18 layers x 15 positions, ``resid_pre``, and
   the 18 x 4 heads grid): forward-equivalents per cell, i.e. the grid's time divided by (cells x the time of
   one forward of the 8-pair batch, ``model.logits`` of the clean prompts, measured in the same run), for the
   cached passes (the default) and full passes (``reuse_cache=False``, the previous path), with the largest
   difference between their values.

Prints one JSON object. Run: ``python bench/bench_patching.py [--small] [--skip-tl] [--grid-only]
[--no-attribution]`` (``--skip-tl``: parts 2 and 3; ``--grid-only``: part 3; ``--no-attribution``: parts 1 and 3).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import interplab as ilab
from tests.tiny import WORDS, tiny_tokenizer


def gpt2_pair(n_layers: int, d_model: int, n_heads: int, vocab: int):
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=n_layers, n_embd=d_model, n_head=n_heads, vocab_size=vocab, n_positions=1024)
    hf = GPT2LMHeadModel(config).eval()
    cfg = HookedTransformerConfig(
        n_layers=n_layers, d_model=d_model, n_heads=n_heads, d_head=d_model // n_heads, d_mlp=4 * d_model,
        d_vocab=vocab, n_ctx=1024, act_fn="gelu_new", normalization_type="LN", eps=config.layer_norm_epsilon,
        positional_embedding_type="standard", default_prepend_bos=False, device="cpu",
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        tl = HookedTransformer(cfg)
    tl.load_and_process_state_dict(
        convert_gpt2_weights(hf, cfg), fold_ln=False, center_writing_weights=False, center_unembed=False,
        fold_value_biases=False, refactor_factored_attn_matrices=False,
    )  # fmt: skip
    return ilab.load_model(hf, tokenizer=tiny_tokenizer()), tl.eval()


def versus_tl(model, tl, clean: str, corrupt: str, tl_seconds: float | None = None) -> dict:
    """Time both on one pair; with ``tl_seconds`` TransformerLens is not rerun (its cost does not depend on
    the prompts: one forward per cell) and its values are not compared."""
    from transformer_lens import patching

    metric = ilab.patching.logit_diff(" cat", " dog")
    a, w = (model.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (" cat", " dog"))
    ids_clean, ids_corrupt = model.to_tokens(clean)["input_ids"], model.to_tokens(corrupt)["input_ids"]

    def tl_metric(logits):
        return (logits[:, -1, a] - logits[:, -1, w]).mean()

    ilab.patching.grid(model, clean, corrupt, metric, site="resid_pre", positions=[-1])  # warm-up
    start = time.perf_counter()
    ours = ilab.patching.grid(model, clean, corrupt, metric, site="resid_pre")
    t_ours = time.perf_counter() - start
    start = time.perf_counter()
    full = ilab.patching.grid(model, clean, corrupt, metric, site="resid_pre", reuse_cache=False)
    t_full = time.perf_counter() - start
    assert np.abs(full.values - ours.values).max() < 1e-4
    if tl_seconds is not None:
        return {"n_tokens": int(ids_clean.shape[1]), "cells": int(ours.values.size), "interplab_s": round(t_ours, 3),
                "interplab_full_passes_s": round(t_full, 3),
                "transformer_lens_s (same cells, from the run above)": round(tl_seconds, 3),
                "speedup": round(tl_seconds / t_ours, 2),
                "speedup_full_passes": round(tl_seconds / t_full, 2)}  # fmt: skip
    start = time.perf_counter()
    with torch.no_grad():
        _, cache = tl.run_with_cache(ids_clean)
        theirs = patching.get_act_patch_resid_pre(tl, ids_corrupt, cache, tl_metric).numpy()
    t_tl = time.perf_counter() - start
    return {
        "n_tokens": int(ids_clean.shape[1]),
        "cells": int(ours.values.size),
        "interplab_s": round(t_ours, 3),
        "interplab_full_passes_s": round(t_full, 3),
        "transformer_lens_s": round(t_tl, 3),
        "speedup": round(t_tl / t_ours, 2),
        "speedup_full_passes": round(t_tl / t_full, 2),
        "max_abs_diff": float(np.abs(ours.values - theirs).max()),
        "value_range": float(np.ptp(theirs)),
    }


def _corr(e: np.ndarray, a: np.ndarray) -> float:
    return round(float(np.corrcoef(e, a)[0, 1]), 3)


def attribution_vs_exact(
    sites: tuple[str, ...],
    runs: tuple[tuple[int, str], ...] = ((1, "embeddings"), (4, "embeddings"), (8, "embeddings"), (4, "site")),
) -> dict:
    model = ilab.load_model()
    clean = "When Mary and John went to the store, John gave a drink to"
    corrupt = "When Mary and John went to the store, Mary gave a drink to"
    metric = ilab.patching.logit_diff(" Mary", " John")
    ilab.patching.attribution(model, clean, corrupt, metric, sites="heads", steps=2)  # warm-up
    approx, times = {}, {}
    for n, path in runs:
        key = f"steps={n}" + (f", path={path}" if path != "embeddings" else "")
        times[key] = float("inf")
        for _ in range(2):  # the best of two runs
            start = time.perf_counter()
            approx[key] = ilab.patching.attribution(model, clean, corrupt, metric, sites=list(sites), steps=n,
                                                    path=path)  # fmt: skip
            times[key] = min(times[key], time.perf_counter() - start)
    s2 = model.to_str_tokens(clean).index(" John", 5)  # the one token where the prompts differ
    exact, t_exact = {}, 0.0
    for site in sites:
        start = time.perf_counter()
        exact[site] = ilab.patching.grid(model, clean, corrupt, metric, site=site)
        t_exact += time.perf_counter() - start
    out = {}
    first = next(iter(times))
    for key in approx:
        per_site, pooled_e, pooled_a, without_e, without_a = {}, [], [], [], []
        for site in sites:
            e, a = exact[site].normalized, approx[key][site].normalized
            per_site[site] = _corr(e.ravel(), a.ravel())
            pooled_e.append(e.ravel())
            pooled_a.append(a.ravel())
            if site != "heads":  # the S2 column alone, and the rest
                keep = [i for i, p in enumerate(exact[site].positions) if p != s2]
                without_e.append(e[:, keep].ravel())
                without_a.append(a[:, keep].ravel())
                per_site[f"{site} without S2"] = _corr(without_e[-1], without_a[-1])
                per_site[f"{site} S2 column"] = _corr(e[:, s2], a[:, s2])
        out[key] = {
            "per_site": per_site,
            "pooled": _corr(np.concatenate(pooled_e), np.concatenate(pooled_a)),
            "pooled_position_sites_without_S2": _corr(np.concatenate(without_e), np.concatenate(without_a)),
            "attribution_s": round(times[key], 2),
            "time_ratio_vs_steps_1": round(times[key] / times[first], 2),
        }
    out["exact_s"] = round(t_exact, 2)
    return out


def embedded_ioi_grid(n_pairs: int = 8, sites: tuple[str, ...] = ("resid_pre", "heads")) -> dict:
    """Forward-equivalents per cell of the exact IOI grids on the embedded model, cached vs full passes."""
    model = ilab.load_model()
    pairs = ilab.patching.ioi(model, n=n_pairs)
    ilab.patching.grid(model, pairs, site="resid_pre", positions=[-1])  # warm-up
    t_fwd = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        model.logits(pairs.clean)
        t_fwd = min(t_fwd, time.perf_counter() - start)
    out: dict = {"pairs": n_pairs, "tokens": len(model.to_str_tokens(pairs.clean[0])),
                 "forward_of_the_batch_s": round(t_fwd, 3)}  # fmt: skip
    for site in sites:
        timed = {}
        for name, reuse in (("cached", True), ("full_passes", False)):
            start = time.perf_counter()
            timed[name] = ilab.patching.grid(model, pairs, site=site, reuse_cache=reuse)
            timed[name + "_s"] = time.perf_counter() - start
        cells = timed["cached"].values.size
        out[site] = {
            "cells": int(cells),
            "cached_s": round(timed["cached_s"], 2),
            "full_passes_s": round(timed["full_passes_s"], 2),
            "forward_equivalents_per_cell": round(timed["cached_s"] / (cells * t_fwd), 3),
            "forward_equivalents_per_cell_full_passes": round(timed["full_passes_s"] / (cells * t_fwd), 3),
            "speedup": round(timed["full_passes_s"] / timed["cached_s"], 2),
            "max_abs_diff": float(np.abs(timed["cached"].values - timed["full_passes"].values).max()),
            "value_range": float(np.ptp(timed["full_passes"].values)),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", action="store_true", help="a 4-layer, d_model 256 model; two sites on Gemma")
    parser.add_argument("--skip-tl", action="store_true", help="only the embedded-model parts")
    parser.add_argument("--grid-only", action="store_true", help="only the embedded IOI grid cost")
    parser.add_argument("--no-attribution", action="store_true", help="skip part 2 (attribution vs exact)")
    args = parser.parse_args()
    sites = ("resid_pre", "heads") if args.small else ilab.patching.SITES
    if args.grid_only:
        print(json.dumps({"threads": torch.get_num_threads(), "embedded_ioi_grid": embedded_ioi_grid()}, indent=1))
        return
    if args.skip_tl:
        print(json.dumps({"threads": torch.get_num_threads(), "embedded_ioi_grid": embedded_ioi_grid(),
                          "embedded_ioi_attribution_vs_exact": attribution_vs_exact(sites)}, indent=1))  # fmt: skip
        return
    size = (4, 256, 4, 50257) if args.small else (12, 768, 12, 50257)
    model, tl = gpt2_pair(*size)
    rng = np.random.default_rng(0)
    words = [w for w in WORDS if w not in ("cat", "dog")]
    clean_words = list(rng.choice(words, 15))
    other = list(rng.choice(words, 15))
    one_diff = clean_words.copy()
    one_diff[7] = "dog" if clean_words[7] != "dog" else "cat"
    result = {
        "model": {"n_layers": size[0], "d_model": size[1], "n_heads": size[2], "vocab": size[3]},
        "threads": torch.get_num_threads(),
        "resid_pre_all_tokens_differ": versus_tl(model, tl, " ".join(clean_words), " ".join(other)),
    }
    tl_s = result["resid_pre_all_tokens_differ"]["transformer_lens_s"]
    result["resid_pre_one_token_differs"] = versus_tl(model, tl, " ".join(clean_words), " ".join(one_diff), tl_s)
    print(json.dumps(result), file=sys.stderr)  # each part as it is done (a long run may be cut short)
    result["embedded_ioi_grid"] = embedded_ioi_grid()
    print(json.dumps(result["embedded_ioi_grid"]), file=sys.stderr)
    if not args.no_attribution:
        result["embedded_ioi_attribution_vs_exact"] = attribution_vs_exact(sites)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
