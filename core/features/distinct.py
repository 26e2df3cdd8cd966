"""Near-duplicate contexts among a latent's top examples, left out of what a card shows.

A latent that fires on several tokens of one sentence, or on a sentence the corpus holds more than once,
fills its top examples with the same text. :func:`distinct_order` keeps, for each latent, the examples whose
context around the max is not an earlier (stronger) example's context, possibly shifted by a few tokens.
:class:`~interplab.core.features.data.FeatureData` keeps every example; its cards (``latent``, the
dashboard) show the distinct ones.

Example
-------
>>> order = distinct_order(data.top_tokens[[3, 7]], data.top_max[[3, 7]], data.lead)
>>> order[0]            # example indexes of latent 3 to show, strongest first; -1 pads
"""

from __future__ import annotations

import numpy as np

#: Tokens before the max that two contexts compare.
BEFORE = 6
#: Tokens from the max on that two contexts compare.
AFTER = 3
#: A context repeats an earlier one when they match shifted by at most this many tokens.
MAX_SHIFT = 4


def _window(context: int, lead: int) -> tuple[int, int]:
    """The compared span of a context window: up to BEFORE tokens before the max to AFTER tokens from it."""
    return max(0, lead - BEFORE), min(context, lead + AFTER)


def repeats(tokens_KC: np.ndarray, valid_K: np.ndarray, lead: int) -> np.ndarray:
    """bool [K]: example k's compared span equals an earlier valid example's, shifted by up to MAX_SHIFT.

    >>> repeats(np.array([[1, 2, 3, 4], [1, 2, 3, 4], [5, 6, 7, 8]]), np.ones(3, bool), 1).tolist()
    [False, True, False]
    """
    K, C = tokens_KC.shape
    lo, hi = _window(C, lead)
    base = tokens_KC[:, lo:hi]  # [K, W]
    out = np.zeros(K, dtype=bool)
    for s in range(-MAX_SHIFT, MAX_SHIFT + 1):
        if lo + s < 0 or hi + s > C:
            continue
        moved = tokens_KC[:, lo + s : hi + s]  # [K, W]
        same = (moved[:, None, :] == base[None, :, :]).all(-1)  # [j, i]: j's shifted span is i's span
        earlier = np.tril(np.ones((K, K), dtype=bool), k=-1)  # i < j
        out |= (same & earlier & valid_K[None, :]).any(1)
    return out & valid_K


def distinct_order(tokens_MKC: np.ndarray, max_MK: np.ndarray, lead: int) -> np.ndarray:
    """int [M, K]: per latent, the indexes of its examples that fired and repeat no earlier one, in order,
    then -1.

    >>> distinct_order(np.array([[[1, 2, 3, 4], [1, 2, 3, 4], [5, 6, 7, 8]]]), np.array([[3.0, 2.0, 1.0]]), 1)
    array([[ 0,  2, -1]])
    """
    M, K = max_MK.shape
    out = np.full((M, K), -1, dtype=np.int64)
    for m in range(M):
        valid = max_MK[m] > 0
        keep = np.flatnonzero(valid & ~repeats(tokens_MKC[m], valid, lead))
        out[m, : len(keep)] = keep
    return out


def gather(arrays: dict[str, np.ndarray], order_MK: np.ndarray) -> dict[str, np.ndarray]:
    """The examples ``order_MK`` picks from ``{name: [M, K, ...] array}``; -1 gives an empty example
    (tokens -1, where -1, values 0).

    >>> gather({"top_max": np.array([[3.0, 2.0, 1.0]])}, np.array([[0, 2, -1]]))["top_max"].tolist()
    [[3.0, 1.0, 0.0]]
    """
    empty = order_MK < 0
    pick = np.where(empty, 0, order_MK)
    out = {}
    for name, arr in arrays.items():
        index = pick.reshape(pick.shape + (1,) * (arr.ndim - 2))
        got = np.take_along_axis(arr, index, axis=1)
        fill = -1 if name.endswith(("_tokens", "_where")) else 0
        got[np.broadcast_to(empty.reshape(empty.shape + (1,) * (arr.ndim - 2)), got.shape)] = fill
        out[name] = got
    return out
