"""Dropping a memory-mapped tensor's pages from the process once read, so a full pass over it stays small.

The embedded model's weights are memory-mapped from its safetensors file. Pages of a mapped file
count in the process's resident size (and in its high-water mark ``VmHWM``) once read, and stay
there: one full-vocabulary readout reads the whole 262,144 x 640 unembedding (0.34 GB in bfloat16)
and a notebook kernel carries it from then on. :func:`release_pages` tells the kernel this process
no longer needs the pages behind a tensor (``madvise(MADV_DONTNEED)``); they stay in the page cache,
so the next read maps them again without touching the disk. Reading a large tensor slice by slice,
releasing each slice after use, holds one slice at a time.

Only pages that are still the file's own are dropped: :func:`release_pages` reads the process's page
map (``/proc/self/pagemap``) and leaves a range alone when any page in it is anonymous (a weight
written in place, a copy-on-write page, an ordinary tensor), so nothing is ever lost. Elsewhere than
Linux it does nothing.

>>> import torch
>>> from interplab.core.memory.pages import release_pages
>>> release_pages(torch.zeros(1024))   # an ordinary tensor: left alone
0
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import mmap

import numpy as np
import torch

_PAGE = mmap.PAGESIZE
_MADV_DONTNEED = 4
_PRESENT, _SWAPPED, _FILE = 1 << 63, 1 << 62, 1 << 61


@functools.cache
def _madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.madvise
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        fn.restype = ctypes.c_int
        return fn
    return None


def _file_mapped_ranges() -> list[tuple[int, int]]:
    """``(start, end)`` of each file-backed mapping of this process (``/proc/self/maps``)."""
    ranges = []
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6 and fields[5].startswith("/") and fields[4] != "0":
                    start, end = (int(x, 16) for x in fields[0].split("-"))
                    ranges.append((start, end))
    except OSError:
        return []
    return ranges


def is_file_mapped(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s memory lies in a file mapping (a memory-mapped weight), on the CPU."""
    if tensor.device.type != "cpu" or tensor.numel() == 0 or _madvise() is None:
        return False
    start = tensor.data_ptr()
    end = start + tensor.untyped_storage().nbytes() - tensor.storage_offset() * tensor.element_size()
    return any(a <= start and end <= b for a, b in _file_mapped_ranges())


def _only_file_pages(first_page: int, n_pages: int) -> bool:
    """Whether every present page in the range is the mapped file's own (none anonymous or swapped)."""
    try:
        with open("/proc/self/pagemap", "rb") as f:
            f.seek(first_page * 8)
            raw = f.read(n_pages * 8)
    except OSError:
        return False
    if len(raw) != n_pages * 8:
        return False
    flags = np.frombuffer(raw, dtype=np.uint64)
    present = (flags & np.uint64(_PRESENT | _SWAPPED)) != 0
    return bool(((flags[present] & np.uint64(_FILE)) != 0).all())


def release_pages(tensor: torch.Tensor) -> int:
    """Drop the whole pages inside a contiguous, memory-mapped ``tensor`` from this process's resident memory.

    Returns the bytes released (0 when the tensor is not file-mapped, not contiguous, smaller than a
    page, or holds any page that is not the file's own). The data stays readable: the pages come back
    from the page cache on the next read.
    """
    madvise = _madvise()
    if madvise is None or tensor.device.type != "cpu" or not tensor.is_contiguous():
        return 0
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    first, last = -(-start // _PAGE), end // _PAGE  # whole pages only: a neighbour's data is never dropped
    if last <= first or not _only_file_pages(first, last - first):
        return 0
    length = (last - first) * _PAGE
    if madvise(ctypes.c_void_p(first * _PAGE), ctypes.c_size_t(length), _MADV_DONTNEED) != 0:
        return 0
    return length
