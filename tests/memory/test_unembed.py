"""A memory-mapped unembedding is read a slice at a time and its pages released
(core/memory/pages.py, core/memory/unembed.py).

Kept resident, the embedded model's 0.34 GB unembedding would stay in the kernel for its lifetime after one
full-vocabulary readout (file-backed pages count in VmRSS/VmHWM), lifting four notebooks over the Binder limit.
"""

from __future__ import annotations

import sys

import pytest
import torch
from interplab.core.memory.pages import is_file_mapped, release_pages
from interplab.core.memory.unembed import PagedUnembedding, page_embedding, page_unembedding

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and madvise")

MB = 1024**2


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


@pytest.fixture
def mapped(tmp_path):
    """A [16384 * 4, 512] bfloat16 weight (64 MB) memory-mapped privately from a file, as safetensors maps one."""
    rows, cols = 16_384 * 4, 512
    values = torch.randn(rows, cols, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    path = tmp_path / "weight.bin"
    values.view(torch.int16).numpy().tofile(path)
    W = torch.from_file(str(path), shared=False, size=rows * cols, dtype=torch.bfloat16).view(rows, cols)
    assert torch.equal(W, values)
    del values
    return W


def test_release_pages_drops_a_mapped_tensor_and_keeps_its_data(mapped):
    expected = mapped[::997].clone()
    assert is_file_mapped(mapped)
    mapped.float().sum()  # read: every page resident
    before = _rss_mb()
    released = release_pages(mapped)
    assert released > 60 * MB, released
    assert _rss_mb() < before - 50, (before, _rss_mb())
    assert torch.equal(mapped[::997], expected)  # read again from the page cache


def test_release_pages_leaves_ordinary_and_written_memory_alone(mapped):
    plain = torch.randn(4 * MB)
    copy = plain.clone()
    assert not is_file_mapped(plain)
    assert release_pages(plain) == 0
    assert torch.equal(plain, copy)  # MADV_DONTNEED on anonymous memory would have zeroed it
    # a weight edited in place holds copy-on-write pages: dropping them would silently undo the edit
    mapped[100:200] = 7.0
    assert release_pages(mapped[:16_384]) == 0
    assert bool((mapped[100:200] == 7.0).all())
    assert release_pages(mapped[16_384:]) > 0  # the untouched rest is still the file's own


def test_paged_unembedding_equals_linear_forward_and_backward(mapped):
    dense = torch.nn.Linear(mapped.shape[1], mapped.shape[0], bias=False, dtype=torch.bfloat16)
    with torch.no_grad():
        dense.weight.copy_(mapped)
    head = torch.nn.Linear(mapped.shape[1], mapped.shape[0], bias=False, dtype=torch.bfloat16)
    head.weight = torch.nn.Parameter(mapped, requires_grad=False)
    assert page_unembedding(head) and isinstance(head, PagedUnembedding)
    assert not page_unembedding(dense)  # an in-memory weight stays a plain nn.Linear
    x = torch.randn(2, 3, mapped.shape[1], dtype=torch.bfloat16, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    out, ref = head(x), dense(x_ref)
    torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2)
    g = torch.randn_like(out)
    out.backward(g)
    ref.backward(g)
    scale = float(x_ref.grad.abs().max())  # a sum over 65,536 rows: bfloat16 rounds it to ~1% of its scale
    torch.testing.assert_close(x.grad.float(), x_ref.grad.float(), rtol=1e-2, atol=1e-2 * scale)


def test_paged_unembedding_weight_gradient(mapped):
    W = mapped[:40_000].float()  # in memory: the same math without paging, weight and bias gradients
    head = torch.nn.Linear(W.shape[1], W.shape[0])
    head.weight = torch.nn.Parameter(W.clone())
    dense = torch.nn.Linear(W.shape[1], W.shape[0])
    dense.load_state_dict(head.state_dict())
    head.__class__ = PagedUnembedding  # W is not file-mapped: forced, to run the sliced autograd path
    head.slice_rows = 16_384
    x = torch.randn(5, W.shape[1])
    head(x).square().sum().backward()
    dense(x).square().sum().backward()
    torch.testing.assert_close(head.weight.grad, dense.weight.grad, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(head.bias.grad, dense.bias.grad, rtol=1e-4, atol=1e-3)


def test_paged_unembedding_keeps_one_slice_resident(mapped):
    head = torch.nn.Linear(mapped.shape[1], mapped.shape[0], bias=False, dtype=torch.bfloat16)
    head.weight = torch.nn.Parameter(mapped, requires_grad=False)
    assert page_unembedding(head)
    release_pages(mapped)
    before = _rss_mb()
    x = torch.randn(4, mapped.shape[1], dtype=torch.bfloat16, requires_grad=True)
    out = head(x)
    out.float().sum().backward()
    # the whole weight is 64 MB; the output and gradients are tiny: a slice (16 MB) at most stays
    assert _rss_mb() < before + 24, (before, _rss_mb())


def _resident_mb(tensor: torch.Tensor) -> float:
    """MB of ``tensor``'s pages mapped into this process (``/proc/self/pagemap``'s present bit)."""
    import mmap

    import numpy as np

    start, page = tensor.data_ptr(), mmap.PAGESIZE
    first, last = start // page, -(-(start + tensor.numel() * tensor.element_size()) // page)
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(first * 8)
        flags = np.frombuffer(f.read((last - first) * 8), dtype=np.uint64)
    return int((flags >> np.uint64(63)).sum()) * page / MB


def test_embedding_lookups_leave_no_pages_of_a_mapped_weight(mapped):
    """2,000 random token ids leave none of the embedding's pages resident: each fault maps a whole large folio,
    or 64 KB around it, so kept pages would add up to all 320 MB of the embedded model's embedding."""
    emb = torch.nn.Embedding(*mapped.shape, dtype=torch.bfloat16)
    emb.weight = torch.nn.Parameter(mapped, requires_grad=False)
    ids = torch.randint(0, mapped.shape[0], (2000,), generator=torch.Generator().manual_seed(1))
    release_pages(mapped)
    with torch.no_grad():
        emb(ids)
    assert _resident_mb(mapped) > 16, _resident_mb(mapped)  # what an unpaged embedding keeps
    assert page_embedding(emb) and not page_embedding(emb)  # once only
    plain = torch.nn.Embedding(8, 4)
    assert not page_embedding(plain)  # an in-memory weight: no hook
    release_pages(mapped)
    with torch.no_grad():
        out = emb(ids)
    assert _resident_mb(mapped) < 1, _resident_mb(mapped)
    assert torch.equal(out, mapped[ids])


@pytest.mark.embedded
def test_embedded_unembedding_is_paged_and_float32_is_not(embedded):
    import interplab as ilab

    head = embedded.readout_modules()[1]
    assert isinstance(head, PagedUnembedding)
    assert getattr(embedded.module.get_input_embeddings(), "_interplab_paged", False)
    embedded.logits(["The cat sat on the mat"])  # the blocks' weights (0.2 GB) come in once
    release_pages(head.weight)
    before = _rss_mb()
    logits = embedded.logits(["The cat sat on the mat"])
    assert logits.shape[-1] == 262_144
    assert _rss_mb() < before + 60, (before, _rss_mb())  # + 0.34 GB would be the whole unembedding
    f32 = ilab.load_model(dtype=torch.float32)
    assert type(f32.readout_modules()[1]) is torch.nn.Linear
    assert int(f32.logits(["The cat sat on the mat"])[0, -1].argmax()) == int(logits[0, -1].argmax())
    h = torch.randn(3, embedded.d_model, dtype=head.weight.dtype)
    torch.testing.assert_close(head(h), torch.nn.functional.linear(h, head.weight), rtol=1e-2, atol=1e-2)


def test_logit_effects_over_released_slices_equal_one_pass(mapped):
    from interplab.core.features.search import top_logits_paged
    from interplab.core.model.trace_ops import top_logits

    d_MD = torch.randn(6, mapped.shape[1])
    paged = top_logits_paged(d_MD, mapped, 5, 4096)  # four slices of 16,384 rows, merged
    whole = top_logits(d_MD, mapped, 5, 4096)
    for got, want in zip(paged, whole, strict=True):
        torch.testing.assert_close(got, want)


def test_a_gradient_towards_the_input_builds_no_weight_gradient(mapped):
    """``autograd.grad`` towards an intervention (DAS) must not compute the [vocab, d] weight gradient, even when
    the weight requires grad (a Hugging Face model's parameters do by default)."""
    head = torch.nn.Linear(mapped.shape[1], mapped.shape[0], bias=False, dtype=torch.bfloat16)
    head.weight = torch.nn.Parameter(mapped)  # requires grad
    assert page_unembedding(head)
    x = torch.randn(3, mapped.shape[1], dtype=torch.bfloat16, requires_grad=True)
    before = _rss_mb()
    (grad,) = torch.autograd.grad(head(x).float().logsumexp(-1).sum(), [x])
    assert grad.shape == x.shape and head.weight.grad is None
    assert _rss_mb() < before + 24, (before, _rss_mb())  # a 64 MB weight gradient was never built
