"""Arrays from other people, header first: safetensors, ``.npy`` and ``.npz`` files are read only after
their names, dtypes and shapes are checked against the file size and the memory budget; pickles are refused.

Example
-------
>>> header = safetensors_header(path / "sae_weights.safetensors")
>>> expect_arrays(header.file, header.tensors, {"W_enc": ((640, d_sae), FLOATS)})
"""

from __future__ import annotations

import itertools
import math
import os
import struct
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...memory.budget import check_memory
from .errors import FileError
from .json_fields import Fields, parse_json

_MAX_HEADER_BYTES = 100 * 1024**2
#: dtype names (safetensors spelling) of floating tensors.
FLOATS = ("F64", "F32", "F16", "BF16")
_ST_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
             "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}  # fmt: skip
_NP_NAMES = {"float64": "F64", "float32": "F32", "float16": "F16", "int64": "I64", "int32": "I32",
             "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL", "uint16": "U16", "uint32": "U32",
             "uint64": "U64"}  # fmt: skip


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
