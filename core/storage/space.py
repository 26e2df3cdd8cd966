"""A full disk, said clearly: :class:`DiskFullError` and the translation of the system's errors into it.

Every writer of :mod:`interplab.core.storage.atomic` raises a :class:`DiskFullError` (an ``OSError`` with
``errno.ENOSPC``) naming the file and the space it needs, whatever reported the full disk (``ENOSPC``,
``EDQUOT``, numpy's short write).

Example
-------
>>> raise disk_full_error(OSError(errno.ENOSPC, "No space left on device"), Path("my_sae"))
Traceback (most recent call last):
DiskFullError: [Errno 28] The disk is full: writing 'my_sae' only 0 bytes are free. Nothing was replaced ...
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path


class DiskFullError(OSError):
    """Not enough disk space for a write; nothing was replaced (an ``OSError`` with ``errno.ENOSPC``)."""

    def __init__(self, path: Path, needed: int | None, free: int):
        need = f" needs about {_size(needed)} and" if needed else ""
        super().__init__(
            errno.ENOSPC,
            f"The disk is full: writing {str(path)!r}{need} only {_size(free)} are free. Nothing was replaced "
            "(the previous version and any checkpoint are kept); free some space and run the same call again.",
        )
        self.path, self.needed = path, needed


def _size(n: int | None) -> str:
    value = float(n or 0)
    for unit in ("bytes", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"


def disk_full_error(err: OSError, path: Path, needed: int | None = None) -> OSError:
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


def free_space(folder: Path) -> int | None:
    """The free bytes on ``folder``'s disk, or None when the system cannot say."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None
