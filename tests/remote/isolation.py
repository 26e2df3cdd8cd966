"""Run nnsight's remote path in-process with interplab ABSENT where the trace body executes.

What ``remote="local"`` alone proves, and what it does not: nnsight's LocalSimulationBackend
serialises the trace body, then deserialises it with every module outside the server's
packages popped from ``sys.modules`` and every non-site-packages path hidden. Two things make
that miss an interplab object inside a body:

* interplab is an editable install whose import hook lives in site-packages, so a popped
  ``interplab.*`` module is simply imported again during deserialisation;
* ``nnsight.ndif.pull_env`` registers every importable folder that is not an installed
  distribution for by-value pickling; with the repository root on ``sys.path`` (pytest puts it
  there) that is ``core``, ``widgets`` and ``tests``, and in other set-ups it can be
  ``interplab`` itself, whose objects then travel as source and never need an import.

:func:`interplab_absent` closes both: while a trace deserialises, a meta-path hook refuses every
``interplab`` import (as a server without it would) and the by-value registry holds only
``interplab.core.model.trace_ops``, the one module interplab ships by value on purpose. Anything else
of interplab's named in a body (an SAE module, a Model, a module-level helper) then fails with
``ModuleNotFoundError: ... interplab`` exactly as on a real server; the rest of the run (before
and after the trace) still uses interplab normally.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from collections.abc import Iterator

import nnsight.ndif
from cloudpickle.cloudpickle import _PICKLE_BY_VALUE_MODULES
from nnsight.intervention.backends.local import LocalSimulationBackend

SHIPPED = "interplab.core.model.trace_ops"


class _RefuseInterplab(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.refused: list[str] = []

    def find_spec(self, name, path=None, target=None):
        if name == "interplab" or name.startswith("interplab."):
            self.refused.append(name)
            raise ModuleNotFoundError(f"No module named {name!r} (interplab is not on this server)", name=name)
        return None


@contextlib.contextmanager
def interplab_absent() -> Iterator[dict[str, int]]:
    """While active, every ``remote="local"`` trace deserialises as on a server without interplab.

    Yields a dict counting the traces that went through the isolated path (``"traces"``).
    """
    counts = {"traces": 0}
    original = LocalSimulationBackend._hide_local_modules
    finder = _RefuseInterplab()

    def hide(self):
        hidden = original(self)
        for name in [n for n in sys.modules if n == "interplab" or n.startswith("interplab.")]:
            hidden["modules"][name] = sys.modules.pop(name)
        sys.meta_path.insert(0, finder)
        counts["traces"] += 1
        return hidden

    original_restore = LocalSimulationBackend._restore

    def restore(self, hidden):
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        original_restore(self, hidden)

    pulled = nnsight.ndif._PULLED_ENV
    registered = set(_PICKLE_BY_VALUE_MODULES)
    nnsight.ndif.pull_env()  # what a real client registers; then keep only the module shipped on purpose
    nnsight.ndif._PULLED_ENV = True
    _PICKLE_BY_VALUE_MODULES.clear()
    _PICKLE_BY_VALUE_MODULES.add(SHIPPED)
    LocalSimulationBackend._hide_local_modules = hide
    LocalSimulationBackend._restore = restore
    try:
        yield counts
    finally:
        LocalSimulationBackend._hide_local_modules = original
        LocalSimulationBackend._restore = original_restore
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        _PICKLE_BY_VALUE_MODULES.clear()
        _PICKLE_BY_VALUE_MODULES.update(registered)
        nnsight.ndif._PULLED_ENV = pulled
