"""Atomic folder swaps: a folder is filled under a temporary name, then swapped into place whole.

Swaps (:func:`atomic_folder`) and their readers (:func:`reading`, :func:`reads_folder`) take turns on the
parent folder's lock (:mod:`interplab.core.storage.locks`): a reader never sees the folder missing or
half-swapped, and nothing removes a live writer's temporary folder. A swap a kill left split is finished by
the next writer or reader (:func:`recover`); :func:`clean_leftovers` clears a job's folder.

Example
-------
>>> with atomic_folder(Path("my_sae")) as tmp:
...     (tmp / "cfg.json").write_text("{}")
>>> with reading(Path("my_sae")) as folder:
...     cfg = read_json(folder / "cfg.json")
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ..locks import folder_lock, is_abandoned, own_folder
from ..space import DiskFullError, disk_full_error, free_space
from .files import (
    NEW_SUFFIX,
    OLD_SUFFIX,
    STALE_SECONDS,
    TMP_MARK,
    fsync_dir,
    fsync_file,
    glob_escape,
    leftover_target,
    make_dirs,
    remove,
    umask,
)

T = TypeVar("T")


def recover(path: str | os.PathLike[str]) -> None:
    """Finish or undo an interrupted folder swap of ``path`` so that exactly one complete version is there.

    Runs under the parent folder's exclusive lock (:func:`~interplab.core.storage.locks.folder_lock`),
    so no live swap is ever touched: a complete new folder (``.NAME.new``, renamed so only once it
    was whole) is moved into place; a moved-aside old one (``.NAME.old``) is removed, or put back if
    nothing replaced it; temporary folders (``.NAME.tmp-*``) whose writer is gone are removed, those
    of a live writer are left to it. Safe to call at any time, from any process.
    """
    target = Path(path)
    if not target.parent.is_dir():
        return
    with folder_lock(target.parent, exclusive=True) as held:
        _recover_locked(target, held)


def _split_swap(target: Path) -> bool:
    """Whether a folder swap of ``target`` was interrupted between its renames."""
    parent = target.parent
    return (parent / f".{target.name}{NEW_SUFFIX}").exists() or (parent / f".{target.name}{OLD_SUFFIX}").exists()


def _recover_locked(target: Path, held: bool) -> None:
    """:func:`recover`'s work; the caller holds the parent's exclusive lock (``held``: a real lock)."""
    parent = target.parent
    new, old = parent / f".{target.name}{NEW_SUFFIX}", parent / f".{target.name}{OLD_SUFFIX}"
    if new.is_dir():
        if target.exists():
            if old.exists():
                remove(old)
            os.rename(target, old)
        os.rename(new, target)
        fsync_dir(parent)
    if old.exists():
        if target.exists():
            remove(old)
        else:
            os.rename(old, target)
            fsync_dir(parent)
    now = time.time()
    for stray in parent.glob(f".{glob_escape(target.name)}{TMP_MARK}*"):
        if not stray.is_dir() or stray.is_symlink():
            continue
        with contextlib.suppress(OSError):
            if is_abandoned(stray) or (not held and now - stray.stat().st_mtime > STALE_SECONDS):
                remove(stray)


def reads_folder(arg: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorate a reader of a swapped folder: the folder named by its argument ``arg`` is held by :func:`reading`.

    >>> @reads_folder("path")
    ... def load(path): ...
    """

    def wrap(fn: Callable[..., T]) -> Callable[..., T]:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def held(*args: Any, **kwargs: Any) -> T:
            with reading(signature.bind(*args, **kwargs).arguments[arg]):
                return fn(*args, **kwargs)

        return held

    return wrap


