"""Atomic writes: a file or a whole folder is written under a temporary name beside its target, then renamed.

A reader sees the old version or the new one, never half of one; a failed write leaves the
old version as it was and no temporary file behind. Every writer in interplab goes through
these helpers: :func:`atomic_path` (any file written by a library call that takes a path),
:func:`write_bytes` / :func:`write_text` / :func:`write_json`, and :func:`atomic_folder` (a folder
swapped in whole). Files and folders get the permissions the user's umask gives new ones.

Example
-------
>>> with atomic_path(Path("result.npz"), suffix=".npz") as tmp:
...     np.savez(tmp, values=values)
>>> write_json(Path("manifest.json"), {"n_tokens": 0})
>>> with atomic_folder(Path("my_sae")) as tmp:
...     (tmp / "cfg.json").write_text("{}")
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on error it is removed.

    ``suffix`` matters for writers that append their own extension (``np.savez`` adds ``.npz``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; new files follow the umask
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write a binary file atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write a UTF-8 text file atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json(path: str | os.PathLike[str], data: Any, indent: int | None = 1) -> Path:
    """Write JSON atomically (non-ASCII text kept as is)."""
    return write_text(path, json.dumps(data, indent=indent, ensure_ascii=False))


@contextmanager
def atomic_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on success it replaces ``path`` whole.

    An existing folder at ``path`` is moved aside, the new one renamed into place, then the old one
    removed. On error the temporary folder is removed and ``path`` is left as it was.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield work
        os.chmod(work, 0o777 & ~_umask())  # mkdtemp makes it private; new folders follow the umask
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
            os.replace(target, old / target.name)
            os.replace(work, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(work, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
