"""The validation contract for every file interplab reads: check first, allocate after, name the field.

Files come from other people (a shared SAE, a dashboard folder, a store on a cluster), so every
reader follows the same rules:

1. **Headers before data.** :func:`safetensors_header`, :func:`npy_header` and :func:`npz_headers`
   read names, dtypes and shapes without reading the arrays, check them against the file size (a
   header cannot promise more data than the file holds) and against the memory budget
   (:func:`interplab.core.checks.check_memory`); only then are arrays read. Object arrays (pickles)
   are refused.
2. **Types and shapes checked against each other.** JSON goes through :class:`Fields` (exact types:
   ``8.9`` is not an int, ``"8"`` is not a number, a missing key is named), arrays through
   :func:`expect_arrays` (every name there, each dtype and shape as the config says).
3. **Paths stay inside.** A path read from a file is resolved with :func:`inside`: never absolute,
   never out of the folder the file came from (``..``, symlinks pointing out).
4. **Errors name the file and the field** (:class:`FileError`, a ``ValueError``).

Example
-------
>>> raw = Fields(path / "cfg.json", read_json(path / "cfg.json"))
>>> d_sae = raw.int("d_sae", minimum=1)
>>> header = safetensors_header(path / "sae_weights.safetensors")
>>> expect_arrays(header.file, header.tensors, {"W_enc": ((640, d_sae), FLOATS)})
"""

from __future__ import annotations

import builtins
import itertools
import json
import math
import os
import struct
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..memory.budget import check_memory

#: JSON files larger than this are refused before they are read.
MAX_JSON_BYTES = 256 * 1024**2
_MAX_HEADER_BYTES = 100 * 1024**2
_MISSING = object()
#: dtype names (safetensors spelling) of floating tensors.
FLOATS = ("F64", "F32", "F16", "BF16")
_ST_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
             "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}  # fmt: skip
_NP_NAMES = {"float64": "F64", "float32": "F32", "float16": "F16", "int64": "I64", "int32": "I32",
             "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL", "uint16": "U16", "uint32": "U32",
             "uint64": "U64"}  # fmt: skip


class FileError(ValueError):
    """A file that is not what it should be: ``"path: field problem."`` (the field: a key or a tensor)."""

    def __init__(self, file: str | os.PathLike[str], field: str, problem: str):
        self.file, self.field = str(file), field
        super().__init__(f"{str(file)!r}: {field} {problem}.")


# ----------------------------------------------------------------------- JSON
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
        return FileError(self.file, self.name(key), f"must be {want}, got {_show(value)}")

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
        value = self.raw(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, bool):
            raise self._bad(key, "true or false", value)
        return value

    def obj(self, key: builtins.str, default: Any = _MISSING) -> Fields:
        value = self.raw(key, {} if default is not _MISSING else _MISSING)
        return Fields(self.file, value, self.name(key))

    def list(self, key: builtins.str, default: Any = _MISSING) -> Any:
        value = self.raw(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, list):
            raise self._bad(key, "a list", value)
        return value

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
            raise FileError(file, f"{where}[{k!r}]", f"must be a string, got {_show(v)}")
        if not (k.isdigit() or (k.startswith("-") and k[1:].isdigit())) or len(k) > 18:
            raise FileError(file, f"{where}[{k!r}]", "must be keyed by an integer id")
        out[int(k)] = v
    return out


def _show(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}" if not isinstance(
        value, (int, float)) or isinstance(value, bool) else text  # fmt: skip


# ------------------------------------------------------------------ arrays
@dataclass(frozen=True)
class ArrayInfo:
    """What a header says of one array: dtype (safetensors spelling: F32, I64, ...), shape, byte size."""

    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * _ST_SIZES.get(self.dtype, 1)


@dataclass
class SafetensorsHeader:
    """A safetensors file's tensors (name -> :class:`ArrayInfo`) and string metadata, read without the data."""

    file: Path
    tensors: dict[str, ArrayInfo]
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())


def result_header(path: str | os.PathLike[str], fmt: str, what: str) -> tuple[SafetensorsHeader, Fields]:
    """The header of a result file saved with ``{"format": fmt, "interplab": <JSON>}`` metadata, and its fields.

    Checked before any tensor is read: the format names ``what`` the file must be, the JSON parses.

    >>> header, info = result_header("probe.safetensors", "interplab-probe-1", "probe result")
    """
    path = Path(path)
    header = safetensors_header(path)
    if header.metadata.get("format") != fmt:
        raise FileError(path, "format", f"is {header.metadata.get('format')!r}: not an interplab {what}")
    info = Fields(path, parse_json(header.metadata.get("interplab", ""), path, "interplab"), "interplab")
    return header, info