@contextmanager
def reading(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold a swapped folder still while it is read: the old version or the new one, never none or a mix.

    The parent's lock is held shared for the block, so a writer's renames wait for the read to end
    (and the read for them). A swap that a killed writer left split is finished first. Nothing is
    written otherwise, and nothing of a live writer is touched.

    >>> with reading(Path("my_sae")) as folder:
    ...     cfg, weights = read_json(folder / "cfg.json"), read_safetensors(folder / "sae_weights.safetensors")
    """
    if not isinstance(path, (str, os.PathLike)):
        yield path  # not a path: the reader's own argument check names it
        return
    target = Path(path)
    if not target.parent.is_dir():
        yield target
        return
    with folder_lock(target.parent):
        split = _split_swap(target)
        if not split:
            yield target
            return
    with folder_lock(target.parent, exclusive=True) as held:
        _recover_locked(target, held)
    with folder_lock(target.parent):
        yield target


def clean_leftovers(folder: str | os.PathLike[str]) -> list[str]:
    """Remove what interrupted writes left in ``folder`` and finish interrupted folder swaps (see :func:`recover`).

    Call it where a long job starts, on the job's own folder (one writer at a time): temporary files of
    single-file writes go at once; temporary folders only once their writer is gone. Returns the
    names of the targets it touched.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(p, t) for p in folder.iterdir() if (t := leftover_target(p.name)) is not None]
    for stray, _ in found:
        if TMP_MARK in stray.name and not stray.is_dir():
            remove(stray)
    targets = sorted({t for _, t in found})
    for name in targets:
        recover(folder / name)
    return targets


def _finish_tree(root: Path) -> None:
    """Sync every file of a folder about to be published and give each the mode the umask gives new ones.

    Some writers create private files whatever the umask (safetensors' ``save_file`` makes them 0600);
    a file that was executable stays executable.
    """
    mask = umask()
    for dirpath, dirs, files in os.walk(root):
        for name in files:
            file = Path(dirpath) / name
            fsync_file(file)
            executable = 0o111 if os.stat(file).st_mode & 0o111 else 0
            os.chmod(file, (0o666 | executable) & ~mask)
        for name in dirs:
            os.chmod(Path(dirpath) / name, 0o777 & ~mask)
        fsync_dir(Path(dirpath))


@contextmanager
def atomic_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on success it replaces ``path`` whole.

    The protocol every swapped folder follows (SAEs, feature data, graphs, results):

    1. the temporary folder ``.NAME.tmp-*`` is created and locked as this writer's
       (:func:`~interplab.core.storage.locks.own_folder`), under the parent's shared lock;
    2. the writer fills it with no lock held (as long as it takes);
    3. under the parent's **exclusive** lock (readers of :func:`reading` hold it shared, so none is
       mid-read): a split swap a killed writer left is finished and abandoned temporaries removed
       (:func:`recover`), then ``tmp -> .NAME.new`` (complete), ``NAME -> .NAME.old``,
       ``.NAME.new -> NAME``, and the old version removed.

    A kill between any two renames is finished by the next writer or reader. On error the temporary
    folder is removed and ``path`` is left as it was.
    """
    target = Path(path)
    parent = make_dirs(target.parent)
    with folder_lock(parent):
        work = Path(tempfile.mkdtemp(prefix=f".{target.name}{TMP_MARK}", dir=parent))
        owned = own_folder(work)
    try:
        try:
            yield work
            _finish_tree(work)
            os.chmod(work, 0o777 & ~umask())  # mkdtemp makes it private; new folders follow the umask
        except OSError as err:
            full = err if isinstance(err, DiskFullError) else disk_full_error(err, target)
            if not isinstance(full, DiskFullError):
                raise
            raise DiskFullError(target, full.needed, free_space(parent) or 0) from err  # named by the folder
        with folder_lock(parent, exclusive=True) as held:
            _recover_locked(target, held)
            _swap_in(work, target)
    finally:
        owned.release()
        shutil.rmtree(work, ignore_errors=True)


def _swap_in(work: Path, target: Path) -> None:
    """The renames that publish a finished folder (the caller holds the parent's exclusive lock)."""
    parent = target.parent
    new, old = parent / f".{target.name}{NEW_SUFFIX}", parent / f".{target.name}{OLD_SUFFIX}"
    os.rename(work, new)
    fsync_dir(parent)
    if target.exists():
        os.rename(target, old)
    os.rename(new, target)
    fsync_dir(parent)
    shutil.rmtree(old, ignore_errors=True)
