"""Atomic writes: a file or a whole folder is written under a temporary name beside its target, then renamed.

A reader sees the old version or the new one, never half of one. Every writer in interplab goes
through these helpers (``tests/contracts/test_writes.py`` checks it): :func:`atomic_path` (a file written by
any library), :func:`write_bytes` / :func:`write_text` / :func:`write_json`, :func:`atomic_folder`
(a folder swapped in whole) and :func:`make_dirs`. Files and folders get the permissions the
user's umask gives new ones (a temporary file starts private and is opened up before it is renamed).

Crash safety. Data reaches the disk (``fsync``) before the rename that publishes it, and the
folder is synced after it, so a kill or a power cut at any instruction leaves either version.
What an interrupted write leaves behind is recognised by name (``.NAME.tmp-*``, ``.NAME.new``,
``.NAME.old``) and never blocks: :func:`clean_leftovers` removes unfinished files and finishes an
interrupted folder swap (:func:`recover`), which every reader of a swapped folder calls first.
A full disk raises :class:`DiskFullError` naming the file and the space needed, with the old
version kept.

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
import errno
import json
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: Name parts that mark what an interrupted write leaves (see :func:`leftover_target`).
TMP_MARK, NEW_SUFFIX, OLD_SUFFIX = ".tmp-", ".new", ".old"
_LEFTOVER = re.compile(r"^\.(?P<name>.+?)(?:\.tmp-[^/]*|\.new|\.old)$")
_CHUNK = 16 * 1024 * 1024
_umask_lock = threading.Lock()


class DiskFullError(OSError):
    """Not enough disk space for a write; nothing was replaced (an ``OSError`` with ``errno.ENOSPC``)."""

    def __init__(self, path: Path, needed: int | None, free: int):
        need = f" needs about {_size(needed)} and" if needed else ""
        super().__init__(
            errno.ENOSPC,
            f"The disk is full: writing {str(path)!r}{need} only {_size(free)} are free. Nothing was replaced "
            "(the previous version and any checkpoint are kept); free some space and run the same call again.",
        )
        self.path = path


def _size(n: int | None) -> str:
    value = float(n or 0)
    for unit in ("bytes", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"


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


def _disk_error(err: OSError, path: Path, needed: int | None = None) -> OSError:
    """``err`` as a :class:`DiskFullError` when the disk (or quota) is full, else ``err`` itself."""
    if isinstance(err, DiskFullError):
        return err
    full = err.errno in (errno.ENOSPC, errno.EDQUOT)
    # numpy reports a short write as "N requested and M written" with no errno
    full = full or (err.errno is None and "requested and" in str(err) and "written" in str(err))
    if not full:
        return err
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        free = 0
    return DiskFullError(path, needed, free)


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
            raised = _disk_error(err, path)
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
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        free = None
    if free is not None and free < len(view):
        raise DiskFullError(path, len(view), free)
    with atomic_path(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC)
        try:
            start = 0
            while start < len(view):
                start += os.write(fd, view[start : start + _CHUNK])
        except OSError as err:
            raise _disk_error(err, path, len(view)) from err
        finally:
            os.close(fd)
    return path


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
    """Finish or undo an interrupted write of ``path`` so that exactly one complete version is there.

    A complete new folder (``.NAME.new``, renamed so only once it was whole) is moved into place;
    a moved-aside old one (``.NAME.old``) is removed, or put back if nothing replaced it;
    unfinished temporaries (``.NAME.tmp-*``) are removed. Safe to call at any time.
    """
    target = Path(path)
    parent = target.parent
    if not parent.is_dir():
        return
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
    for stray in parent.glob(f".{glob_escape(target.name)}{TMP_MARK}*"):
        remove(stray)


def glob_escape(name: str) -> str:
    """``name`` with glob wildcards escaped."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def clean_leftovers(folder: str | os.PathLike[str]) -> list[str]:
    """Remove what interrupted writes left in ``folder`` and finish interrupted folder swaps (see :func:`recover`).

    Call it where a long job starts, on the job's own folder (one writer at a time). Returns the
    names of the targets it touched.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    targets = sorted({t for p in folder.iterdir() if (t := leftover_target(p.name)) is not None})
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

    The finished folder is renamed to ``.NAME.new`` (so it is known to be complete), the old one
    moved aside to ``.NAME.old``, the new one renamed into place and the old one removed. A kill
    between any two of these steps is finished by :func:`recover` (called here first, and by the
    readers of swapped folders). On error the temporary folder is removed and ``path`` is left as it was.
    """
    target = Path(path)
    parent = make_dirs(target.parent)
    recover(target)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}{TMP_MARK}", dir=parent))
    new, old = parent / f".{target.name}{NEW_SUFFIX}", parent / f".{target.name}{OLD_SUFFIX}"
    try:
        try:
            yield work
            _finish_tree(work)
            os.chmod(work, 0o777 & ~umask())  # mkdtemp makes it private; new folders follow the umask
            os.rename(work, new)
        except OSError as err:
            raised = _disk_error(err, target)
            if raised is err:
                raise
            raise raised from err
        _fsync_dir(parent)
        if target.exists():
            os.rename(target, old)
        os.rename(new, target)
        _fsync_dir(parent)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
