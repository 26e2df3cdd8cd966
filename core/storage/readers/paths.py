"""Paths in and of data: a file a reader opens stays in its folder, a path read from a file never leads out.

Example
-------
>>> inside("dash/", "labels.json", "dash/meta.json", "labels_path")
PosixPath('dash/labels.json')
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import FileError, describe_value


def in_folder(folder: str | os.PathLike[str], name: str, root: str | os.PathLike[str] | None = None) -> Path:
    """``folder / name``, a file a reader opens, when it stays inside ``root`` (default ``folder``) once symlinks
    are followed; a :class:`FileError` otherwise. Every reader opens the files of a folder through this.

    >>> in_folder("my_sae", "cfg.json")   # refused if cfg.json is a symlink to ../../elsewhere
    PosixPath('my_sae/cfg.json')
    """
    path = Path(folder) / name
    base = Path(root if root is not None else folder).resolve()
    if os.path.lexists(path) and not path.resolve().is_relative_to(base):
        raise FileError(path, "path", f"leads out of {str(base)!r} (to {str(path.resolve())!r}); a file of a "
                                      "folder is read only from inside it")  # fmt: skip
    return path


def inside(folder: str | os.PathLike[str], relative: Any, file: str | os.PathLike[str], field: str) -> Path:
    """``folder / relative`` when it stays inside ``folder`` (symlinks resolved); a :class:`FileError` otherwise.

    >>> inside("dash/", "labels.json", "dash/meta.json", "labels_path")
    PosixPath('dash/labels.json')
    """
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        raise FileError(file, field, f"must be a relative path inside {str(folder)!r}, got {describe_value(relative)}")
    rel = Path(relative)
    base = Path(folder).resolve()
    target = (base / rel).resolve()
    if rel.is_absolute() or not target.is_relative_to(base):
        raise FileError(file, field, f"points outside {str(folder)!r} ({relative!r}); paths in data are never "
                                     "followed out of their folder")  # fmt: skip
    return Path(folder) / rel
