"""Advisory locks on folders (``flock``) for the folder-swap protocol of :mod:`interplab.core.storage.atomic`.

Two kinds, both released by the kernel when their process dies (so a kill never leaves a lock held):

* :func:`folder_lock` on the **parent** of a swapped folder: readers of the folder hold it shared while
  they read, a writer holds it exclusive only for its renames. Nothing is written: the folder's own
  inode is locked, so no lock file is left beside anyone's data.
* :func:`own_folder` on a writer's temporary folder, held from its creation until it is published or
  removed: :func:`is_abandoned` is True only for a temporary folder whose writer is gone.

Where ``flock`` is missing (Windows) or refused (some network file systems) the locks are no-ops and
:func:`locking_works` says so; the atomic renames still keep every folder whole.

Example
-------
>>> with folder_lock(Path("saes"), exclusive=True):
...     ...  # rename saes/.my_sae.new into place
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def _open_folder(folder: Path) -> int | None:
    """A read-only descriptor of ``folder`` (nothing is written), or None when it cannot be opened."""
    try:
        return os.open(folder, os.O_RDONLY | _DIRECTORY)
    except OSError:
        return None


def _flock(fd: int, flags: int) -> bool:
    """Take a lock; False when the file system refuses locks (not when it is busy: that blocks or raises)."""
    try:
        fcntl.flock(fd, flags)
    except BlockingIOError:
        raise
    except OSError as err:
        if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF):
            return False
        raise
    return True


def _try_lock(folder: str | os.PathLike[str], flags: int, busy: bool) -> bool:
    """Try a non-blocking lock on ``folder`` and let it go: whether it was granted, ``busy`` when another process
    holds it, False when the folder cannot be opened or the file system refuses locks."""
    fd = _open_folder(Path(folder)) if fcntl is not None else None
    if fd is None:
        return False
    try:
        return _flock(fd, flags | fcntl.LOCK_NB)
    except BlockingIOError:
        return busy
    finally:
        os.close(fd)


def locking_works(folder: str | os.PathLike[str]) -> bool:
    """Whether folder locks work in ``folder`` (``flock`` available and accepted by its file system)."""
    return fcntl is not None and _try_lock(folder, fcntl.LOCK_SH, busy=True)


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike[str], exclusive: bool = False) -> Iterator[bool]:
    """Hold ``folder``'s lock (shared, or ``exclusive``) for the block; yields whether a lock is held.

    >>> with folder_lock(Path("saes")):          # readers of any folder in saes/
    ...     load_files()
    """
    fd = _open_folder(Path(folder)) if fcntl is not None else None
    if fd is None:
        yield False
        return
    try:
        held = _flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield held
    finally:
        os.close(fd)  # closing the descriptor releases the lock


class Owned:
    """A writer's hold on its temporary folder (see :func:`own_folder`); :meth:`release` lets it go."""

    def __init__(self, fd: int | None):
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def own_folder(folder: str | os.PathLike[str]) -> Owned:
    """Lock a temporary folder as its writer's for as long as the writer lives (or until ``release()``).

    Call it under :func:`folder_lock` of the parent (shared), in the same hold that created the folder,
    so that a cleaner holding the parent's exclusive lock never meets an unowned live folder.
    """
    fd = _open_folder(Path(folder)) if fcntl is not None else None
    if fd is not None and not _flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB):
        os.close(fd)
        fd = None
    return Owned(fd)


def is_abandoned(folder: str | os.PathLike[str]) -> bool:
    """True when ``folder``'s writer is gone (its lock is free), False while it lives or when that cannot be known."""
    return fcntl is not None and _try_lock(folder, fcntl.LOCK_EX, busy=False)
