"""The fast training kernels against plain autograd: the sparse TopK/BatchTopK path (and its batch
top-k selection) and the fused dense steps of the standard and JumpReLU losses.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from interplab.core.saes import SAE, TopKSAE
from interplab.core.saes.kernels.sparse import _batch_topk, select_active

from tests.saes.helpers import pre_by_hand


def dense_reference(sae: TopKSAE, x: torch.Tensor, batch_topk: bool):
    """Loss and gradients with plain autograd: dense pre-activations, a mask of the selection, relu, dense decode."""
    p = {n: getattr(sae, n).detach().clone().requires_grad_(True) for n in ("W_enc", "b_enc", "W_dec", "b_dec")}
    b_in = p["b_dec"] if sae.cfg.apply_b_dec_to_input else torch.zeros_like(p["b_dec"])
    pre = (x - b_in) @ p["W_enc"] + p["b_enc"]
    k = sae.cfg.k
    mask = torch.zeros_like(pre, dtype=torch.bool)
    if batch_topk:
        mask.view(-1)[pre.detach().flatten().topk(k * len(x)).indices] = True
    else:
        mask.scatter_(1, pre.detach().topk(k, dim=1).indices, True)
    acts = pre.relu() * mask
    recon = acts @ p["W_dec"] + p["b_dec"]
    loss = (recon - x).pow(2).sum(-1).mean()
    loss.backward()
    return loss.detach(), {n: t.grad for n, t in p.items()}, mask, acts.detach()


@pytest.mark.parametrize("case", ["random", "negative", "dominant"])
@pytest.mark.parametrize("apply_b_dec", [True, False])
@pytest.mark.parametrize("arch", ["topk", "batchtopk"])
def test_sparse_training_path_equals_dense_autograd(arch, apply_b_dec, case):
    k, d, m, b = 2, 16, 64, 8
    sae = SAE.create(arch, d_in=d, d_sae=m, k=k, apply_b_dec_to_input=apply_b_dec)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        sae.W_enc.copy_(torch.randn(d, m, generator=g))
        sae.W_dec.copy_(torch.randn(m, d, generator=g))
        sae.b_enc.copy_(torch.randn(m, generator=g) * 0.1)
        sae.b_dec.copy_(torch.randn(d, generator=g))
    x = torch.randn(b, d, generator=g)
    if case == "dominant":
        x[0] *= 100.0  # row 0 holds most of the batch's top entries
    if case == "negative":  # shift so about half the selected pre-activations are negative: relu must zero them
        with torch.no_grad():
            pre = pre_by_hand(sae, x)
            chosen = pre.flatten().topk(k * b).values if arch == "batchtopk" else pre.topk(k, dim=1).values
            sae.b_enc.sub_(float(chosen.median()))

    loss, info = sae.training_loss(x)
    sae.zero_grad(set_to_none=True)
    loss.backward()
    ref_loss, ref_grads, mask, ref_acts = dense_reference(sae, x, arch == "batchtopk")

    scale = float(ref_loss.abs()) + 1.0
    torch.testing.assert_close(loss.detach(), ref_loss, rtol=1e-5, atol=1e-6 * scale)
    for name, ref in ref_grads.items():
        got = getattr(sae, name).grad
        assert got is not None, name
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()) + 1e-7, msg=name)
    if not apply_b_dec:  # b_dec then only enters through the decoder: its gradient is the summed residual
        torch.testing.assert_close(
            ref_grads["b_dec"], 2 * (info["recon"] - x).detach().sum(0) / b, rtol=1e-4, atol=1e-3
        )
    # the reported statistics describe the same selection
    fired_ref = (ref_acts > 0).any(0)
    assert torch.equal(info["fired"], fired_ref)
    assert info["l0"] == pytest.approx(float((ref_acts > 0).sum()) / b)
    assert mask.sum() == k * b
    if case == "negative":
        assert (ref_acts > 0).sum() < mask.sum(), "the case must select some negative pre-activations"
    if arch == "batchtopk" and case == "dominant":
        # row 0 holds far more than k of the batch's top entries
        b_in = sae.b_dec if apply_b_dec else torch.zeros(d)
        _, rows, _ = select_active(x, sae.W_enc, sae.b_enc, b_in, k, True)
        assert int(torch.bincount(rows, minlength=b)[0]) > 4 * k
        assert int(mask[0].sum()) > 4 * k


@pytest.mark.parametrize("case", ["random", "dominant", "ties"])
def test_batch_topk_sampled_cutoff_selects_exactly_the_flat_top_entries(case):
    g = torch.Generator().manual_seed(3)
    pre = torch.randn(1024, 512, generator=g)
    if case == "dominant":
        pre[:40] *= 50.0  # like Gemma's massive-activation tokens: a few rows hold most of the top entries
    if case == "ties":
        pre = pre.round(decimals=1)
    k = 8
    vals, rows, cols = _batch_topk(pre, k)
    assert len(vals) == k * 1024
    assert bool((rows[1:] >= rows[:-1]).all()), "pairs come out in row order"
    torch.testing.assert_close(vals, pre[rows, cols])
    want = pre.flatten().topk(k * 1024).values
    assert torch.equal(vals.sort().values, want.sort().values)
    assert len(set(zip(rows.tolist(), cols.tolist()))) == k * 1024, "no pair twice"


def _ref_kernel(u: torch.Tensor) -> torch.Tensor:
    return ((u > -0.5) & (u < 0.5)).to(u.dtype)


class _RefJumpReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, pre: torch.Tensor, log_t: torch.Tensor, bw: float) -> torch.Tensor:  # type: ignore[override]
        t = log_t.exp()
        ctx.save_for_backward(pre, t)
        ctx.bw = bw
        return pre * (pre > t)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        pre, t = ctx.saved_tensors
        g_pre = g * (pre > t)
        g_t = (-(t / ctx.bw) * _ref_kernel((pre - t) / ctx.bw) * g).sum(0)
        return g_pre, g_t * t, None  # chain rule through t = exp(log_t)


class _RefStep(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, pre: torch.Tensor, log_t: torch.Tensor, bw: float) -> torch.Tensor:  # type: ignore[override]
        t = log_t.exp()
        ctx.save_for_backward(pre, t)
        ctx.bw = bw
        return (pre > t).to(pre.dtype)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        pre, t = ctx.saved_tensors
        g_t = (-(1.0 / ctx.bw) * _ref_kernel((pre - t) / ctx.bw) * g).sum(0)
        return None, g_t * t, None


def plain_dense_loss(sae, x: torch.Tensor):
    """The standard / JumpReLU loss written with plain autograd (no fused functions)."""
    b_in = sae.b_dec if sae.cfg.apply_b_dec_to_input else torch.zeros_like(sae.b_dec)
    pre = (x - b_in) @ sae.W_enc + sae.b_enc
    if sae.arch == "standard":
        acts = pre.relu()
        penalty = sae.cfg.l1_coefficient * acts.abs().sum(-1).mean()
    else:
        bw = sae.cfg.bandwidth
        acts = _RefJumpReLU.apply(pre, sae.log_threshold, bw)
        penalty = sae.cfg.l0_coefficient * _RefStep.apply(pre, sae.log_threshold, bw).sum(-1).mean()
    recon = acts @ sae.W_dec + sae.b_dec
    return (recon - x).pow(2).sum(-1).mean() + penalty


@pytest.mark.parametrize("apply_b_dec", [True, False])
@pytest.mark.parametrize("arch", ["standard", "jumprelu"])
def test_fused_dense_training_step_equals_plain_autograd(arch, apply_b_dec):
    d, m, b = 16, 64, 32
    extra = {"l1_coefficient": 0.3} if arch == "standard" else {"l0_coefficient": 0.7, "bandwidth": 0.5}
    sae = SAE.create(arch, d_in=d, d_sae=m, apply_b_dec_to_input=apply_b_dec, **extra)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        sae.W_enc.copy_(torch.randn(d, m, generator=g))
        sae.W_dec.copy_(torch.randn(m, d, generator=g))
        sae.b_enc.copy_(torch.randn(m, generator=g))
        sae.b_dec.copy_(torch.randn(d, generator=g))
        if arch == "jumprelu":
            sae.log_threshold.copy_(torch.rand(m, generator=g).add(0.2).log())
    x = torch.randn(b, d, generator=g) * 0.3
    loss, info = sae.training_loss(x)
    sae.zero_grad(set_to_none=True)
    loss.backward()
    got = {n: p.grad.clone() for n, p in sae.named_parameters()}
    sae.zero_grad(set_to_none=True)
    ref = plain_dense_loss(sae, x)
    ref.backward()
    torch.testing.assert_close(loss.detach(), ref.detach())
    for name, p in sae.named_parameters():
        torch.testing.assert_close(got[name], p.grad, rtol=1e-5, atol=1e-5 * float(p.grad.abs().max()) + 1e-7, msg=name)
    if arch == "jumprelu":
        assert (got["log_threshold"] != 0).sum() > m // 4, "the case must put pre-activations inside the kernel"
    fired = sae.encode(x) > 0
    assert torch.equal(info["fired"], fired.any(0))
    assert info["l0"] == pytest.approx(float(fired.sum()) / b)
