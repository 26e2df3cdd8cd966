"""The error every reader raises (:class:`FileError`) and how a bad value is shown in it.

Example
-------
>>> raise FileError("cfg.json", "d_sae", f"must be an integer, got {describe_value(8.9)}")
Traceback (most recent call last):
FileError: 'cfg.json': d_sae must be an integer, got 8.9.
"""

from __future__ import annotations

import os
from typing import Any


class FileError(ValueError):
    """A file that is not what it should be: ``"path: field problem."`` (the field: a key or a tensor)."""

    def __init__(self, file: str | os.PathLike[str], field: str, problem: str):
        self.file, self.field = str(file), field
        super().__init__(f"{str(file)!r}: {field} {problem}.")


def describe_value(value: Any) -> str:
    """A bad value as an error shows it: numbers as they are, anything else by type and a clipped repr.

    >>> describe_value([1, 2])
    'list [1, 2]'
    """
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}" if not isinstance(
        value, (int, float)) or isinstance(value, bool) else text  # fmt: skip
