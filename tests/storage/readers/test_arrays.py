"""Array files read header first (core/storage/readers/arrays.py).

Crafted files: headers that promise more than the file holds, overlapping tensors, pickles, object
arrays; each refused before any data is read, naming the file and the field.
"""

from __future__ import annotations

import json
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from interplab.core.memory.budget import MemoryBudgetError, set_memory_budget
from interplab.core.storage.readers import (
    FileError,
    load_npz,
    npy_header,
    npz_headers,
    read_safetensors,
    safetensors_header,
)
from safetensors.torch import save_file


@pytest.fixture(autouse=True)
def _budget():
    yield
    set_memory_budget(None)


def _raw_safetensors(path: Path, header: dict, data: bytes = b"") -> Path:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def test_a_safetensors_header_is_checked_against_the_file(tmp_path):
    good = tmp_path / "good.safetensors"
    save_file({"w": torch.zeros(3, 4), "b": torch.ones(2, dtype=torch.int64)}, str(good), metadata={"k": "v"})
    header = safetensors_header(good)
    assert {k: (v.dtype, v.shape) for k, v in header.tensors.items()} == {"w": ("F32", (3, 4)), "b": ("I64", (2,))}
    assert header.metadata == {"k": "v"} and header.nbytes == 48 + 16

    lies = {
        "beyond the file": ({"w": {"dtype": "F32", "shape": [10**6], "data_offsets": [0, 4 * 10**6]}}, b"\0" * 16,
                            r"data offsets 0\.\.4000000 outside the file"),
        "shape vs bytes": ({"w": {"dtype": "F32", "shape": [5], "data_offsets": [0, 16]}}, b"\0" * 16,
                           r"is F32 \[5\] \(20 bytes\) but its data holds 16 bytes"),
        "overlap": ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                     "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12, "overlap"),
        "dtype": ({"w": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}, b"\0", "unknown dtype 'Q4'"),
        "shape": ({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4, r"bad shape \[-1\]"),
    }  # fmt: skip
    for name, (header_json, data, match) in lies.items():
        with pytest.raises(FileError, match=match):
            safetensors_header(_raw_safetensors(tmp_path / f"{name}.safetensors", header_json, data))
    (tmp_path / "huge.safetensors").write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(FileError, match="claims 1000000000000 bytes in a file of 10: not a safetensors file"):
        safetensors_header(tmp_path / "huge.safetensors")
    (tmp_path / "pickle.safetensors").write_bytes(pickle.dumps({"w": [1.0] * 100}))
    with pytest.raises(FileError, match="looks like a pickle"):
        safetensors_header(tmp_path / "pickle.safetensors")


def test_arrays_are_read_only_within_the_memory_budget(tmp_path):
    path = tmp_path / "big.safetensors"
    save_file({"w": torch.zeros(256, 256)}, str(path))
    np.savez(tmp_path / "big.npz", w=np.zeros((256, 256), np.float32))
    set_memory_budget("64KB")
    with pytest.raises(MemoryBudgetError, match=r"big\.safetensors' would need about 256\.0 KB, over the memory "
                                                r"budget of 64\.0 KB"):  # fmt: skip
        read_safetensors(path)
    with pytest.raises(MemoryBudgetError, match=r"big\.npz' would need about 256\.0 KB"):
        load_npz(tmp_path / "big.npz")
    set_memory_budget(None)
    assert read_safetensors(path)[1]["w"].shape == (256, 256)


def test_npz_members_are_plain_arrays(tmp_path):
    np.savez(tmp_path / "ok.npz", a=np.arange(3), b=np.ones((2, 2), np.float32))
    assert {k: v.shape for k, v in npz_headers(tmp_path / "ok.npz").items()} == {"a": (3,), "b": (2, 2)}
    np.savez(tmp_path / "obj.npz", a=np.array([{"x": 1}], dtype=object))
    with pytest.raises(FileError, match=r"obj\.npz': a has dtype object: pickled objects are refused"):
        npz_headers(tmp_path / "obj.npz")
    (tmp_path / "zip.npz").write_bytes(b"not a zip")
    with pytest.raises(FileError, match="archive is not a valid npz"):
        npz_headers(tmp_path / "zip.npz")


def test_an_npy_header_that_promises_more_than_the_file_holds(tmp_path):
    bomb = tmp_path / "bomb.npy"
    with open(bomb, "wb") as f:  # a header claiming 10^12 floats in a file of a few bytes
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6)})
    with pytest.raises(FileError, match=r"bomb\.npy': bomb\.npy says float32 \[1000000, 1000000\].*but holds"):
        npy_header(bomb)
