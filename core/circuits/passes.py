"""How an attribution graph's passes use the CPU: few targets per backward pass, sorted by layer.

A backward pass costs about its rows times the layers below its highest target, and most features an
influence-ranked graph keeps sit in low layers, so on the CPU each batch of targets (chosen together) runs as
passes of at most :data:`CPU_ROWS_PER_PASS` targets of nearby layers. Rows do not depend on the pass they run
in, so the graph is the same either way.

Example
-------
>>> run = replacement_pass(model, ids_1P, skips, rows_per_pass(model, batch_size))
"""

from __future__ import annotations

from ..model.model import Model

__all__ = ["CPU_ROWS_PER_PASS", "rows_per_pass"]

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
