"""Atomic file writes: a file is written under a temporary name beside its target, synced, then renamed.

A reader sees the old version or the new one, never half of one: :func:`atomic_path` (a file written by any
library), :func:`write_bytes` / :func:`write_text` / :func:`write_json`, :func:`write_safetensors` (every
``.safetensors`` file) and :func:`make_dirs`. A file gets the permissions the user's umask gives new ones (a
temporary file starts private and is opened up before it is renamed). What an interrupted write leaves is
recognised by name (:func:`leftover_target`); stale temporaries of single-file writes go (:func:`clean_stale`).

Example
-------
>>> with atomic_path(Path("result.npz"), suffix=".npz") as tmp:
...     np.savez(tmp, values=values)
>>> write_json(Path("manifest.json"), {"n_tokens": 0})
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from ..space import DiskFullError, disk_full_error, free_space

#: Name parts that mark what an interrupted write leaves (see :func:`leftover_target`).
TMP_MARK, NEW_SUFFIX, OLD_SUFFIX = ".tmp-", ".new", ".old"
_LEFTOVER = re.compile(r"^\.(?P<name>.+?)(?:\.tmp-[^/]*|\.new|\.old)$")
_CHUNK = 16 * 1024 * 1024
_umask_lock = threading.Lock()


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


def fsync_dir(folder: Path) -> None:
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


def fsync_file(path: Path) -> None:
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
    fsync_file(tmp)
    os.chmod(tmp, 0o666 & ~umask())  # mkstemp makes it private; new files follow the umask
    os.replace(tmp, path)
    fsync_dir(path.parent)


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


def leftover_target(name: str) -> str | None:
    """The file or folder an interrupted write of ``name`` was for (``.x.tmp-1a2b`` -> ``x``), or None."""
    found = _LEFTOVER.match(name)
    return found.group("name") if found else None


def glob_escape(name: str) -> str:
    """``name`` with glob wildcards escaped."""
    return re.sub(r"([*?\[])", r"[\1]", name)
