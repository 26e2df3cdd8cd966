"""One lock per model: nnsight traces, generations and torch-hook runs of the same model take turns.

nnsight keeps one run's state per model (its ``Interleaver``: the workers of the trace, whether it is
running) and runs a trace by switching between greenlets of the thread that opened it, so two threads
tracing one model mix their workers and fail ("UnboundLocalError: 'saved'", "parent cannot be on a
different thread"). Three patches of nnsight, made once on import, make every run of a model take
turns, whoever writes the trace:

* ``InterleavingTracer.__exit__`` (where every ``with model.nn.trace(...)``, ``generate``, ``scan`` and
  ``session`` body runs: workers registered, invokes collected, the model run) holds the model's lock;
* ``Envoy.interleave`` (the one-shot ``trace=False`` run and every traced run) holds it too;
* ``Interleaver.interleaving`` is true only in the thread running the trace, so another thread's
  ``model.nn.generate(...)`` opens a trace of its own (and waits for the lock) instead of being taken
  for a call inside the running trace, and its plain forwards pass the other thread's hooks by.

:attr:`interplab.Model.lock` is that lock (re-entrant: a trace inside a held lock, or inside a trace,
goes on); the steering panel's torch-hook generations hold it too.

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
from nnsight.intervention.interleaver import Interleaver
from nnsight.intervention.tracer import InterleavingTracer

#: The lock of each model's runs, by its torch module (never stored on the model or the module: both
#: travel in remote requests and copies, and a lock neither pickles nor copies).
_LOCKS: weakref.WeakKeyDictionary[torch.nn.Module, threading.RLock] = weakref.WeakKeyDictionary()
#: The same locks by the interleaver of the model's envoy tree (a trace opened on any envoy of the tree).
_BY_INTERLEAVER: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()


def run_lock(nn: Any) -> threading.RLock:
    """The lock every run of ``nn`` holds (one per torch model, shared by every Model built on it).

    >>> run_lock(model.nn) is model.lock
    True
    """
    module = getattr(nn, "_module", None)
    if module is None:  # nothing to run (a Model built without an nnsight model): a lock nobody else holds
        return threading.RLock()
    if module not in _LOCKS:
        _LOCKS[module] = threading.RLock()
    lock = _LOCKS[module]
    interleaver = getattr(nn, "interleaver", None)
    if interleaver is not None:
        _BY_INTERLEAVER[interleaver] = lock
    return lock


def lock_of(envoy: Any) -> threading.RLock | None:
    """The run lock registered for the model an envoy belongs to, or None (a model no Model was built on)."""
    if envoy is None:
        return None
    lock = _LOCKS.get(envoy.__dict__.get("_module"))
    if lock is None:
        lock = _BY_INTERLEAVER.get(envoy.__dict__.get("interleaver"))
    return lock


class _RunningThread:
    """``Interleaver.interleaving`` as a data descriptor: true only in the thread that started the run."""

    def __get__(self, interleaver: Any, owner: type | None = None) -> Any:
        if interleaver is None:
            return self
        return interleaver.__dict__.get("_interplab_running_thread") == threading.get_ident()

    def __set__(self, interleaver: Any, running: bool) -> None:
        interleaver.__dict__["_interplab_running_thread"] = threading.get_ident() if running else None


def _install() -> None:
    if getattr(Envoy.interleave, "_interplab_locked", False):
        return
    interleave, tracer_exit = Envoy.interleave, InterleavingTracer.__exit__

    def locked_interleave(self: Envoy, *args: Any, **kwargs: Any) -> Any:
        lock = lock_of(self)
        if lock is None:
            return interleave(self, *args, **kwargs)
        with lock:
            return interleave(self, *args, **kwargs)

    def locked_exit(self: InterleavingTracer, *exc: Any) -> bool:
        lock = lock_of(self.envoy)
        if lock is None:
            return tracer_exit(self, *exc)
        with lock:
            return tracer_exit(self, *exc)

    patched: Any
    for patched, original in ((locked_interleave, interleave), (locked_exit, tracer_exit)):
        patched.__doc__ = original.__doc__
        patched._interplab_locked = True
    Envoy.interleave = locked_interleave
    setattr(InterleavingTracer, "__exit__", locked_exit)  # noqa: B010 - a method replaced on the class
    setattr(Interleaver, "interleaving", _RunningThread())  # noqa: B010 - an attribute made a descriptor


_install()
