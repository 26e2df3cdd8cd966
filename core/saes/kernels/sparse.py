"""Sparse encoder selection with a backward pass that touches only the active latents.

TopK and BatchTopK SAEs keep k latents per token out of thousands. The forward pass
must compute every pre-activation (a dense matmul), but the backward pass only needs
gradients at the selected (token, latent) pairs: O(n_active * d) instead of O(B * d * m).

Example
-------
>>> vals, rows, cols = select_active(x_BD, W_enc_DM, b_enc_M, b_dec_D, k=32, batch_topk=False)
>>> recon_BD = decode_pairs(vals.relu(), rows, cols, W_dec_MD, b_dec_D, n_rows=x_BD.shape[0])
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F

SAMPLE_MIN = 65_536  # entries sampled to place BatchTopK's cutoff
SAMPLE_FRACTION = 256  # and at least one in this many of a larger batch's entries


class _SelectActive(torch.autograd.Function):
    """(vals, rows, cols) of the selected pre-activations; gradients only for those pairs."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, W_enc: torch.Tensor, b_enc: torch.Tensor, b_dec: torch.Tensor, k: int, batch: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x_c = x - b_dec
        pre = torch.addmm(b_enc, x_c, W_enc)  # [B, M] dense: unavoidable
        if batch:
            vals, rows, cols = _batch_topk(pre, k)
        else:
            vals, cols = torch.topk(pre, k, dim=1, sorted=False)
            rows = torch.arange(x.shape[0], device=x.device).repeat_interleave(k)
            vals, cols = vals.flatten(), cols.flatten()
        ctx.save_for_backward(x_c, W_enc, rows, cols)
        ctx.mark_non_differentiable(rows, cols)
        return vals, rows, cols

    @staticmethod
    def backward(ctx: Any, g_vals: torch.Tensor, *_: Any) -> tuple[Any, ...]:
        x_c, W_enc, rows, cols = ctx.saved_tensors
        g_b_enc = torch.zeros(W_enc.shape[1], dtype=g_vals.dtype, device=g_vals.device).index_add_(0, cols, g_vals)
        g_W_enc = None
        if ctx.needs_input_grad[1]:
            # [M, B] sparse (latent x token) times [B, D]: only the active pairs are touched.
            g_W_enc = _by_column(rows, cols, g_vals, W_enc.shape[1], x_c.shape[0]).matmul(x_c).T
        # x_c = x - b_dec, so d/d(b_dec) = -sum over pairs of g * W_enc[:, col] = -W_enc @ g_b_enc.
        g_b_dec = -(W_enc @ g_b_enc) if ctx.needs_input_grad[3] else None
        return None, g_W_enc, g_b_enc if ctx.needs_input_grad[2] else None, g_b_dec, None, None


