"""Bad inputs of the memory budget: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from interplab.core.memory.budget import set_memory_budget

import interplab as ilab
from tests.contracts.rows import Row, V


def under_budget(size: str, call: Callable[[], Any]) -> Any:
    """``call()`` under a memory budget of ``size``; the default budget again afterwards."""
    set_memory_budget(size)
    try:
        return call()
    finally:
        set_memory_budget(None)


ROWS: list[Row] = [
    Row(
        "ilab.set_memory_budget",
        lambda c: ilab.set_memory_budget("lots"),
        V,
        "must be a number of bytes or a size such as '4GB', got 'lots'",
    ),
    Row("ilab.set_memory_budget", lambda c: ilab.set_memory_budget(-5), V, "must be a positive integer, got -5"),
]
