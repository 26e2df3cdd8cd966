"""Atomic writes: a file or a whole folder is written under a temporary name beside its target, then renamed.

A reader sees the old version or the new one, never half of one. Every writer in interplab goes
through these helpers (``tests/contracts/test_writes.py`` checks it): :func:`atomic_path` (a file written by
any library), :func:`write_bytes` / :func:`write_text` / :func:`write_json`, :func:`write_safetensors`
(every ``.safetensors`` file), :func:`atomic_folder` (a folder swapped in whole) and :func:`make_dirs`.
Files and folders get the permissions the user's umask gives new ones (a temporary file starts private
and is opened up before it is renamed).

Folder swaps (:func:`atomic_folder`) and their readers (:func:`reading`, :func:`reads_folder`) take turns
on the parent folder's lock (:mod:`interplab.core.storage.locks`): a reader never sees the folder
missing or half-swapped, and nothing removes a live writer's temporary folder.

Crash safety. Data reaches the disk (``fsync``) before the rename that publishes it, and the
folder is synced after it, so a kill or a power cut at any instruction leaves either version.
What an interrupted write leaves behind is recognised by name (``.NAME.tmp-*``, ``.NAME.new``,
``.NAME.old``) and never blocks: :func:`clean_leftovers` removes unfinished files and finishes an
interrupted folder swap (:func:`recover`, which the next writer or reader of the folder runs).
A full disk raises :class:`DiskFullError` (:mod:`interplab.core.storage.space`) naming the file and the
space needed, with the old version kept.

Example
-------
>>> with atomic_path(Path("result.npz"), suffix=".npz") as tmp:
...     np.savez(tmp, values=values)
>>> write_json(Path("manifest.json"), {"n_tokens": 0})
>>> with atomic_folder(Path("my_sae")) as tmp:
...     (tmp / "cfg.json").write_text("{}")
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import torch

from .locks import folder_lock, is_abandoned, own_folder
from .space import DiskFullError, disk_full_error, free_space

#: Name parts that mark what an interrupted write leaves (see :func:`leftover_target`).
TMP_MARK, NEW_SUFFIX, OLD_SUFFIX = ".tmp-", ".new", ".old"
_LEFTOVER = re.compile(r"^\.(?P<name>.+?)(?:\.tmp-[^/]*|\.new|\.old)$")
_CHUNK = 16 * 1024 * 1024
_umask_lock = threading.Lock()
T = TypeVar("T")


def umask() -> int:
    """The process umask, read without changing it where the system allows (``/proc``), else under a lock."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    with _umask_lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: str | os.PathLike[str]) -> Path:
    """Create a folder and its parents (permissions from the umask); an existing folder is fine."""
    path = Path(path)
    os.makedirs(path, exist_ok=True)
    return path


def remove(path: str | os.PathLike[str]) -> None:
    """Remove a file or a folder tree if it is there."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _commit_file(tmp: Path, path: Path) -> None:
    _fsync_file(tmp)
    os.chmod(tmp, 0o666 & ~umask())  # mkstemp makes it private; new files follow the umask
    os.replace(tmp, path)
    _fsync_dir(path.parent)


#: A temporary file of a single-file write untouched for this long was left by a killed process.
STALE_SECONDS = 15 * 60


def clean_stale(path: str | os.PathLike[str], older_than: float = STALE_SECONDS) -> None:
    """Remove temporary files of earlier writes of ``path`` untouched for ``older_than`` seconds.

    A single file (labels, a result) may be written by several processes at once, so only stale
    temporaries go; a job's own folder is cleaned whole by :func:`clean_leftovers` when it starts.
    """
    path = Path(path)
    if not path.parent.is_dir():
        return
    now = time.time()
    for stray in path.parent.glob(f".{glob_escape(path.name)}{TMP_MARK}*"):
        with contextlib.suppress(OSError):
            if now - stray.stat().st_mtime > older_than:
                remove(stray)


@contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on error it is removed.

    ``suffix`` matters for writers that append their own extension (``np.savez`` adds ``.npz``).
    Temporaries that killed writes of ``path`` left long ago are removed first (:func:`clean_stale`).
    """
    path = Path(path)
    make_dirs(path.parent)
    clean_stale(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}{TMP_MARK}", suffix=suffix)
    os.close(fd)
    tmp = Path(name)
    try:
        try:
            yield tmp
            _commit_file(tmp, path)
        except OSError as err:
            raised = disk_full_error(err, path)
            if raised is err:
                raise
            raise raised from err
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def write_bytes(path: str | os.PathLike[str], data: bytes | memoryview) -> Path:
    """Write a binary file atomically; a full disk is refused before writing when the space is known short."""
    path = Path(path)
    view = memoryview(data).cast("B")
    make_dirs(path.parent)
    free = free_space(path.parent)
    if free is not None and free < len(view):
        raise DiskFullError(path, len(view), free)
    with atomic_path(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC)
        try:
            _write_all(fd, view)
        except OSError as err:
            raise disk_full_error(err, path, len(view)) from err
        finally:
            os.close(fd)
    return path


