"""How an attribution graph's passes use the CPU: few targets per backward pass, one intra-op thread.

A backward pass costs about its rows times the layers below its highest target, and most features an
influence-ranked graph keeps sit in low layers, so on the CPU each batch of targets (chosen together) runs as
passes of at most :data:`CPU_ROWS_PER_PASS` targets of nearby layers. Those passes, the replacement pass and
the sources are many small operations, run on one thread (:func:`cpu_threads`). Rows do not depend on the pass
they run in, so the graph is the same either way.

Example
-------
>>> with cpu_threads(model):
...     run = replacement_pass(model, ids_1P, skips, rows_per_pass(model, batch_size))
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from ..model.model import Model

__all__ = ["CPU_ROWS_PER_PASS", "cpu_threads", "rows_per_pass"]

#: Targets per backward pass on the CPU (``batch_size`` targets are still chosen together): a pass costs about its
#: rows times the layers below its highest target, and most features sit in low layers, so small passes of
#: targets sorted by layer skip most of the work (a graph of 512 features on the embedded model: about 0.4x the
#: row-layers of passes of 32). On an accelerator one wide pass is cheaper.
CPU_ROWS_PER_PASS = 8


def rows_per_pass(model: Model, batch_size: int) -> int:
    """The replacement pass's copies of the prompt: ``batch_size``, at most :data:`CPU_ROWS_PER_PASS` on the CPU.

    >>> rows_per_pass(model, 32)   # 8 on the CPU, 32 on an accelerator
    """
    return min(batch_size, CPU_ROWS_PER_PASS) if model.device.type == "cpu" else batch_size


@contextmanager
def cpu_threads(model: Model) -> Iterator[None]:
    """On the CPU the replacement pass and the backward passes run on one intra-op thread (torch's count restored
    after): their operations are too small to split, and each split one waits for every thread, on a busy
    machine for threads the system has not scheduled (2 threads under load 5 on 2 cores: the replacement pass
    4.6-10 s and a 128-node graph 16.6 s, against 1.97 s for the graph on one thread).

    >>> with cpu_threads(model):
    ...     run = replacement_pass(model, ids_1P, skips, rows_per_pass(model, 32))
    """
    before = torch.get_num_threads()
    if model.device.type == "cpu":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