def _looks_pickled(head: bytes) -> bool:
    return head[:1] == b"\x80" or head[:4] == b"PK\x03\x04"  # pickle protocol 2+, or torch.save's zip


def safetensors_header(path: str | os.PathLike[str]) -> SafetensorsHeader:
    """Read and check a safetensors header: names, dtypes, shapes and offsets against the file size."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{str(path)!r} does not exist (or is not a file).")
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise FileError(path, "header", "is missing: the file is shorter than 8 bytes (not a safetensors file)")
        (n,) = struct.unpack("<Q", head)
        if n > min(_MAX_HEADER_BYTES, size - 8):
            extra = " It looks like a pickle (e.g. torch.save output), which interplab never loads." if (
                _looks_pickled(head)) else ""  # fmt: skip
            raise FileError(path, "header", f"claims {n} bytes in a file of {size}: not a safetensors file.{extra}")
        raw = f.read(n)
    header = parse_json(raw, path, "header")
    if not isinstance(header, dict):
        raise FileError(path, "header", "is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise FileError(path, "__metadata__", "must map names to strings")
    tensors: dict[str, ArrayInfo] = {}
    spans = []
    for name, entry in header.items():
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise FileError(path, f"tensor {name!r}", "has no dtype, shape and data_offsets") from None
        if dtype not in _ST_SIZES:
            raise FileError(path, f"tensor {name!r}", f"has unknown dtype {dtype!r}")
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
            raise FileError(path, f"tensor {name!r}", f"has a bad shape {list(shape)}")
        info = ArrayInfo(dtype, shape)
        if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end <= size - 8 - n):
            raise FileError(path, f"tensor {name!r}", f"has data offsets {begin}..{end} outside the file")
        if end - begin != info.nbytes:
            raise FileError(path, f"tensor {name!r}", f"is {dtype} {list(shape)} ({info.nbytes} bytes) but its data "
                                                      f"holds {end - begin} bytes")  # fmt: skip
        tensors[name] = info
        spans.append((begin, end))
    spans.sort()
    if any(a[1] > b[0] for a, b in itertools.pairwise(spans)):
        raise FileError(path, "header", "has tensors whose data overlap")
    return SafetensorsHeader(path, tensors, metadata)


def read_safetensors(path: str | os.PathLike[str], what: str = "") -> tuple[SafetensorsHeader, dict[str, Any]]:
    """The checked header and the tensors (torch) of a safetensors file, read only once the header fits the budget."""
    from safetensors.torch import load_file

    header = safetensors_header(path)
    check_memory(f"Reading {str(header.file)!r}{what}", header.nbytes)
    return header, load_file(str(header.file))


def _npy_info(file: Path, member: str, fp: Any, size: int) -> ArrayInfo:
    try:
        version = np.lib.format.read_magic(fp)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _fortran, dtype = read(fp, max_header_size=100_000)
    except (ValueError, OSError, SyntaxError) as err:
        raise FileError(file, member, f"is not a valid .npy array ({err})") from None
    if dtype.hasobject or dtype.name not in _NP_NAMES:
        raise FileError(file, member, f"has dtype {dtype}: pickled objects are refused, only plain numeric arrays "
                                      "are read")  # fmt: skip
    info = ArrayInfo(_NP_NAMES[dtype.name], tuple(int(s) for s in shape))
    if info.nbytes > size:
        raise FileError(file, member, f"says {dtype} {list(shape)} ({info.nbytes} bytes) but holds {size} bytes")
    return info


def npy_header(path: str | os.PathLike[str]) -> ArrayInfo:
    """The dtype and shape of a ``.npy`` file, checked against its size, without reading the array."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{str(path)!r} does not exist (or is not a file).")
    with open(path, "rb") as fp:
        return _npy_info(path, path.name, fp, path.stat().st_size)


