"""The memory budget: how much one request may take, stated once and checked before anything is allocated.

A request's :class:`Estimate` counts what it returns (the padded tensor, every logit, every pattern, every
top-k slot) and its largest intermediate per row of a forward pass; :func:`fit_rows` splits a request
into batches that fit the budget, or refuses it before any work, naming the estimate, the budget and how
to reduce it. The default budget is 80% of the memory available when the request is made: the machine's
(or container's) memory less what is in use, the model's weights and every other process included.

Example
-------
>>> set_memory_budget("4GB")
4294967296
>>> format_bytes(1536)
'1.5 KB'
>>> fit_rows(Estimate("logits", output=2**30, per_row=2**28, rows=64), "Use fewer texts.")   # 1 GB back
8
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from ..checks import check_int


class MemoryBudgetError(MemoryError, ValueError):
    """A request whose memory would exceed the stated budget, refused before anything is allocated."""


_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "M": 1024**2, "MB": 1024**2, "G": 1024**3, "GB": 1024**3,
          "T": 1024**4, "TB": 1024**4}  # fmt: skip
_budget: list[int | None] = [None]
_FIX = "(ilab.set_memory_budget(...) or $INTERPLAB_MEMORY_BUDGET states another budget.)"


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


def _read_number(path: str, key: str | None = None) -> int | None:
    """An integer from a /proc or cgroup file (the value after ``key:`` in kB for /proc/meminfo), or None."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read()
    except OSError:
        return None
    if key is None:
        text = text.strip()
        return int(text) if text.isdigit() else None
    found = re.search(rf"^{key}:\s+(\d+) kB", text, re.MULTILINE)
    return int(found.group(1)) * 1024 if found else None


def _system_memory() -> int:
    """Physical memory, or the container's limit (cgroup) when lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 16 * 1024**3
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        value = _read_number(limit)
        if value is not None:
            total = min(total, value)
    return int(total)


def available_memory() -> int:
    """Memory a request can take now without the OOM killer: the kernel's ``MemAvailable`` (what is not in
    use by this process, its model's weights included, nor by any other), or the container's limit less its
    usage when lower; the machine's memory where neither can be read."""
    available = _read_number("/proc/meminfo", "MemAvailable")
    free = available if available is not None else _system_memory()
    v2, v1 = "/sys/fs/cgroup/memory.", "/sys/fs/cgroup/memory/memory."
    for limit, usage, cache in ((v2 + "max", v2 + "current", "inactive_file"),
                                (v1 + "limit_in_bytes", v1 + "usage_in_bytes", "total_inactive_file")):  # fmt: skip
        cap, used = _read_number(limit), _read_number(usage)
        if cap is not None and used is not None and cap < 2**60:
            reclaimable = _cgroup_stat(limit.rsplit("/", 1)[0], cache)  # page cache the kernel drops first
            free = min(free, max(cap - used + reclaimable, 0))
    return int(free)


def _cgroup_stat(folder: str, key: str) -> int:
    try:
        with open(f"{folder}/memory.stat", encoding="ascii") as f:
            found = re.search(rf"^{key} (\d+)$", f.read(), re.MULTILINE)
    except OSError:
        return 0
    return int(found.group(1)) if found else 0


def memory_budget() -> int:
    """Bytes one request may use: set by :func:`set_memory_budget` or ``$INTERPLAB_MEMORY_BUDGET``,
    else 80% of the memory available now (:func:`available_memory`: the machine's or container's memory
    less what the model, this process and every other process already hold)."""
    if _budget[0] is not None:
        return _budget[0]
    env = os.environ.get("INTERPLAB_MEMORY_BUDGET")
    if env:
        return parse_bytes(env, "INTERPLAB_MEMORY_BUDGET")
    return max(int(0.8 * available_memory()), 1)


def set_memory_budget(n_bytes: int | str | None) -> int:
    """State how much memory one request (a forward pass, a loaded file, an SAE) may take; None: the default
    (80% of the memory available when a request is made).

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
            f"{fix} {_FIX}"
        )


@dataclass(frozen=True)
class Estimate:
    """The memory of one request over ``rows`` rows (texts), counted before any work.

    ``output``: bytes of what the request returns (padded to its longest row), held ``copies`` times at the
    end (2: the batches' pieces and the assembled result; 1: batches written into the result);
    ``per_row``: bytes one row adds to the largest intermediate of a batch (its forward pass,
    full-vocabulary logits, attention patterns, copies to float32);
    ``fixed``: bytes needed once whatever the batch (buffers such as top-k slots).

    >>> Estimate("collect", output=2**20, per_row=2**10, rows=8).need(8)
    2105344
    """

    what: str
    output: int = 0
    per_row: int = 0
    rows: int = 1
    fixed: int = 0
    unit: str = "text"
    copies: int = 2

    def need(self, batch: int) -> int:
        """Bytes the request needs with ``batch`` rows per forward pass."""
        return int(self.copies * self.output + self.fixed + batch * self.per_row)

    def parts(self, batch: int) -> str:
        """What the estimate counts, for a message."""
        held = {1: "", 2: ", held twice while assembled"}.get(self.copies, f", held {self.copies} times")
        said = [f"{format_bytes(self.output)} returned{held}"] if self.output else []
        if self.fixed:
            said.append(f"{format_bytes(self.fixed)} of buffers")
        plural = self.unit if batch == 1 else f"{self.unit}s"
        said.append(f"{format_bytes(batch * self.per_row)} for a forward pass of {batch:,} {plural}")
        return "; ".join(said)


def fit_rows(estimate: Estimate, hint: str = "", split: bool = True, most: int | None = None) -> int:
    """The most rows per batch (up to ``most``, else ``estimate.rows``) whose estimate fits the memory budget.

    A request whose output and one row at a time do not fit, or (``split=False``) whose whole batch does
    not, is refused with a :class:`MemoryBudgetError` naming the estimate, what it counts, the budget and
    ``hint`` (how to reduce it), before any work.

    >>> set_memory_budget("4GB")
    4294967296
    >>> fit_rows(Estimate("logits", output=2**30, per_row=2**28, rows=64), "Use fewer texts.")
    8
    """
    budget = memory_budget()
    rows = max(min(int(estimate.rows), most or estimate.rows), 1)
    if estimate.need(rows) <= budget:
        return rows
    batch = rows if not split else 1
    if estimate.need(batch) > budget:
        at_once = " even one at a time" if split and rows > 1 else ""
        raise MemoryBudgetError(
            f"{estimate.what} would need about {format_bytes(estimate.need(batch))}{at_once} "
            f"({estimate.parts(batch)}), over the memory budget of {format_bytes(budget)}."
            f"{' ' + hint if hint else ''} {_FIX}"
        )
    return int(min(rows, max(1, (budget - estimate.need(0)) // max(estimate.per_row, 1))))
