"""One lock per model: nnsight traces, generations and torch-hook runs of the same model take turns.

nnsight runs a trace by switching between greenlets of the thread that opened it, so a forward of
the same modules from another thread while it runs fails ("parent cannot be on a different thread").
Every nnsight run goes through ``Envoy.interleave``: it is wrapped once, for all envoys, to hold the
lock registered for the envoy's torch module. :attr:`interplab.Model.lock` is that lock; the steering
panel's torch-hook generations hold it too.

Example
-------
>>> with run_lock(model.nn):      # what ``with model.lock:`` does
...     model.module(**inputs)
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch
from nnsight.intervention.envoy import Envoy

#: The lock of each model's runs, by its torch module (never stored on the model or the module: both
#: travel in remote requests and copies, and a lock neither pickles nor copies).
_LOCKS: weakref.WeakKeyDictionary[torch.nn.Module, threading.RLock] = weakref.WeakKeyDictionary()


def run_lock(nn: Any) -> threading.RLock:
    """The lock every run of ``nn`` holds (one per torch model, shared by every Model built on it).

    nnsight runs every trace, generation and scan (local or ``remote="local"``) through
    ``Envoy.interleave``; it is wrapped once, for all envoys, to hold the lock registered for the
    envoy's torch module while the run is interleaved. Envoys of other models run unchanged.
    """
    _lock_interleave()
    module = getattr(nn, "_module", None)
    if module is None:  # nothing to run (a Model built without an nnsight model): a lock nobody else holds
        return threading.RLock()
    if module not in _LOCKS:
        _LOCKS[module] = threading.RLock()
    return _LOCKS[module]


def _lock_interleave() -> None:
    run = Envoy.interleave
    if getattr(run, "_interplab_locked", False):
        return

    def interleave(self: Envoy, *args: Any, **kwargs: Any) -> Any:
        lock = _LOCKS.get(self.__dict__.get("_module"))
        if lock is None:
            return run(self, *args, **kwargs)
        with lock:
            return run(self, *args, **kwargs)

    interleave.__doc__ = run.__doc__
    interleave._interplab_locked = True  # type: ignore[attr-defined]
    Envoy.interleave = interleave
