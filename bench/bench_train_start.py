"""Benchmark: how long ``train_sae(model, site=..., n_tokens=4096)`` takes before its first training step.

The stream from a model grows its shuffle buffers 1, 2, 4, 8 batches and never past ``n_steps``, so training
that needs one batch does not wait for 8 (33k tokens of forward passes for batch_size=4096, about 100 s of
fixed overhead on the embedded model) before its first step.

In the same run, on the embedded Gemma 3 270M at ``blocks.6.hook_resid_post`` (batch 4096, context 128):

* ``forward_8_windows_s``: one forward pass of the stream (8 windows of 128 tokens, up to layer 6), the unit;
* ``now``: seconds from the call to the first step, windows run by then, and the whole call;
* ``eight_batch_buffer``: the same with every buffer 8 batches, for comparison.

Prints one JSON object. Run: ``python bench/bench_train_start.py``.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import interplab.core.data.streams as streams_mod
import interplab.core.saes.training.trainer as train_mod
from interplab.core.data.corpus import token_windows

import interplab as ilab

SITE = "blocks.6.hook_resid_post"


def timed_training(model: ilab.Model) -> dict:
    """Seconds to the first step and in all, and the windows run before the first step."""
    seen = {"windows": 0, "first_step_s": None, "windows_before_first_step": None}
    real_run, real_step = model.run_sites, train_mod.train_step
    start = time.perf_counter()

    def run_sites(enc, sites):
        seen["windows"] += int(enc["input_ids"].shape[0])
        return real_run(enc, sites)

    def train_step(*args, **kwargs):
        if seen["first_step_s"] is None:
            seen["first_step_s"] = round(time.perf_counter() - start, 2)
            seen["windows_before_first_step"] = seen["windows"]
        return real_step(*args, **kwargs)

    model.run_sites, train_mod.train_step = run_sites, train_step
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # a one-step SAE is poor, and says so
            ilab.train_sae(model, site=SITE, arch="topk", width=4096, k=32, n_tokens=4096, progress=False)
    finally:
        del model.run_sites
        train_mod.train_step = real_step
    return {**seen, "total_s": round(time.perf_counter() - start, 2)}


def main() -> None:
    model = ilab.load_model()
    windows = list(itertools.islice(token_windows(model.tokenizer, "default", 128), 8))
    ids = torch.tensor(windows)
    enc = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    model.run_sites(enc, [SITE])  # warm-up
    unit = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        model.run_sites(enc, [SITE])
        unit = min(unit, time.perf_counter() - start)
    now = timed_training(model)
    real = streams_mod.buffer_sizes
    streams_mod.buffer_sizes = lambda n_steps=None: itertools.repeat(8)  # every buffer 8 batches
    try:
        old = timed_training(model)
    finally:
        streams_mod.buffer_sizes = real
    print(json.dumps({
        "threads": torch.get_num_threads(),
        "forward_8_windows_s": round(unit, 3),
        "now": now,
        "eight_batch_buffer": old,
        "first_step_in_forward_units": {"now": round(now["first_step_s"] / unit, 1),
                                        "eight_batch_buffer": round(old["first_step_s"] / unit, 1)},
        "speedup_to_first_step": round(old["first_step_s"] / now["first_step_s"], 2),
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
