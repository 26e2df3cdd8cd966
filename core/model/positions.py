"""Token positions: a ``positions`` argument checked and turned into the column of each position in each row.

Example
-------
>>> position_columns(torch.tensor([3, 5]), [0, -1]).tolist()
[[0, 2], [0, 4]]
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch


def position_columns(lengths: torch.Tensor, positions: Sequence[int]) -> torch.Tensor:
    """Column index of each position in each right-padded row ([batch, n_pos]; -1 is a row's last token)."""
    cols = []
    for p in positions:
        col = lengths + p if p < 0 else torch.full_like(lengths, p)
        if (col < 0).any() or (col >= lengths).any():
            raise ValueError(f"Position {p} is outside a text of {int(lengths.min())} tokens.")
        cols.append(col)
    return torch.stack(cols, 1)


def as_positions(positions: int | Sequence[int] | None) -> list[int] | None:
    """``positions`` as a list of ints (``None`` stays None: every position); a clear error for anything else."""
    if positions is None:
        return None
    items = [positions] if not isinstance(positions, (Sequence, torch.Tensor)) or isinstance(positions, str) else (
        list(positions.tolist() if isinstance(positions, torch.Tensor) else positions))  # fmt: skip
    if not items:
        raise ValueError("positions is empty: give a token index (-1 is each text's last), a list of them, or None.")
    out = []
    for p in items:
        try:
            if isinstance(p, bool):
                raise TypeError
            out.append(operator.index(p))
        except TypeError:
            raise TypeError(
                f"positions must be token indices (int, -1 is each text's last) or None, got {p!r} in {positions!r}."
            ) from None
    return out