def npz_headers(path: str | os.PathLike[str]) -> dict[str, ArrayInfo]:
    """The arrays of an ``.npz`` (name -> :class:`ArrayInfo`), checked without reading them."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as zf:
            out = {}
            for entry in zf.infolist():
                if not entry.filename.endswith(".npy"):
                    raise FileError(path, entry.filename, "is not an .npy array")
                with zf.open(entry) as fp:
                    out[entry.filename[:-4]] = _npy_info(path, entry.filename[:-4], fp, entry.file_size)
            return out
    except zipfile.BadZipFile as err:
        raise FileError(path, "archive", f"is not a valid npz ({err})") from None


def load_npz(path: str | os.PathLike[str], what: str = "") -> dict[str, np.ndarray]:
    """Every array of an npz, read only after the headers are checked and fit the memory budget."""
    path = Path(path)
    infos = npz_headers(path)
    check_memory(f"Reading {str(path)!r}{what}", sum(i.nbytes for i in infos.values()))
    with np.load(path, allow_pickle=False) as npz:
        return {name: npz[name] for name in infos}


def load_npy(path: str | os.PathLike[str], info: ArrayInfo | None = None) -> np.ndarray:
    """A ``.npy`` array, read after its header is checked (pass the :class:`ArrayInfo` already checked)."""
    info = info or npy_header(path)
    return np.load(path, allow_pickle=False)


def dtype_name(dtype: Any) -> str:
    """A numpy or torch dtype in safetensors spelling (``torch.float32`` -> ``F32``)."""
    name = str(dtype).replace("torch.", "")
    return {"bfloat16": "BF16"}.get(name, _NP_NAMES.get(name, name))


def expect_arrays(
    file: str | os.PathLike[str],
    found: Mapping[str, ArrayInfo],
    expected: Mapping[str, tuple[tuple[int, ...] | None, Sequence[str]]],
    optional: Sequence[str] = (),
) -> None:
    """Check each expected array is there with one of its dtypes and its shape (None: any shape).

    >>> expect_arrays("w.safetensors", header.tensors, {"W_enc": ((640, 4096), FLOATS)})
    """
    for name, (shape, dtypes) in expected.items():
        if name not in found:
            if name in optional:
                continue
            raise FileError(file, name, f"is missing (the file holds {sorted(found)[:12]})")
        info = found[name]
        if dtypes and info.dtype not in dtypes:
            raise FileError(file, name, f"has dtype {info.dtype}, expected one of {list(dtypes)}")
        if shape is not None and info.shape != tuple(shape):
            raise FileError(file, name, f"has shape {list(info.shape)}, expected {list(shape)}")


# -------------------------------------------------------------------- paths
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
        raise FileError(file, field, f"must be a relative path inside {str(folder)!r}, got {_show(relative)}")
    rel = Path(relative)
    base = Path(folder).resolve()
    target = (base / rel).resolve()
    if rel.is_absolute() or not target.is_relative_to(base):
        raise FileError(file, field, f"points outside {str(folder)!r} ({relative!r}); paths in data are never "
                                     "followed out of their folder")  # fmt: skip
    return Path(folder) / rel


# ------------------------------------------------------------------- values
def expect_values(file: str | os.PathLike[str], name: str, values: Any, low: float | None = None,
                  high: float | None = None, what: str = "", maximum: float | None = None) -> None:  # fmt: skip
    """The one numeric-range rule of every reader: each value of ``values`` (a tensor, an array or a list of
    numbers) finite and within ``[low, high)`` (``high`` excluded: a count such as d_sae, the vocabulary or the
    layers; ``maximum`` an included bound such as 1 for a probability), else a :class:`FileError` naming the
    file, the field, the first bad value and the valid range. ``what`` says what ``high`` is.

    >>> expect_values("dash/meta.json", "neighbour_ids", [3, 10**9], 0, 4096, "d_sae")
    Traceback (most recent call last):
    FileError: 'dash/meta.json': neighbour_ids holds 1000000000 at [1]: must be in 0..4095 (d_sae 4096).
    """
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise FileError(file, name, f"must hold numbers, got {_show(values)}") from None
    bad = ~np.isfinite(arr)
    if low is not None:
        bad |= arr < low
    if high is not None:
        bad |= arr >= high
    if maximum is not None:
        bad |= arr > maximum
    if not bad.any():
        return
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    value = arr[index] if arr.ndim else arr.item()
    shown = int(value) if np.isfinite(value) and float(value).is_integer() else float(value)
    if maximum is not None:
        want = f"must be a finite number in {low}..{maximum}" if low is not None else f"must be <= {maximum}"
    elif low is None and high is None:
        want = "must be finite"
    elif high is None:
        want = f"must be a finite number >= {low}"
    elif low is None:
        want = f"must be a finite number < {high}"
    else:
        want = f"must be in {low}..{high - 1}" + (f" ({what} {high})" if what else "")
    raise FileError(file, name, f"holds {shown} at {list(index)}: {want}")
