"""The memory budget (``core/memory/budget.py``): one estimate per request that counts what it returns and
its largest intermediate; a request over the budget is split into batches when its output fits, refused
before any work when it does not; the default budget is 80% of the memory available now."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch
from interplab.core.memory import budget
from interplab.core.memory.budget import Estimate, MemoryBudgetError, fit_rows, format_bytes, set_memory_budget
from interplab.core.model import limits
from transformers import AutoModelForCausalLM, GPT2Config

import interplab as ilab
from tests.tiny import no_forward, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("isolated_cache")

S = "blocks.6.hook_resid_post"
TEXT_62 = ("word " * 61).strip()  # 62 tokens with BOS on the embedded model


def peak_rss() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


@contextlib.contextmanager
def measured() -> Iterator[dict[str, int]]:
    """How far this process's resident memory rose above where it stood on entry, at its highest."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")  # the kernel's high-water mark starts again from the current resident size
    out = {"start": peak_rss()}
    yield out
    out["rise"] = peak_rss() - out["start"]


@contextlib.contextmanager
def estimates(monkeypatch) -> Iterator[list[tuple[Estimate, int]]]:
    """Every estimate the model's requests make, with the batch chosen for it."""
    seen: list[tuple[Estimate, int]] = []

    def recording(estimate, hint="", split=True, most=None):  # type: ignore[no-untyped-def]
        batch = fit_rows(estimate, hint, split, most)
        seen.append((estimate, batch))
        return batch

    monkeypatch.setattr(limits, "fit_rows", recording)
    yield seen


def wide_gpt2() -> ilab.Model:
    """A tiny GPT-2 with a 50,000-token vocabulary (the tokenizer uses the first 64): big full-vocabulary logits."""
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=128, vocab_size=50_000, bos_token_id=1,
                        eos_token_id=2, pad_token_id=0)  # fmt: skip
    return ilab.load_model(AutoModelForCausalLM.from_config(config).eval(), tokenizer=tiny_tokenizer())


# ----------------------------------------------------------------------------- the estimate itself
def test_a_request_is_split_when_its_output_fits_and_refused_when_it_does_not():
    set_memory_budget("1GB")
    request = Estimate("logits", output=2**28, per_row=2**26, rows=64)  # 256 MB back, 64 MB per text
    assert fit_rows(request, "x") == 8  # (1 GB - 2 x 256 MB) / 64 MB
    assert fit_rows(request, "x", most=4) == 4
    with pytest.raises(MemoryBudgetError, match=r"logits would need about 4.5 GB \(256.0 MB returned, held twice"
                                                r".*4.0 GB for a forward pass of 64 texts\), over the memory budget "
                                                r"of 1.0 GB. Give fewer."):  # fmt: skip
        fit_rows(request, "Give fewer.", split=False)
    too_big = Estimate("collect", output=2**29, per_row=2**20, rows=10)
    with pytest.raises(MemoryBudgetError, match=r"collect would need about 1.0 GB even one at a time \(512.0 MB "
                                                r"returned.*1.0 MB for a forward pass of 1 text\)"):  # fmt: skip
        fit_rows(too_big)


def test_the_default_budget_is_80_percent_of_the_memory_available_now(monkeypatch):
    set_memory_budget(None)
    monkeypatch.delenv("INTERPLAB_MEMORY_BUDGET", raising=False)
    monkeypatch.setattr(budget, "available_memory", lambda: 10 * 2**30)
    assert budget.memory_budget() == 8 * 2**30
    monkeypatch.undo()
    monkeypatch.delenv("INTERPLAB_MEMORY_BUDGET", raising=False)
    with open("/proc/meminfo", encoding="ascii") as f:
        stated = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    # what the kernel says is free now, less what is in use (the model, this process, all others)
    available = budget.available_memory()
    assert 0 < available <= max(stated, 1) * 1.5 and available <= budget._system_memory()


# ------------------------------------------------------------- split into batches, bounded
def test_full_vocabulary_logits_are_split_and_stay_under_the_budget(monkeypatch):
    model = wide_gpt2()
    texts = [" ".join(["the cat sat on the mat"] * 16)] * 8  # 97 tokens each: 8 x 97 x 50,000 logits = 155 MB
    want = model.logits(texts[:1], positions=None)
    set_memory_budget("600MB")
    with estimates(monkeypatch) as seen, measured() as rise:
        got = model.logits(texts, positions=None)
    (estimate, batch), limit = seen[-1], budget.memory_budget()
    assert estimate.output == 8 * 97 * 50_000 * 4 and 1 <= batch < 8  # split: 8 at once would not fit
    assert rise["rise"] <= estimate.need(batch) <= limit, format_bytes(rise["rise"])
    assert got.shape == (8, 97, 50_000) and all(torch.equal(row, want[0]) for row in got)
    set_memory_budget("200MB")  # 155 MB returned, held twice: never fits, refused before any work
    refused = r"logits on 8 texts of up to 97 tokens would need about .* over the memory budget of 200.0"
    with no_forward(model), pytest.raises(MemoryBudgetError, match=refused):
        model.logits(texts, positions=None)


