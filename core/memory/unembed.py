"""A full-vocabulary unembedding that reads its memory-mapped weight a slice at a time (bounded resident memory).

The embedded model's unembedding (tied to its embedding) is 262,144 x 640, 0.34 GB in bfloat16, memory-mapped
from the model file. ``lm_head(hidden)`` reads all of it: as one matrix product the whole weight becomes
resident and stays so, raising a notebook kernel's peak by 0.34 GB for its lifetime. :class:`PagedUnembedding`
computes the same product over vocabulary slices and drops each slice's pages after use
(:func:`interplab.core.memory.pages.release_pages`), forward and backward (a DAS or probe loss through the readout),
so one slice (20 MB) is resident at a time. The result is the same matrix product, slice by slice.

:func:`page_unembedding` turns a model's ``nn.Linear`` unembedding into one, in place (same parameters, same
state dict, ties kept), when its weight is file-mapped; :func:`interplab.load_model` does it for local models.

The embedding lookup has the same effect from the other side: a page cache holding the file in large folios maps
a whole folio per fault, so 2,000 random token ids made all 320 MB of the embedded model's (tied) embedding
resident. :func:`page_embedding` releases the embedding's pages after each lookup (0.4-1.2 ms).

>>> from interplab.core.memory.unembed import page_unembedding
>>> page_unembedding(hf_model.lm_head)   # True when the weight is memory-mapped
True
>>> page_embedding(hf_model.get_input_embeddings())
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .pages import is_file_mapped, release_pages

#: Vocabulary rows per slice: 16,384 x 640 bfloat16 is 20 MB.
SLICE_ROWS = 16_384


def _slices(n_rows: int, rows: int) -> list[tuple[int, int]]:
    return [(a, min(a + rows, n_rows)) for a in range(0, n_rows, rows)]


def _releasing(W_slice: torch.Tensor) -> Callable[..., None]:
    """A post-hook for a slice's autograd node: release the slice's pages once its backward has run."""

    def hook(grads_in: Any, grads_out: Any) -> None:
        release_pages(W_slice)

    return hook


def _paged_linear(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None, rows: int) -> torch.Tensor:
    """``F.linear(x, W, b)`` over row slices of ``W``, each slice's pages released after it is read.

    Without gradients the slices are written into one output. With them, each slice is one autograd node
    (``mm``/``addmm``) whose backward releases the slice again once it has read it; autograd itself decides
    which gradients to compute (an ``autograd.grad`` towards an intervention never builds the weight's).
    """
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    tracked = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, W, b))
    if not tracked:
        out = x2.new_empty((x2.shape[0], W.shape[0]), dtype=torch.result_type(x2, W))
        for a, z in _slices(W.shape[0], rows):
            W_slice = W[a:z]
            out[:, a:z] = x2 @ W_slice.T if b is None else torch.addmm(b[a:z], x2, W_slice.T)
            release_pages(W_slice)
        return out.view(*lead, W.shape[0])
    parts = []
    for a, z in _slices(W.shape[0], rows):
        W_slice = W[a:z]
        part = torch.mm(x2, W_slice.T) if b is None else torch.addmm(b[a:z], x2, W_slice.T)
        release_pages(W_slice)
        if part.grad_fn is not None:  # after its backward has read the slice (x's gradient), drop it again
            part.grad_fn.register_hook(_releasing(W_slice))
        parts.append(part)
    return torch.cat(parts, 1).view(*lead, W.shape[0])


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
        return _paged_linear(x, W, self.bias, self.slice_rows)


def page_unembedding(module: torch.nn.Module) -> bool:
    """Make an ``nn.Linear`` unembedding a :class:`PagedUnembedding` in place when its weight is memory-mapped.

    Returns whether it did (False for any other module or an in-memory weight: nothing changes).
    """
    if type(module) is not torch.nn.Linear or not is_file_mapped(module.weight):
        return False
    module.__class__ = PagedUnembedding
    return True


def _release_weight_pages(module: torch.nn.Embedding, inputs: Any, output: Any) -> None:
    release_pages(module.weight)


def page_embedding(module: torch.nn.Module) -> bool:
    """Release an ``nn.Embedding``'s memory-mapped pages after every lookup (a forward hook), in place.

    Returns whether it did (False for any other module, an in-memory weight, or one already paged).
    The lookup's output is a copy, so the weight's pages are not needed once it has run.
    """
    weight = getattr(module, "weight", None)
    if not isinstance(module, torch.nn.Embedding) or weight is None or not is_file_mapped(weight):
        return False
    if getattr(module, "_interplab_paged", False):
        return False
    module.register_forward_hook(_release_weight_pages)
    module._interplab_paged = True  # type: ignore[assignment]  # torch types Module.__setattr__ as Tensor | Module
    return True
