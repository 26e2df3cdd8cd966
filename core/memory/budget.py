"""The memory budget: how much one request may take, stated once and checked before anything is allocated.

Example
-------
>>> set_memory_budget("4GB")
4294967296
>>> format_bytes(1536)
'1.5 KB'
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..checks import check_int


class MemoryBudgetError(MemoryError, ValueError):
    """A request whose memory would exceed the stated budget, refused before anything is allocated."""


_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "M": 1024**2, "MB": 1024**2, "G": 1024**3, "GB": 1024**3,
          "T": 1024**4, "TB": 1024**4}  # fmt: skip
_budget: list[int | None] = [None]


def parse_bytes(value: Any, what: str = "memory budget") -> int:
    """A positive byte count from an int or a string such as ``"4GB"`` / ``"512 MB"``."""
    if isinstance(value, str):
        found = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?B?)\s*", value.upper())
        if not found:
            raise ValueError(f"{what} must be a number of bytes or a size such as '4GB', got {value!r}.")
        n = int(float(found.group(1)) * _UNITS[found.group(2)])
    else:
        n = check_int(what, value, minimum=1)
    if n < 1:
        raise ValueError(f"{what} must be positive, got {value!r}.")
    return n


def _system_memory() -> int:
    """Physical memory, or the container's limit (cgroup) when lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 16 * 1024**3
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit, encoding="ascii") as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return int(total)


def memory_budget() -> int:
    """Bytes one request may use: set by :func:`set_memory_budget` or ``$INTERPLAB_MEMORY_BUDGET``,
    else 80% of the machine's (or container's) memory."""
    if _budget[0] is not None:
        return _budget[0]
    env = os.environ.get("INTERPLAB_MEMORY_BUDGET")
    if env:
        return parse_bytes(env, "INTERPLAB_MEMORY_BUDGET")
    return int(0.8 * _system_memory())


def set_memory_budget(n_bytes: int | str | None) -> int:
    """State how much memory one request (a forward pass, a loaded file, an SAE) may take; None: the default.

    Requests estimated above it are refused (or split, where they can be) with a message before any
    work. Returns the budget now in force.

    >>> set_memory_budget("4GB")
    4294967296
    """
    _budget[0] = None if n_bytes is None else parse_bytes(n_bytes)
    return memory_budget()


def format_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KB"``."""
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{int(n)} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PB"


def check_memory(what: str, n_bytes: float, hint: str = "") -> None:
    """Refuse ``what`` when it would take more than the memory budget, naming both and how to change it.

    >>> check_memory("SAE.create(d_sae=10**12)", 5e15)
    Traceback (most recent call last):
    MemoryBudgetError: SAE.create(d_sae=10**12) would need about 4.4 PB, over the memory budget of ...
    """
    budget = memory_budget()
    if n_bytes > budget:
        fix = f" {hint}" if hint else ""
        raise MemoryBudgetError(
            f"{what} would need about {format_bytes(n_bytes)}, over the memory budget of {format_bytes(budget)}."
            f"{fix} (ilab.set_memory_budget(...) or $INTERPLAB_MEMORY_BUDGET states another budget.)"
        )