def test_collect_and_the_lens_are_split_with_the_same_results(monkeypatch):
    model = wide_gpt2()
    texts = ["the cat sat on the mat", "the dog", " ".join(["the quick red fox"] * 10)]
    site = "blocks.1.hook_resid_post"
    want_acts, want_lens = model.collect(texts, [site]), ilab.logit_lens(model, texts, positions=None)
    set_memory_budget("150MB")
    with estimates(monkeypatch) as seen:
        acts, lens = model.collect(texts, [site], batch_size=3), ilab.logit_lens(model, texts, positions=None)
    assert seen[-1][1] < 3 and seen[-1][0].output == 4 * 3 * 2 * 41 * 50_000  # the lens was split
    assert torch.equal(acts[site], want_acts[site]) and torch.equal(acts.tokens, want_acts.tokens)
    for i, text in enumerate(texts):
        n = len(model.to_str_tokens(text))  # padding aside, each text's logits are those it gets alone
        torch.testing.assert_close(lens[i, :, :n], want_lens[i, :, :n])


# ------------------------------------------------------- the requests, on the embedded model
@pytest.mark.parametrize(
    ("size", "request_", "message"),
    [
        ("300MB", lambda m: m.collect(["word " * 1000] + ["hi"] * 400, sites=[S]),
         r"collect on 401 texts of up to 1,002 tokens would need about .* \(981.0 MB returned"),
        ("500MB", lambda m: m.logits([TEXT_62] * 12, positions=None),
         r"logits on 12 texts of up to 62 tokens would need about .* \(744.0 MB returned"),
        ("100MB", lambda m: ilab.logit_lens(m, [("word " * 19).strip()], positions=None),
         r"logit_lens on one text of 20 tokens would need .* \(360.0 MB returned.*fewer positions"),
        ("500MB", lambda m: ilab.logit_lens(m, [TEXT_62] * 6, positions=None),
         r"logit_lens on 6 texts of up to 62 tokens would need about .* \(6.5 GB returned"),
        ("1GB", lambda m: m.collect([("word " * 3999).strip()] * 3, sites=["blocks.6.attn.hook_pattern"]),
         r"collect on 3 texts of up to 4,000 tokens would need about .* \(732.4 MB returned"),
        ("1GB", lambda m: ilab.patching.grid(m, ilab.patching.ioi(m, n=2), top_k=10**5),
         r"patching.grid with top_k=100,000 \(100,000 top tokens for each of 270 cells\) would need about 2"),
        ("4GB", lambda m: ilab.patching.grid(m, ilab.patching.ioi(m, n=2), top_k=10**7),
         r"top_k=10,000,000 \(262,144 top tokens for each of 270 cells\) would need about 6"),
    ],
)  # fmt: skip
def test_requests_whose_output_exceeds_the_budget_are_refused_before_work(embedded, size, request_, message):
    set_memory_budget(size)
    with no_forward(embedded), pytest.raises(MemoryBudgetError, match=message) as refused:
        request_(embedded)
    assert f"over the memory budget of {format_bytes(budget.parse_bytes(size))}" in str(refused.value)
    assert "ilab.set_memory_budget" in str(refused.value)


def test_estimates_cover_what_the_embedded_models_requests_really_take(embedded, monkeypatch):
    """Full-vocabulary logits, the lens at every position and attention patterns: the process's resident memory
    rises by no more than the estimate (bfloat16 weights, the softcap's temporaries, float32 copies, eager
    attention in every layer)."""
    set_memory_budget("16GB")
    requests = [
        lambda: embedded.logits(["word " * 99] * 2, positions=None),
        lambda: ilab.logit_lens(embedded, ["word " * 19], positions=None),
        lambda: embedded.collect(["word " * 999] * 3, sites=["blocks.6.attn.hook_pattern"]),
    ]
    for request_ in requests:
        with estimates(monkeypatch) as seen, measured() as rise:
            out = request_()
        del out
        (estimate, batch) = seen[-1]
        assert 0 < rise["rise"] <= estimate.need(batch), (estimate.what, format_bytes(rise["rise"]))
