"""Applying steering inside nnsight traces: steered logits and generation, remote-safe.

Two execution paths give the same numbers:

* nnsight (:func:`logits`, :func:`generate`): an edit function given to ``Model.logits`` /
  ``Model.generate``, run inside their traces (every generated token via ``tracer.all()``),
  remote-safe with ``remote="local"``;
* torch hooks (``hooks.py``: ``apply``, ``stream``, and ``generate(..., backend="hooks")`` or its
  name :func:`generate_local`): forward hooks on the underlying module, removed afterwards; used by
  the live panel to stream tokens.

Example
-------
>>> steer = [vec * 4.0, clamp(sae, 123, 10.0)]
>>> generate(model, "I think that", steer, max_new_tokens=20)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..checks import check_positive_int
from ..model.model import Edit, check_generate_options
from ..model.trace_ops import read_site, start_mask, steer, write_site
from ..storage.progress import check_progress, progress_bar
from .hooks import StepStreamer, generate_hooked
from .plans import SitePlan, Steering, plan

if TYPE_CHECKING:
    from ..model.model import Model


# ------------------------------------------------------------------ nnsight path
def edit_for(plans: list[SitePlan], start: int | None, left_padded: bool) -> Edit | None:
    """The ``edit(inputs, step)`` that steers a trace of ``Model.logits`` / ``Model.generate``.

    ``start`` limits prompt steering (step 0) to the tokens from that index of each text on;
    generated tokens (later steps) are steered at every position. No steering (an empty list) is
    no edit at all: an nnsight generation loop whose body touches no module never ends. The edit runs
    inside the trace body, so it holds only envoys, tensors and :mod:`interplab.core.model.trace_ops` functions.
    """
    if not plans:
        return None
    parts = [p.parts() for p in plans]

    def edit(inputs: dict[str, torch.Tensor], step: int) -> None:
        mask = None
        if step == 0 and start is not None:
            mask_ = inputs["attention_mask"]
            mask = start_mask(mask_.sum(1).cpu(), mask_.shape[1], start, left_padded)
        for envoy, io, add_D, clamps in parts:
            write_site(envoy, io, steer(read_site(envoy, io), add_D, clamps, mask))

    return edit


def _check_start(start: int | None, lengths: torch.Tensor, width: int, left_padded: bool) -> None:
    """Refuse a bad ``start`` before any trace (the edit computes the same mask inside it)."""
    start_mask(lengths, width, start, left_padded)


def logits(
    model: Model,
    texts: str | Sequence[str],
    steering: Steering,
    positions: int | Sequence[int] | None = -1,
    start: int | None = None,
    batch_size: int = 8,
) -> torch.Tensor:
    """Steered next-token logits [batch, n_positions, vocab] (``Model.logits`` with a steering edit).

    ``start``: steer only from this token of each text on (-1: the last); None: every position.
    """
    plans = plan(model, steering)
    enc = model.to_tokens(texts)
    _check_start(start, enc["attention_mask"].sum(1), enc["input_ids"].shape[1], left_padded=False)
    return model.logits(texts, positions, batch_size, edit=edit_for(plans, start, left_padded=False))


BACKENDS = ("nnsight", "hooks")


def generate(
    model: Model,
    texts: str | Sequence[str],
    steering: Steering,
    max_new_tokens: int = 20,
    start: int | None = None,
    do_sample: bool = False,
    backend: str = "nnsight",
    progress: Any = True,
    **kwargs: Any,
) -> list[str]:
    """Continue each text with steering applied to the prompt and to every new token.

    Returns only the new text. Greedy by default; ``start`` limits prompt steering as in :func:`logits`.
    ``backend="nnsight"`` steers inside an nnsight generation (remote-safe); ``"hooks"`` uses torch
    hooks and plain HF ``generate`` (same tokens, local only). ``progress``: a bar advancing once per new token
    (a model in this process; a remote one generates on its server, without a bar); False for none.

    >>> ilab.steering.generate(model, "I think that", vec * 4.0, max_new_tokens=10, progress=False)
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not one of {BACKENDS}.")
    check_positive_int("max_new_tokens", max_new_tokens)
    check_progress(progress)
    check_generate_options(kwargs)
    show = progress if not model.remote and "streamer" not in kwargs else False
    with progress_bar(max_new_tokens, desc="generate", show=show, unit="tok", leave=False) as bar:
        if show is not False:
            kwargs["streamer"] = StepStreamer(bar)
        if backend == "hooks":
            return generate_hooked(model, texts, steering, max_new_tokens, start, do_sample, **kwargs)
        plans = plan(model, steering)
        enc = model.to_tokens(texts, padding_side="left")
        _check_start(start, enc["attention_mask"].sum(1), enc["input_ids"].shape[1], left_padded=True)
        edit = edit_for(plans, start, left_padded=True)
        return model.generate(texts, max_new_tokens, do_sample=do_sample, edit=edit, **kwargs)


generate_local = functools.partial(generate, backend="hooks")
generate_local.__doc__ = """:func:`generate` through torch hooks and plain HF ``generate`` (same tokens, no nnsight).

>>> generate_local(model, "I think that", vec * 4.0, max_new_tokens=10)
"""