def _batch_topk(pre: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The top k*B entries of [B, M] as row-sorted pairs.

    Exact and fast: a random sample of the entries gives a cutoff safely below the true one;
    the entries above it (a little more than k*B, in flat order) are found in one pass and the
    exact k*B-th largest among them is found by selection, so the kept pairs stay in row order
    with no sort. If the cutoff was not low enough (or ties straddle the k*B-th value), the
    cutoff is lowered, then the full selection is used.
    """
    n_rows, width = pre.shape
    flat = pre.reshape(-1)
    n_keep = min(k * n_rows, flat.numel())
    pos = None
    if flat.numel() > 4 * SAMPLE_MIN:
        n_sample = max(SAMPLE_MIN, flat.numel() // SAMPLE_FRACTION)
        gen = torch.Generator(device=pre.device).manual_seed(n_rows)  # fixed positions: no global RNG use
        sample = flat[torch.randint(flat.numel(), (n_sample,), generator=gen, device=pre.device)]
        expected = n_keep * n_sample / flat.numel()
        for widen in (1.0, 4.0):
            rank = min(n_sample, int(expected * 1.2 * widen + 4 * math.sqrt(expected) * widen) + 1)
            cutoff = torch.topk(sample, rank, sorted=False).values.min()
            pos = _above_kth(flat, (flat >= cutoff).nonzero().squeeze(1), n_keep)
            if pos is not None:
                break
    if pos is None:
        pos = torch.topk(flat, n_keep, sorted=False).indices.sort().values
    return flat[pos], pos // width, pos % width


def _above_kth(flat: torch.Tensor, cand: torch.Tensor, n_keep: int) -> torch.Tensor | None:
    """The positions among ``cand`` (sorted) holding the ``n_keep`` largest values, in order; None when
    there are fewer candidates or a tie at the cut makes the count differ."""
    if len(cand) < n_keep:
        return None
    if len(cand) == n_keep:
        return cand
    vals = flat[cand]
    kth = vals.kthvalue(len(cand) - n_keep + 1).values
    keep = vals >= kth
    return cand[keep] if int(keep.sum()) == n_keep else None


def select_active(
    x: torch.Tensor, W_enc: torch.Tensor, b_enc: torch.Tensor, b_dec: torch.Tensor, k: int, batch_topk: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-k pre-activations per row (or the top k*B over the whole batch), as (vals, rows, cols).

    Pairs are sorted by row. ``vals`` carries gradients to W_enc, b_enc and b_dec.
    """
    return _SelectActive.apply(x, W_enc, b_enc, b_dec, k, batch_topk)


def _by_column(rows: torch.Tensor, cols: torch.Tensor, vals: torch.Tensor, n_cols: int, n_rows: int) -> torch.Tensor:
    """The pairs as a sparse CSR matrix [n_cols, n_rows] (transposed: one row per latent)."""
    order = torch.argsort(cols, stable=True)
    crow = torch.zeros(n_cols + 1, dtype=torch.int64, device=cols.device)
    crow[1:] = torch.bincount(cols, minlength=n_cols).cumsum(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(crow, rows[order], vals[order], size=(n_cols, n_rows))


class _DecodePairs(torch.autograd.Function):
    """sum_j vals_j * W_dec[cols_j] per row; backward through sparse products, not gathers."""

    @staticmethod
    def forward(
        ctx: Any, vals: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, W_dec: torch.Tensor, crow: torch.Tensor
    ) -> torch.Tensor:
        ctx.save_for_backward(vals, rows, cols, W_dec, crow)
        return F.embedding_bag(cols, W_dec, crow[:-1], mode="sum", per_sample_weights=vals)

    @staticmethod
    def backward(ctx: Any, g_out: torch.Tensor) -> tuple[Any, ...]:
        vals, rows, cols, W_dec, crow = ctx.saved_tensors
        g_out = g_out.contiguous()
        g_vals = g_W_dec = None
        if ctx.needs_input_grad[0]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pattern = torch.sparse_csr_tensor(
                    crow, cols, torch.ones_like(vals), size=(g_out.shape[0], W_dec.shape[0])
                )
                # (g_out @ W_dec.T) sampled at the active pairs only
                g_vals = torch.sparse.sampled_addmm(pattern, g_out, W_dec.T, beta=0.0).values()
        if ctx.needs_input_grad[3]:
            g_W_dec = _by_column(rows, cols, vals, W_dec.shape[0], g_out.shape[0]).matmul(g_out)
        return g_vals, None, None, g_W_dec, None


def decode_pairs(
    vals: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, W_dec: torch.Tensor, b_dec: torch.Tensor, n_rows: int
) -> torch.Tensor:
    """Sum ``vals * W_dec[cols]`` per row plus ``b_dec``, without a dense [B, M] product."""
    crow = torch.searchsorted(rows, torch.arange(n_rows + 1, device=rows.device))
    return _DecodePairs.apply(vals, rows, cols, W_dec, crow) + b_dec


def pairs_to_dense(vals: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, n_rows: int, d_sae: int) -> torch.Tensor:
    """Scatter (vals, rows, cols) into a dense [n_rows, d_sae] tensor."""
    out = torch.zeros(n_rows, d_sae, dtype=vals.dtype, device=vals.device)
    out[rows, cols] = vals
    return out
