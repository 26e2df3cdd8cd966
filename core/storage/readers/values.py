"""The one numeric-range rule of every reader: values finite and within the range of what they index.

Example
-------
>>> expect_values("dash/meta.json", "latent_ids", [3, 7], 0, 4096, "d_sae")
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .errors import FileError, describe_value


def expect_values(file: str | os.PathLike[str], name: str, values: Any, low: float | None = None,
                  high: float | None = None, what: str = "", maximum: float | None = None) -> None:  # fmt: skip
    """The one numeric-range rule of every reader: each value of ``values`` (a tensor, an array or a list of
    numbers) finite and within ``[low, high)`` (``high`` excluded: a count such as d_sae, the vocabulary or the
    layers; ``maximum`` an included bound such as 1 for a probability), else a :class:`FileError` naming the
    file, the field, the first bad value and the valid range. ``what`` says what ``high`` is.

    >>> expect_values("dash/meta.json", "neighbour_ids", [3, 10**9], 0, 4096, "d_sae")
    Traceback (most recent call last):
    FileError: 'dash/meta.json': neighbour_ids holds 1000000000 at [1]: must be in 0..4095 (d_sae 4096).
    """
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise FileError(file, name, f"must hold numbers, got {describe_value(values)}") from None
    bad = ~np.isfinite(arr)
    if low is not None:
        bad |= arr < low
    if high is not None:
        bad |= arr >= high
    if maximum is not None:
        bad |= arr > maximum
    if not bad.any():
        return
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    value = arr[index] if arr.ndim else arr.item()
    shown = int(value) if np.isfinite(value) and float(value).is_integer() else float(value)
    if maximum is not None:
        want = f"must be a finite number in {low}..{maximum}" if low is not None else f"must be <= {maximum}"
    elif low is None and high is None:
        want = "must be finite"
    elif high is None:
        want = f"must be a finite number >= {low}"
    elif low is None:
        want = f"must be a finite number < {high}"
    else:
        want = f"must be in {low}..{high - 1}" + (f" ({what} {high})" if what else "")
    raise FileError(file, name, f"holds {shown} at {list(index)}: {want}")
