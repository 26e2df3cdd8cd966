"""Atomic file writes: a temporary file beside the target, renamed over it in one step.

A reader sees the old file or the new one, never half of one; a failed write leaves
the old file as it was and no temporary file behind.

Example
-------
>>> with atomic_path(Path("result.npz"), suffix=".npz") as tmp:
...     np.savez(tmp, values=values)
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
