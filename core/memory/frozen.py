"""Weights that need no gradient while a block runs.

A model loaded from a hub keeps ``requires_grad=True`` on every weight. A backward pass taken only towards other
leaves (a DAS rotation, a LoRA adapter, an activation) then still saves each layer's input for the weight
gradients it never computes: on the embedded model a DAS step at batch 8 held 0.2 GB more at its peak than with
the weights frozen. :func:`frozen_weights` turns the flag off for the block and back on after, on every exit.
Hold the model's run lock around it, as a trace does, so no other thread's training sees the flag off.

>>> import torch
>>> layer = torch.nn.Linear(2, 2)
>>> with frozen_weights(layer):
...     layer.weight.requires_grad
False
>>> layer.weight.requires_grad
True
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def frozen_weights(module: torch.nn.Module) -> Iterator[None]:
    """``module``'s parameters that require grad set not to inside the block; restored on every exit."""
    thawed = [p for p in module.parameters() if p.requires_grad]
    for p in thawed:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in thawed:
            p.requires_grad_(True)
