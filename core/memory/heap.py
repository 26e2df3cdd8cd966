"""Giving freed memory back to the operating system (glibc), so a kernel's resident size falls after work.

glibc keeps memory that tensors freed inside its arenas (one per thread that allocated: nnsight runs
trace bodies in a thread of their own) and reuses it later; the process's resident size does not fall.
After an SAE evaluation on the embedded model that held memory is 100-150 MB, and it piles up under a
notebook's next cells (Binder allows 2 GB for the whole container). :func:`release_free_heap` asks glibc
how much it holds free (``mallinfo2``, cheap) and only then trims (``malloc_trim``: about 10 ms when
there is memory to give back, microseconds after), so frequent callers pay almost nothing.
Elsewhere (macOS, musl) it does nothing.

glibc also moves its threshold for serving a request from ``mmap`` (returned to the OS at ``free``) up
to the largest mmapped block freed so far, up to 32 MB: after SAE training freed a few large tensors,
the 16 MB [rows, vocabulary] scores of an evaluation came from the heap, fragmented it and lifted a
notebook kernel's peak by 0.25-0.45 GB in one run of four (which one depended on ``PYTHONHASHSEED``).
:func:`pin_mmap_threshold` fixes the threshold (16 MB by default), which also stops the adjustment;
interplab does not call it by default: every large temporary then costs fresh page faults, and a CI run
with it pinned by ``load_model`` took 24 minutes of tests instead of 13-16 (not yet measured apart).

>>> from interplab.core.memory.heap import release_free_heap
>>> release_free_heap()   # True when memory was given back
False
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

#: Free memory glibc may keep before :func:`release_free_heap` trims it.
TRIM_ABOVE_BYTES = 64 * 1024**2
#: Blocks of at least this size are mmapped by glibc (and unmapped at free) once :func:`pin_mmap_threshold` ran.
MMAP_THRESHOLD_BYTES = 16 * 1024**2
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        return libc
    except (OSError, AttributeError):  # not glibc >= 2.33
        return None


def free_heap_bytes() -> int:
    """Bytes glibc holds free in its arenas (0 where that cannot be asked)."""
    libc = _libc()
    return int(libc.mallinfo2().fordblks) if libc is not None else 0


def release_free_heap(threshold: int = TRIM_ABOVE_BYTES) -> bool:
    """Give freed heap memory back to the OS when glibc holds more than ``threshold`` bytes free."""
    libc = _libc()
    if libc is None or libc.mallinfo2().fordblks <= threshold:
        return False
    return bool(libc.malloc_trim(0))


def pin_mmap_threshold(nbytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Serve every allocation of ``nbytes`` or more by ``mmap`` from now on, and stop glibc moving that threshold.

    Returns whether glibc took it (False elsewhere). Process-wide, as ``MALLOC_MMAP_THRESHOLD_`` would be.
    """
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(nbytes)))
