"""A full-vocabulary unembedding that reads its memory-mapped weight a slice at a time (bounded resident memory).

The embedded model's unembedding (tied to its embedding) is 262,144 x 640, 0.34 GB in bfloat16, memory-mapped
from the model file. ``lm_head(hidden)`` reads all of it: as one matrix product the whole weight becomes
resident and stays so, raising a notebook kernel's peak by 0.34 GB for its lifetime. :class:`PagedUnembedding`
computes the same product over vocabulary slices and drops each slice's pages after use
(:func:`interplab.core.pages.release_pages`), forward and backward (a DAS or probe loss through the readout),
so one slice (20 MB) is resident at a time. The result is the same matrix product, slice by slice.

:func:`page_unembedding` turns a model's ``nn.Linear`` unembedding into one, in place (same parameters, same
state dict, ties kept), when its weight is file-mapped; :func:`interplab.load_model` does it for local models.

>>> from interplab.core.unembed import page_unembedding
>>> page_unembedding(hf_model.lm_head)   # True when the weight is memory-mapped
True
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .pages import is_file_mapped, release_pages

#: Vocabulary rows per slice: 16,384 x 640 bfloat16 is 20 MB.
SLICE_ROWS = 16_384


def _slices(n_rows: int, rows: int) -> list[tuple[int, int]]:
    return [(a, min(a + rows, n_rows)) for a in range(0, n_rows, rows)]


class _PagedLinear(torch.autograd.Function):
    """``x @ W.T + b`` over row slices of ``W``, releasing each slice's pages after it is read."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None, rows: int) -> torch.Tensor:
        out = x.new_empty((*x.shape[:-1], W.shape[0]), dtype=torch.result_type(x, W))
        for a, z in _slices(W.shape[0], rows):
            out[..., a:z] = F.linear(x, W[a:z], None if b is None else b[a:z])
            release_pages(W[a:z])
        ctx.save_for_backward(x, W)
        ctx.rows, ctx.has_bias = rows, b is not None
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, W = ctx.saved_tensors
        need_x, need_W, need_b = ctx.needs_input_grad[:3]
        grad_x = torch.zeros_like(x, dtype=torch.float32) if need_x else None  # summed over slices in float32
        grad_W = torch.empty_like(W) if need_W else None
        for a, z in _slices(W.shape[0], ctx.rows):
            g_slice = g[..., a:z].to(W.dtype)
            if grad_x is not None:
                grad_x += (g_slice @ W[a:z]).float()
            if grad_W is not None:
                grad_W[a:z] = g_slice.reshape(-1, z - a).T @ x.reshape(-1, x.shape[-1]).to(W.dtype)
            release_pages(W[a:z])
        grad_b = g.reshape(-1, g.shape[-1]).sum(0) if need_b and ctx.has_bias else None
        return None if grad_x is None else grad_x.to(x.dtype), grad_W, grad_b, None


class PagedUnembedding(torch.nn.Linear):
    """An ``nn.Linear`` whose product reads the weight slice by slice and releases each slice's memory-mapped pages.

    The same outputs as ``nn.Linear`` (one matrix product per vocabulary slice); on a weight that is not
    file-mapped (float32 weights converted in memory, a GPU) it is exactly ``nn.Linear``.
    """

    slice_rows: int = SLICE_ROWS

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        W = self.weight
        if W.device.type != "cpu" or not W.is_contiguous() or W.shape[0] <= self.slice_rows:
            return F.linear(x, W, self.bias)
        return _PagedLinear.apply(x, W, self.bias, self.slice_rows)


def page_unembedding(module: torch.nn.Module) -> bool:
    """Make an ``nn.Linear`` unembedding a :class:`PagedUnembedding` in place when its weight is memory-mapped.

    Returns whether it did (False for any other module or an in-memory weight: nothing changes).
    """
    if type(module) is not torch.nn.Linear or not is_file_mapped(module.weight):
        return False
    module.__class__ = PagedUnembedding
    return True
