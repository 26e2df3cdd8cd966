"""Freed heap memory goes back to the OS after traces (core/heap.py)."""

from __future__ import annotations

import sys

import pytest
import torch
from interplab.core.heap import free_heap_bytes, release_free_heap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def test_freed_heap_is_given_back():
    # 1,500 tensors of 64 KB (under glibc's mmap threshold: they live in its heap), then all but the
    # last freed: the last one pins the heap's top, so glibc keeps the ~95 MB below it free but resident.
    blocks = [torch.ones(16_000) for _ in range(1_500)]
    keep = torch.ones(16_000)
    del blocks
    held, before = free_heap_bytes(), _rss_mb()
    assert held > 80 * 1024**2, held
    assert not release_free_heap(threshold=held + 1)  # under the threshold nothing is done
    assert release_free_heap()
    assert _rss_mb() < before - 60, (before, _rss_mb())  # the pages left; glibc still counts them free
    del keep