#: safetensors' dtype names, by torch dtype name.
_ST_DTYPE = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64", "int32": "I32",
             "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}  # fmt: skip


def write_safetensors(
    path: str | os.PathLike[str], tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None
) -> Path:
    """Write torch tensors as one safetensors file, atomically: the one writer of every ``.safetensors`` file.

    The file is streamed tensor by tensor (no second copy in memory) through the same writes as
    :func:`write_bytes`, so a full disk is a :class:`DiskFullError` naming ``path`` (refused before
    writing when the free space is known short) and the old file is kept. Tensors are laid out as
    the safetensors library lays them out (widest dtype first, then by name; header padded to 8 bytes).

    >>> write_safetensors("vector.safetensors", {"direction": v_D}, {"format": "interplab-steering-1"})
    """
    path = Path(path)
    items = sorted(((name, t.detach().to("cpu").contiguous()) for name, t in tensors.items()),
                   key=lambda item: (-item[1].element_size(), item[0]))  # fmt: skip
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, t in items:
        dtype = _ST_DTYPE.get(str(t.dtype).removeprefix("torch."))
        if dtype is None:
            raise TypeError(f"Tensor {name!r} has dtype {t.dtype}, which safetensors files here do not hold.")
        end = offset + t.numel() * t.element_size()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, end]}
        offset = end
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)
    total = 8 + len(head) + offset
    make_dirs(path.parent)
    free = free_space(path.parent)
    if free is not None and free < total:
        raise DiskFullError(path, total, free)
    with atomic_path(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC)
        try:
            _write_all(fd, len(head).to_bytes(8, "little") + head)
            for _, t in items:
                if t.numel():
                    _write_all(fd, memoryview(t.reshape(-1).view(torch.uint8).numpy()))
        except OSError as err:
            raise disk_full_error(err, path, total) from err
        finally:
            os.close(fd)
    return path


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data).cast("B")
    start = 0
    while start < len(view):
        start += os.write(fd, view[start : start + _CHUNK])


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write a UTF-8 text file atomically."""
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike[str], data: Any, indent: int | None = 1) -> Path:
    """Write JSON atomically (non-ASCII text kept as is; NaN and inf refused, they are not JSON)."""
    return write_text(path, json.dumps(data, indent=indent, ensure_ascii=False, allow_nan=False))


# ------------------------------------------------------------------ folders
def leftover_target(name: str) -> str | None:
    """The file or folder an interrupted write of ``name`` was for (``.x.tmp-1a2b`` -> ``x``), or None."""
    found = _LEFTOVER.match(name)
    return found.group("name") if found else None


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
        _fsync_dir(parent)
    if old.exists():
        if target.exists():
            remove(old)
        else:
            os.rename(old, target)
            _fsync_dir(parent)
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


def glob_escape(name: str) -> str:
    """``name`` with glob wildcards escaped."""
    return re.sub(r"([*?\[])", r"[\1]", name)


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
            _fsync_file(file)
            executable = 0o111 if os.stat(file).st_mode & 0o111 else 0
            os.chmod(file, (0o666 | executable) & ~mask)
        for name in dirs:
            os.chmod(Path(dirpath) / name, 0o777 & ~mask)
        _fsync_dir(Path(dirpath))


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
    _fsync_dir(parent)
    if target.exists():
        os.rename(target, old)
    os.rename(new, target)
    _fsync_dir(parent)
    shutil.rmtree(old, ignore_errors=True)
