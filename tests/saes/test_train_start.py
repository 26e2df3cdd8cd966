"""train_sae(model, ...) starts training after one batch of forward passes, shows progress while it runs
them, and warns at the end when the SAE came out poor.

A full shuffle buffer of eight batches before the first step would be about 33k tokens for batch_size=4096
(100 s on the embedded model) with the progress bar at 0; a 50k-token SAE with explained variance 0.14 and
54% dead latents is the kind of result the warning names.
"""

from __future__ import annotations

import random
import warnings

import interplab.core.saes.training.trainer as train_mod
import pytest
from interplab.core.saes import SAE, quality, train_sae

from tests.tiny import WORDS, tiny_model

_rng = random.Random(0)
CORPUS = [" ".join(_rng.choice(WORDS) for _ in range(40)) for _ in range(200)]
SITE = "blocks.1.hook_resid_post"
CONTEXT_BODY = 127  # windows of 128 tokens, BOS not used


def test_buffer_schedule_starts_small_and_never_passes_n_steps():
    assert list(train_mod.buffer_sizes(1)) == [1]
    assert list(train_mod.buffer_sizes(20)) == [1, 2, 4, 8, 5]
    assert sum(train_mod.buffer_sizes(1000)) == 1000 and max(train_mod.buffer_sizes(1000)) == train_mod.BUFFER_BATCHES


def test_training_starts_after_one_batch_of_forward_passes_with_progress_before(monkeypatch):
    model = tiny_model("gpt2")
    events: list[tuple[str, int]] = []
    real_run, real_step = model.run_sites, train_mod.train_step

    def run_sites(enc, sites):
        events.append(("forward", int(enc["input_ids"].shape[0])))
        return real_run(enc, sites)

    def train_step(*args, **kwargs):
        events.append(("step", 0))
        return real_step(*args, **kwargs)

    class Bar:  # records what the progress bars show, in order with the forwards and steps
        def __init__(self, *args, desc="", disable=False, **kwargs):
            self.desc = desc

        def update(self, n=1):
            events.append((f"bar {self.desc}", int(n)))

        def set_postfix(self, *args, **kwargs):
            pass

        def close(self):
            pass

    monkeypatch.setattr(model, "run_sites", run_sites)
    monkeypatch.setattr(train_mod, "train_step", train_step)
    monkeypatch.setattr(train_mod, "tqdm", Bar)
    batch = 512
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a 2-step SAE is poor: that warning is tested below
        train_sae(model, site=SITE, arch="topk", width=64, k=4, corpus=CORPUS, n_tokens=2 * batch, batch_size=batch)
    first_step = events.index(("step", 0))
    windows_before = sum(n for kind, n in events[:first_step] if kind == "forward")
    assert windows_before == -(-batch // CONTEXT_BODY) == 5  # one batch's windows, not a buffer of 8 (33)
    feed = [n for kind, n in events[:first_step] if kind == "bar activations from the model"]
    assert events[1] == ("bar activations from the model", 5 * CONTEXT_BODY) and feed == [5 * CONTEXT_BODY]
    # the second buffer (tokens 512..1023) lies in windows 4..8: window 4, split between the buffers, runs twice
    assert sum(n for kind, n in events if kind == "forward") == 5 + 5


def test_a_poor_sae_ends_with_a_warning_that_says_what_helps():
    model = tiny_model("gpt2")
    with pytest.warns(UserWarning) as got:
        sae = train_sae(model, site=SITE, arch="topk", width=512, k=1, corpus=CORPUS, n_tokens=8 * 128,
                        batch_size=128, progress=False)  # fmt: skip
    text = " ".join(str(w.message) for w in got)
    assert "The topk SAE at blocks.1.hook_resid_post, trained on 1,024 tokens" in text, text
    assert "of the variance (under 0.5)" in text and "of its 512 latents never fired" in text, text
    assert "What usually helps: more training tokens" in text and "a larger k than 1" in text, text
    assert sae.cfg.metadata["explained_variance"] < 0.5 and sae.cfg.metadata["dead_fraction"] > 0.5


def test_a_good_sae_trains_without_a_warning():
    sae = SAE.create("topk", d_in=8, d_sae=16, k=4, site=SITE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quality.warn_quality(sae, 0.8, 0.1, 10_000)
        quality.warn_quality(sae, None, 0.5, 10_000)  # exactly half dead: not "more than half"
    with pytest.warns(UserWarning, match=r"explains 0.49 of the variance"):
        quality.warn_quality(sae, 0.49, 0.0, 10_000)
