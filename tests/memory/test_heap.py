"""Freed heap memory goes back to the OS after traces (core/memory/heap.py)."""

from __future__ import annotations

import sys

import pytest
import torch
from interplab.core.memory.heap import free_heap_bytes, release_free_heap

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


def _in_brk_heap(address: int) -> bool:
    """Whether ``address`` lies in the main arena's ``[heap]`` (brk) mapping: freed there, it stays resident."""
    with open("/proc/self/maps") as f:
        for line in f:
            if line.rstrip().endswith("[heap]"):
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                if start <= address < end:
                    return True
    return False


def test_large_blocks_stay_mmapped_after_larger_ones_were_freed():
    """glibc raises its mmap threshold to the largest mmapped block freed (up to 32 MB); pinned, a 16 MB
    [rows, vocabulary] score tensor made after SAE training is mmapped, not taken from the heap (where it would
    fragment it and lift nbs/02's kernel by 0.25-0.45 GB in one run of four)."""
    import subprocess

    probe = (
        "import torch, sys\n"
        "from interplab.core.memory.heap import pin_mmap_threshold\n"
        "if sys.argv[1] == 'pinned': assert pin_mmap_threshold()\n"
        "x = torch.empty(30 * 2**20, dtype=torch.uint8)\n"
        "del x  # freed: glibc's dynamic threshold rises to 30 MB\n"
        "t = torch.empty(20 * 2**20, dtype=torch.uint8)\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from test_heap import _in_brk_heap\n"
        "print(_in_brk_heap(t.data_ptr()))\n"
    )
    here = str(__import__("pathlib").Path(__file__).parent)
    run = lambda mode: subprocess.run([sys.executable, "-c", probe, mode, here], capture_output=True, text=True,  # noqa: E731
                                      check=True).stdout.strip()  # fmt: skip
    assert run("default") == "True"  # unpinned, a fresh process puts the 20 MB block in the heap
    assert run("pinned") == "False"  # mmapped: unmapped again when freed
