"""The interplab cache folder: prepared models, corpora, labels and web assets live under it.

Example
-------
>>> cache_dir().name in ("interplab",) or "INTERPLAB_CACHE" in os.environ
True
"""

from __future__ import annotations

import os
from pathlib import Path

from .atomic import make_dirs


def cache_dir() -> Path:
    """The interplab cache folder: ``$INTERPLAB_CACHE`` or ``~/.cache/interplab``."""
    env = os.environ.get("INTERPLAB_CACHE")
    root = Path(env) if env else Path.home() / ".cache" / "interplab"
    return make_dirs(root)
