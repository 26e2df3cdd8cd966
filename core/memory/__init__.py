"""Memory: the budget one request may take, giving freed heap and file-mapped pages back to the OS, and the
paged unembedding that reads a large vocabulary a slice at a time.

Example
-------
>>> from interplab.core.memory import format_bytes, set_memory_budget
>>> format_bytes(set_memory_budget("4GB"))
'4.0 GB'
"""

from .budget import MemoryBudgetError, check_memory, format_bytes, memory_budget, parse_bytes, set_memory_budget
from .freeing import release, scope
from .frozen import frozen_weights
from .heap import release_free_heap
from .pages import release_pages

__all__ = [
    "MemoryBudgetError",
    "check_memory",
    "format_bytes",
    "frozen_weights",
    "memory_budget",
    "parse_bytes",
    "release",
    "release_free_heap",
    "release_pages",
    "scope",
    "set_memory_budget",
]
