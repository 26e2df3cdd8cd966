"""Context and memory limits (core/model/limits.py): inputs longer than the model takes and requests over
the memory budget are refused, or their batches split, before the forward pass.
"""

from __future__ import annotations

import logging

import pytest
from interplab.core.features import feature_data
from interplab.core.memory.budget import MemoryBudgetError, set_memory_budget
from interplab.core.saes import SAE

import interplab as ilab
from tests.contracts.test_crash_safety import CORPUS, SITE, _sae
from tests.tiny import TEXTS

pytestmark = pytest.mark.usefixtures("isolated_cache")


def no_forward(model, monkeypatch):  # type: ignore[no-untyped-def]
    """Make any forward pass fail the test: a refusal must come before the work."""

    def boom(*_a, **_k):  # type: ignore[no-untyped-def]
        raise AssertionError("the model ran before the bad input was refused")

    monkeypatch.setattr(model, "run_sites", boom)
    handle = model.module.register_forward_pre_hook(lambda *_: boom())
    return handle


def test_inputs_longer_than_the_context_are_refused_before_the_forward(gpt2, monkeypatch, tmp_path):
    handle = no_forward(gpt2, monkeypatch)
    long = " ".join(["the cat"] * 100)  # 200 tokens + BOS; the tiny GPT-2 takes 128
    try:
        for call in (lambda: gpt2.collect(long, SITE), lambda: gpt2.logits(long), lambda: gpt2.generate(long),
                     lambda: ilab.logit_lens(gpt2, long), lambda: ilab.steering.generate(gpt2, long, [])):  # fmt: skip
            with pytest.raises(ValueError, match=r"text is 201 tokens, longer than 'GPT2LMHeadModel' takes \(128"):
                call()
        with pytest.raises(ValueError, match=r"the prompt and max_new_tokens is 130 tokens"):
            gpt2.generate(" ".join(["the"] * 100), max_new_tokens=29)
        with pytest.raises(ValueError, match=r"context_size is 256 tokens, longer than"):
            gpt2.cache(CORPUS, SITE, tmp_path / "a", n_tokens=10, context_size=256)
        with pytest.raises(ValueError, match=r"seq_len is 256 tokens"):
            feature_data(_sae(), gpt2, CORPUS, seq_len=256)
    finally:
        handle.remove()


def test_requests_over_the_memory_budget_are_refused_or_split(gpt2, monkeypatch, caplog):
    set_memory_budget("300KB")
    rows = []
    real = gpt2.run_sites
    monkeypatch.setattr(gpt2, "run_sites", lambda enc, sites: rows.append(len(enc["input_ids"])) or real(enc, sites))
    with caplog.at_level(logging.INFO, logger="interplab.core.model.limits"):
        acts = gpt2.collect(TEXTS * 4, SITE, batch_size=8)  # a batch of 8 would not fit: split
    assert acts.tokens.shape[0] == 12 and max(rows) < 8 and "texts of up to" in caplog.text
    set_memory_budget("20KB")
    with pytest.raises(MemoryBudgetError, match=r"logits on one text of \d+ tokens would need about .* over the memory "
                                                r"budget of 20\.0 KB.*fewer positions"):  # fmt: skip
        gpt2.logits(TEXTS[1], positions=None)
    set_memory_budget("1MB")
    with pytest.raises(MemoryBudgetError, match=r"A topk SAE with d_in=640 and width=1,000,000,000,000 would need"):
        SAE.create("topk", d_in=640, d_sae=10**12, k=4)
    with pytest.raises(MemoryBudgetError, match=r"feature_data with n_top=1000000000"):
        feature_data(_sae(), gpt2, CORPUS, n_top=10**9)
