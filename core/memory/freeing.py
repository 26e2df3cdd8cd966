"""Giving freed memory back to the OS: one call (:func:`release`) and one scope for work that frees a lot.

A notebook kernel keeps what glibc's heap holds after a large computation unless it is trimmed, so a cell that
ran passes over a big vocabulary would lift every later cell's memory. Work that frees many temporaries runs in
:func:`scope`: what earlier work left free goes back when it starts, and what it freed when it ends.

Example
-------
>>> from interplab.core.memory import scope
>>> @scope()
... def evaluate_once():
...     return sum(range(10))
>>> evaluate_once()
45
"""

from __future__ import annotations

import gc
from contextlib import ContextDecorator
from typing import Any

from .heap import TRIM_ABOVE_BYTES, release_free_heap


def release(threshold: int = TRIM_ABOVE_BYTES, *, collect: bool = False) -> bool:
    """Trim glibc's heap when it holds more than ``threshold`` free bytes (after a young-generation
    garbage collection when ``collect``); True when memory went back.

    >>> release(0)  # doctest: +SKIP
    True
    """
    if collect:
        gc.collect(0)
    return release_free_heap(threshold)


class scope(ContextDecorator):  # a decorator and a ``with``, like contextlib's
    """A block or function whose freed memory goes back to the OS at its start and its end.

    >>> with scope():
    ...     x = [0] * 10
    """

    def __init__(self, threshold: int = 0, *, collect: bool = False):
        self.threshold = threshold
        self.collect = collect

    def __enter__(self) -> scope:
        release(self.threshold, collect=self.collect)
        return self

    def __exit__(self, *exc: Any) -> None:
        release(self.threshold, collect=self.collect)
