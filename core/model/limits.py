"""Limits checked before a forward pass: the model's context length, the memory a request would take.

A request longer than the model takes (``max_position_embeddings``) is refused; one whose memory
estimate exceeds the stated budget (:func:`interplab.core.checks.set_memory_budget`) is split into
smaller batches when a batch is the problem, and refused with a clear message when one row is.
:func:`module_fingerprint` identifies a model's weights for long jobs that resume.

Example
-------
>>> max_positions(model.config)
32768
>>> fit_batch(Estimate("collect", per_row=2**30, rows=64), length=128)   # 1 GB per row, 16 GB budget
16
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..memory.budget import Estimate, fit_rows, format_bytes

logger = logging.getLogger(__name__)

_POSITION_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length")


def max_positions(config: Any) -> int | None:
    """The longest input a model with this config takes, or None when the config states none."""
    for key in _POSITION_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def check_lengths(lengths: Sequence[int], limit: int | None, model_name: str, what: str = "text") -> None:
    """Refuse any length over ``limit`` tokens, naming which input and both numbers."""
    if limit is None:
        return
    for i, n in enumerate(lengths):
        if n > limit:
            which = f"{what} {i}" if len(lengths) > 1 else what
            raise ValueError(
                f"{which} is {n:,} tokens, longer than {model_name!r} takes ({limit:,}, max_position_embeddings). "
                "Cut it into pieces, or stream a long corpus with model.cache(..., context_size=...)."
            )


def forward_bytes(
    config: Any,
    d_model: int,
    n_heads: int,
    itemsize: int,
    batch: int,
    length: int,
    n_logits: int | None = 1,
    eager: bool | None = None,
) -> int:
    """A generous estimate of one forward pass: hidden states, MLP activations, attention scores
    ([heads, length, length] per row; scores, float32 softmax and probabilities with eager attention,
    which ``eager=True`` forces), and the readout at ``n_logits`` positions per row (None: every position;
    0: none): the logits in the weights' dtype, the softcap's temporaries and the float32 copy."""
    d_ff = int(getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * d_model)
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    if eager is None:
        eager = getattr(config, "_attn_implementation", "eager") == "eager"
    hidden = batch * length * (10 * d_model + 3 * d_ff) * itemsize
    attention = (3 * itemsize + 4 if eager else itemsize) * batch * max(n_heads, 1) * length * length
    logits = batch * (length if n_logits is None else n_logits) * vocab * (3 * itemsize + 4)
    return int(hidden + attention + logits)


def fit_batch(
    estimate: Estimate, length: int, full_logits: bool = False, split: bool = True, hint: str = "", most: int = 0
) -> int:
    """The largest batch, up to ``most`` (else ``estimate.rows``), whose estimate (what the request returns and one
    batch's forward pass) fits the memory budget (:func:`interplab.core.memory.budget.fit_rows`).

    A request whose output and one row do not fit is refused
    (:class:`~interplab.core.memory.budget.MemoryBudgetError`); so is, with ``split=False`` (a call that
    cannot be split), a batch over the budget. A smaller batch than asked is logged.
    """
    rows = estimate.rows
    one = rows == 1 or (split and not estimate.output)  # what is refused: one text, or all of them at once
    what = f"{estimate.what} on " + (
        f"one text of {length:,} tokens" if one else f"{rows:,} texts of up to {length:,} tokens"
    )
    if not hint:
        hint = "Use shorter texts" + (", or fewer positions (positions=-1)" if full_logits else "") + "."
        if not one:
            hint = "Give fewer texts at a time" + (
                ", or shorter ones (each is padded to the longest)." if split else "."
            )
    fit = fit_rows(replace(estimate, what=what), hint, split, most or rows)
    if fit < min(most or rows, rows):
        logger.info("%s: %d texts of up to %d tokens per forward pass (%d at once would need %s).",
                    estimate.what, fit, length, rows, format_bytes(estimate.need(rows)))  # fmt: skip
    return fit


def module_fingerprint(name: str, module: Any) -> str:
    """A stable id of a torch module's weights (16 hex digits): ``name``, each parameter's name, shape
    and dtype, and its first and last 2048 values. Weights on the ``meta`` device (a remote
    model's, which live on the server) add only their names, shapes and dtypes."""
    h = hashlib.sha256(name.encode())
    for pname, p in module.named_parameters():
        h.update(f"{pname}{tuple(p.shape)}{p.dtype}".encode())
        if p.device.type == "meta":
            continue
        flat = p.detach().reshape(-1)
        # The first and last values only: a strided sample faulted in every page of memory-mapped weights
        # (with read-ahead, the embedded model's whole 335 MB embedding: +0.5 GB resident for a fingerprint).
        h.update(flat[:2048].float().cpu().numpy().tobytes())
        h.update(flat[-2048:].float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]
