"""Fault injection at the file operations of interplab's write path: a simulated kill at any of them.

Every file interplab writes goes through :mod:`interplab.core.storage.atomic` (``tests/contracts/test_writes.py``
checks it), so replacing the ``os``, ``shutil`` and ``tempfile`` that module sees reaches every
``open`` / ``write`` / ``fsync`` / ``chmod`` / ``replace`` / ``rename`` / ``unlink`` / ``makedirs``
/ ``mkstemp`` / ``mkdtemp`` / ``rmtree`` of every job. :class:`FileOps` counts them; with a kill
at step ``n`` the ``n``-th operation is torn like a real kill would tear it and raises
:class:`Killed`, and from then on every operation raises too (a dead process cleans nothing up):

* ``write``: half of the data reaches the file;
* ``rmtree``: half of the tree is removed;
* ``mkstemp`` / ``mkdtemp``: the temporary file or folder exists, empty;
* a data write by another library into a temporary file (``save_file``, ``np.save``): the step
  ``torn`` before the file is synced cuts it to half its length;
* ``rename`` / ``replace`` / ``unlink`` / ``chmod`` / ``fsync`` / ``makedirs`` / ``open``: not done.

``fsync`` is counted but never done (a simulated kill keeps the page cache; real syncs would make
the loops slow), so these tests are about kills, not power cuts.

Example
-------
>>> ops = FileOps()
>>> with ops.counting():
...     run()                          # ops.count: the file operations of an uninterrupted run
>>> with ops.kill_at(7), pytest.raises(Killed):
...     run()                          # dies at the 7th
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import interplab.core.storage.atomic as atomic
import pytest
from interplab.core.storage.atomic import files as atomic_files
from interplab.core.storage.atomic import folders as atomic_folders

#: The modules of interplab.core.storage.atomic that call the file system: a fault goes into each.
ATOMIC_MODULES = (atomic_files, atomic_folders)


def patch_atomic(m: pytest.MonkeyPatch, name: str, value: Any) -> None:
    """Replace the module ``name`` (``os``, ``shutil``, ``tempfile``) as every atomic helper sees it."""
    for module in ATOMIC_MODULES:
        m.setattr(module, name, value)


class Killed(BaseException):
    """A simulated process death (a BaseException, so no ``except Exception`` in the library catches it)."""


class _Proxy:
    """A module whose chosen functions are replaced; everything else is the real module's."""

    def __init__(self, real: Any, wrapped: dict[str, Callable[..., Any]]):
        self._real, self._wrapped = real, wrapped

    def __getattr__(self, name: str) -> Any:
        return self._wrapped.get(name) or getattr(self._real, name)


