"""Attention implementations: attention patterns exist only where attention runs eagerly.

Hugging Face models run ``sdpa`` attention by default, which never builds the [heads, query, key]
probabilities; ``attn.hook_pattern`` needs the eager implementation. :func:`eager_attention` switches a
local model to it for the passes that read patterns and back afterwards (the same values up to
rounding; sdpa is faster on long texts). A model on a remote server runs as the server loaded it.

Example
-------
>>> with eager_attention(model.module):
...     ...   # traces reading attn.hook_pattern
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any

import torch


@contextlib.contextmanager
def eager_attention(module: torch.nn.Module, needed: bool = True) -> Iterator[None]:
    """Inside the block ``module`` (a transformers model) runs eager attention, then its own again.

    A model whose attention reads the implementation from its config at each call but that transformers cannot
    switch (Falcon: ``_can_set_attn_implementation()`` is False) has the config's value set directly.
    """
    config = getattr(module, "config", None)
    before = getattr(config, "_attn_implementation", None)
    switch = needed and before not in (None, "eager")
    # transformers models only; None: nothing to switch
    set_implementation = getattr(module, "set_attn_implementation", None) if switch else None
    can_set = getattr(module, "_can_set_attn_implementation", None)
    if set_implementation is not None and callable(can_set) and not can_set():
        set_implementation = functools.partial(setattr, config, "_attn_implementation")
    if set_implementation is not None:
        set_implementation("eager")
    try:
        yield
    finally:
        if set_implementation is not None:
            set_implementation(before)


def check_patterns(saved: Sequence[Any], config: Any) -> None:
    """A clear error when a pattern came back empty: the model ran attention that builds none (a remote server)."""
    if any(s is None for s in saved):
        raise RuntimeError(
            f"The model ran attention without materialising its patterns (attn_implementation "
            f"{getattr(config, '_attn_implementation', None)!r}); attn.hook_pattern needs eager attention. "
            "A remote model must be served with attn_implementation='eager'."
        )
