"""JSON from other people: the size and nesting capped before parsing, fields read with exact types.

Example
-------
>>> raw = Fields(path / "cfg.json", read_json(path / "cfg.json"))
>>> d_sae = raw.int("d_sae", minimum=1)
"""

from __future__ import annotations

import builtins
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .errors import FileError, describe_value

#: JSON files larger than this are refused before they are read.
MAX_JSON_BYTES = 256 * 1024**2
_MISSING = object()


def read_json(path: str | os.PathLike[str], max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Parse a JSON file after checking its size; errors name the file and the line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{str(path)!r} does not exist (or is not a file).")
    size = path.stat().st_size
    if size > max_bytes:
        raise FileError(path, "size", f"is {size} bytes, more than the {max_bytes} a JSON file here may have")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise FileError(path, "text", f"is not UTF-8 ({err})") from None
    return parse_json(text, path)


#: JSON nested deeper than this is refused before it is parsed (no file interplab writes nests past 10).
MAX_JSON_DEPTH = 100
_JSON_KINDS = np.zeros(256, dtype=np.int8)
_JSON_KINDS[[ord("["), ord("{")]], _JSON_KINDS[[ord("]"), ord("}")]], _JSON_KINDS[ord('"')] = 1, 2, 3


def json_depth(text: str | bytes) -> int:
    """How deep the arrays and objects of JSON ``text`` nest (brackets inside strings do not count).

    >>> json_depth('{"a": [1, "]]"]}')
    2
    """
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")  # escapes gone, every quote opens or closes a string
    kinds = _JSON_KINDS[np.frombuffer(raw, dtype=np.uint8)]
    kinds = kinds[kinds != 0]  # quotes (3), openings (1), closings (2)
    outside = np.bitwise_xor.accumulate((kinds == 3).astype(np.uint8)) == 0
    steps = (kinds == 1).astype(np.int32) - (kinds == 2)
    return int(np.cumsum(steps * outside, dtype=np.int32).max(initial=0))


def parse_json(text: str | bytes, file: str | os.PathLike[str], field: str = "content") -> Any:
    """Parse JSON ``text`` read from ``file`` (``field``: the part of it), its nesting capped at
    :data:`MAX_JSON_DEPTH` before parsing; every problem a :class:`FileError` naming the file and the line.

    >>> parse_json("[" * 5000 + "]" * 5000, "cfg.json")
    Traceback (most recent call last):
    FileError: 'cfg.json': content nests 5000 levels deep, more than the 100 a JSON file here may have.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise FileError(file, field, f"is not UTF-8 text ({err})") from None
    openings = text.count("[") + text.count("{")
    depth = json_depth(text) if openings > MAX_JSON_DEPTH else openings
    if depth > MAX_JSON_DEPTH:
        raise FileError(file, field, f"nests {depth} levels deep, more than the {MAX_JSON_DEPTH} a JSON file here "
                                     "may have")  # fmt: skip
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        where = f"line {err.lineno}, column {err.colno}"
        if field == "content":
            raise FileError(file, where, f"is not valid JSON ({err.msg})") from None
        raise FileError(file, field, f"is not JSON ({where}: {err.msg})") from None


class Fields:
    """Typed, named access to a JSON object read from ``file`` (``where`` prefixes nested field names).

    >>> cfg = Fields("cfg.json", {"d_sae": 8.9})
    >>> cfg.int("d_sae")
    Traceback (most recent call last):
    FileError: 'cfg.json': d_sae must be an integer, got 8.9.
    """

    def __init__(self, file: str | os.PathLike[str], data: Any, where: str = ""):
        self.file, self.where = Path(file), where
        if not isinstance(data, dict):
            raise FileError(file, where or "content", f"must be a JSON object, got {type(data).__name__}")
        self.data: dict[str, Any] = data

    def name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        if key in self.data and self.data[key] is not None:
            return self.data[key]
        if default is _MISSING:
            raise FileError(self.file, self.name(key), "is missing")
        return default

    def _bad(self, key: str, want: str, value: Any) -> FileError:
        return FileError(self.file, self.name(key), f"must be {want}, got {describe_value(value)}")

    def _of_type(self, key: str, default: Any, kind: type, want: str) -> Any:
        """The value of ``key`` (``default`` when it is missing and one is given) when it is a ``kind``."""
        value = self.raw(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, kind):
            raise self._bad(key, want, value)
        return value

    def int(self, key: str, default: Any = _MISSING, minimum: int | None = None, maximum: int | None = None) -> Any:
        value = self.raw(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._bad(key, "an integer", value)
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            bounds = f"in {minimum}..{maximum}" if maximum is not None else f">= {minimum}"
            raise self._bad(key, f"an integer {bounds}", value)
        return value

    def float(self, key: str, default: Any = _MISSING, minimum: float | None = None, positive: bool = False) -> Any:
        value = self.raw(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self._bad(key, "a finite number", value)
        if minimum is not None and value < minimum:
            raise self._bad(key, f"a number >= {minimum}", value)
        if positive and value <= 0:
            raise self._bad(key, "a number > 0", value)
        return float(value)

    def str(self, key: builtins.str, default: Any = _MISSING, choices: Sequence[builtins.str] | None = None,
            max_len: builtins.int = 100_000) -> Any:  # fmt: skip
        value = self.raw(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, str) or len(value) > max_len:
            raise self._bad(key, f"a string (at most {max_len} characters)", value)
        if choices is not None and value not in choices:
            raise self._bad(key, f"one of {list(choices)}", value)
        return value

    def bool(self, key: builtins.str, default: Any = _MISSING) -> Any:
        return self._of_type(key, default, bool, "true or false")

    def obj(self, key: builtins.str, default: Any = _MISSING) -> Fields:
        value = self.raw(key, {} if default is not _MISSING else _MISSING)
        return Fields(self.file, value, self.name(key))

    def list(self, key: builtins.str, default: Any = _MISSING) -> Any:
        return self._of_type(key, default, list, "a list")

    def str_map(self, key: builtins.str, default: Any = _MISSING) -> dict[builtins.int, builtins.str]:
        """A ``{"123": "text"}`` object as ``{123: "text"}``: keys integer ids, values strings."""
        value = self.raw(key, default)
        if not isinstance(value, dict):
            raise self._bad(key, "an object of strings", value)
        return _int_str_map(self.file, self.name(key), value)

    def str_map_all(self) -> dict[builtins.int, builtins.str]:
        """The whole object as ``{int id: text}`` (a labels file)."""
        return _int_str_map(self.file, self.where, self.data)


def _int_str_map(file: Path, where: str, value: dict[str, Any]) -> dict[int, str]:
    out: dict[int, str] = {}
    for k, v in value.items():
        if not isinstance(v, str):
            raise FileError(file, f"{where}[{k!r}]", f"must be a string, got {describe_value(v)}")
        if not (k.isdigit() or (k.startswith("-") and k[1:].isdigit())) or len(k) > 18:
            raise FileError(file, f"{where}[{k!r}]", "must be keyed by an integer id")
        out[int(k)] = v
    return out
