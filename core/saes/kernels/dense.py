"""Fused training steps for the dense SAEs (ReLU + L1, JumpReLU + L0).

Plain autograd keeps several [batch, d_sae] tensors alive and makes one pass over memory
per elementwise op (relu, abs, sum, masks, their gradients). These functions compute
the same loss terms and gradients with the five matmuls the maths needs and as few
[batch, d_sae] passes as possible; tests check them against plain autograd.

Example
-------
>>> recon_BD, l1, mask_BM = relu_l1(x_BD, (W_enc, b_enc, W_dec, b_dec), b_dec_in=True)
"""

from __future__ import annotations

from typing import Any

import torch

#: The four tensors of a dense SAE, in this order: W_enc [D, M], b_enc [M], W_dec [M, D], b_dec [D].
DenseWeights = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def _center(x: torch.Tensor, b_dec: torch.Tensor, b_dec_in: bool) -> torch.Tensor:
    return x - b_dec if b_dec_in else x


def _weight_grads(
    x_c: torch.Tensor,
    acts: torch.Tensor,
    g_pre: torch.Tensor,
    g_recon: torch.Tensor,
    W_enc: torch.Tensor,
    b_dec_in: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of W_enc, b_enc, W_dec, b_dec from those of the pre-activations and the reconstruction."""
    g_b_enc = g_pre.sum(0)
    g_b_dec = g_recon.sum(0)
    if b_dec_in:  # x_c = x - b_dec
        g_b_dec = g_b_dec - W_enc @ g_b_enc
    return torch.mm(x_c.T, g_pre), g_b_enc, torch.mm(acts.T, g_recon), g_b_dec


class _ReLUL1(torch.autograd.Function):
    """recon = relu(x_c W_enc + b_enc) W_dec + b_dec, and l1 = mean over rows of the summed activations."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, b_dec_in: bool, *weights: torch.Tensor) -> tuple[torch.Tensor, ...]:
        W_enc, b_enc, W_dec, b_dec = weights
        x_c = _center(x, b_dec, b_dec_in)
        acts = torch.addmm(b_enc, x_c, W_enc).relu_()
        mask = acts > 0
        recon = torch.addmm(b_dec, acts, W_dec)
        l1 = acts.sum() / x.shape[0]  # acts >= 0, so |acts| = acts
        ctx.save_for_backward(x_c, acts, mask, W_enc, W_dec)
        ctx.b_dec_in = b_dec_in
        ctx.mark_non_differentiable(mask)
        return recon, l1, mask

    @staticmethod
    def backward(ctx: Any, g_recon: torch.Tensor, g_l1: torch.Tensor, _: Any) -> tuple[Any, ...]:
        x_c, acts, mask, W_enc, W_dec = ctx.saved_tensors
        g_recon = g_recon.contiguous()
        g_pre = torch.mm(g_recon, W_dec.T).add_(g_l1 / x_c.shape[0]).mul_(mask)
        return None, None, *_weight_grads(x_c, acts, g_pre, g_recon, W_enc, ctx.b_dec_in)


def relu_l1(x: torch.Tensor, weights: DenseWeights, b_dec_in: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(recon [B, D], L1 per row averaged over rows, active mask [B, M]) of a ReLU SAE, with fused gradients."""
    return _ReLUL1.apply(x, b_dec_in, *weights)


class _JumpReLUL0(torch.autograd.Function):
    """JumpReLU reconstruction and the mean L0, with rectangle-kernel straight-through gradients for the threshold.

    The threshold is ``exp(log_threshold)``; both outputs pass gradients to it through the
    kernel ``1{|pre - t| < bandwidth / 2} / bandwidth``, as in Rajamanoharan et al.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, b_dec_in: bool, bandwidth: float, *tensors: torch.Tensor) -> Any:
        log_t, W_enc, b_enc, W_dec, b_dec = tensors
        x_c = _center(x, b_dec, b_dec_in)
        t = log_t.exp()
        pre = torch.addmm(b_enc, x_c, W_enc)
        mask = pre > t
        acts = pre * mask
        recon = torch.addmm(b_dec, acts, W_dec)
        l0 = mask.sum(dtype=pre.dtype) / x.shape[0]
        ctx.save_for_backward(x_c, pre, acts, mask, W_enc, W_dec, t)
        ctx.bandwidth, ctx.b_dec_in = bandwidth, b_dec_in
        ctx.mark_non_differentiable(mask)
        return recon, l0, mask

    @staticmethod
    def backward(ctx: Any, g_recon: torch.Tensor, g_l0: torch.Tensor, _: Any) -> tuple[Any, ...]:
        x_c, pre, acts, mask, W_enc, W_dec, t = ctx.saved_tensors
        bw, n_rows = ctx.bandwidth, x_c.shape[0]
        g_recon = g_recon.contiguous()
        g_acts = torch.mm(g_recon, W_dec.T)
        # threshold: d acts / d t = -t K / bw and d l0 / d t = -K / (bw n_rows), K the rectangle kernel
        rows, cols = ((pre > t - bw / 2) & (pre < t + bw / 2)).nonzero(as_tuple=True)  # few pairs
        near = g_acts[rows, cols] * t[cols] + g_l0 / n_rows
        g_t = -torch.zeros_like(t).index_add_(0, cols, near) / bw
        g_pre = g_acts.mul_(mask)
        return None, None, None, g_t * t, *_weight_grads(x_c, acts, g_pre, g_recon, W_enc, ctx.b_dec_in)


def jumprelu_l0(
    x: torch.Tensor, weights: DenseWeights, log_threshold: torch.Tensor, bandwidth: float, b_dec_in: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(recon [B, D], mean L0, active mask [B, M]) of a JumpReLU SAE, with fused straight-through gradients."""
    return _JumpReLUL0.apply(x, b_dec_in, bandwidth, log_threshold, *weights)