class FileOps:
    """Counts the file operations of the write path and kills one of them (see the module docstring)."""

    def __init__(self) -> None:
        self.count = 0
        self.kill = 0  # 0: never
        self.dead = False
        self.log: list[str] = []

    def _step(self, name: str, target: Any) -> bool:
        """Count one operation; True when it is the one to kill. A dead process fails every operation."""
        if self.dead:
            raise Killed(f"dead (after step {self.kill})")
        self.count += 1
        self.log.append(f"{name} {target}")
        if self.count == self.kill:
            self.dead = True
            return True
        return False

    def _die(self) -> None:
        raise Killed(f"killed at step {self.kill}: {self.log[-1]}")

    # ------------------------------------------------------------ wrappers
    def _os(self) -> _Proxy:
        real = os

        def simple(name: str) -> Callable[..., Any]:
            fn = getattr(real, name)

            def op(*args: Any, **kwargs: Any) -> Any:
                if self._step(name, args[0] if args else ""):
                    self._die()
                return fn(*args, **kwargs)

            return op

        def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> Any:
            p = Path(path)
            # just before a temporary file is synced: another library's write into it may be torn here
            if flags == os.O_RDONLY and p.is_file() and atomic.TMP_MARK in p.name and self._step("torn", path):
                size = p.stat().st_size
                with open(p, "r+b") as f:
                    f.truncate(size // 2)
                self._die()
            if self._step("open", path):
                self._die()
            return real.open(path, flags, *args, **kwargs)

        def write(fd: int, data: Any) -> int:
            if self._step("write", fd):
                real.write(fd, bytes(data[: len(data) // 2]))
                self._die()
            return real.write(fd, data)

        def fsync(fd: int) -> None:
            # counted, but not done: a simulated kill loses no page cache, and thousands of syncs on a busy
            # disk would make the kill loops take minutes
            if self._step("fsync", fd):
                self._die()

        names = ("close", "chmod", "replace", "rename", "unlink", "makedirs", "rmdir")
        return _Proxy(real, {"open": open_, "write": write, "fsync": fsync, **{n: simple(n) for n in names}})

    def _shutil(self) -> _Proxy:
        def rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
            if self._step("rmtree", path):
                files = sorted(p for p in Path(path).rglob("*") if p.is_file())
                for p in files[: len(files) // 2]:
                    p.unlink()
                self._die()
            shutil.rmtree(path, *args, **kwargs)

        return _Proxy(shutil, {"rmtree": rmtree})

    def _tempfile(self) -> _Proxy:
        def mkstemp(*args: Any, **kwargs: Any) -> Any:
            out = tempfile.mkstemp(*args, **kwargs)
            if self._step("mkstemp", out[1]):
                os.close(out[0])
                self._die()
            return out

        def mkdtemp(*args: Any, **kwargs: Any) -> Any:
            out = tempfile.mkdtemp(*args, **kwargs)
            if self._step("mkdtemp", out):
                self._die()
            return out

        return _Proxy(tempfile, {"mkstemp": mkstemp, "mkdtemp": mkdtemp})

    @contextlib.contextmanager
    def _patched(self) -> Iterator[FileOps]:
        with pytest.MonkeyPatch.context() as m:
            patch_atomic(m, "os", self._os())
            patch_atomic(m, "shutil", self._shutil())
            patch_atomic(m, "tempfile", self._tempfile())
            yield self

    def counting(self) -> contextlib.AbstractContextManager[FileOps]:
        """Count the operations of a run (no kill)."""
        self.count, self.kill, self.dead, self.log = 0, 0, False, []
        return self._patched()

    def kill_at(self, n: int) -> contextlib.AbstractContextManager[FileOps]:
        """Kill the run at its ``n``-th file operation (1-based)."""
        self.count, self.kill, self.dead, self.log = 0, n, False, []
        return self._patched()


def kill_at_every_step(
    run: Callable[[Path], Any],
    check: Callable[[Any, Path], None],
    folder: Path,
    twice: bool = False,
    before_resume: Callable[[Path], None] | None = None,
) -> int:
    """Kill ``run(path)`` at each of its file operations in turn, then run it again and ``check(result, path)``.

    ``run`` must be deterministic and write only under ``path`` (a fresh folder per kill). With
    ``twice`` the first resume is killed too, at the same step number when it gets that far,
    before the final resume; ``before_resume(path)`` runs just before it. Returns how many file
    operations an uninterrupted run makes (the number of kills tried).
    """
    ops = FileOps()
    with ops.counting():
        run(folder / "uninterrupted")
    total = ops.count
    assert total > 0, "the run wrote nothing through interplab.core.storage.atomic"
    for n in range(1, total + 1):
        path = folder / f"kill-{n:04d}"
        with ops.kill_at(n), pytest.raises(Killed):
            run(path)
        if twice:
            with ops.kill_at(n), contextlib.suppress(Killed):
                run(path)
        if before_resume is not None:
            before_resume(path)
        check(run(path), path)
    return total


def sigkill_when(
    code: str, ready: Callable[[], bool], *, args: tuple[str, ...] = (), env: dict[str, str] | None = None,
    jitter_s: float = 0.0, seed: int = 0, deadline_s: float = 120, what: str = "the awaited state"
) -> None:  # fmt: skip
    """Run ``python -c code *args`` from the repository root, SIGKILL it once ``ready()`` holds (after a seeded
    random wait of up to ``jitter_s``, so the kill lands anywhere, writes included), and check it died by it.

    Fails the test if the child exits first or ``ready()`` does not hold within ``deadline_s``.

    >>> sigkill_when(CHILD, lambda: (path / "checkpoint.safetensors").exists(), what="a checkpoint")
    """
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=root,
        env={**os.environ, "TQDM_DISABLE": "1"} if env is None else env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + deadline_s
        while not ready():
            if proc.poll() is not None:
                pytest.fail(f"child exited early ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"the child never reached {what}")
            time.sleep(0.01)
        if jitter_s:
            time.sleep(random.Random(seed).uniform(0, jitter_s))
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
