"""The file-validation contract (core/storage/readers.py) and the crash-safety helpers
(core/storage/atomic.py, core/storage/checkpoint.py).

Crafted files: headers that promise more than the file holds, overlapping tensors, pickles, object
arrays, paths out of their folder, wrong JSON types; each refused before any data is read, naming
the file and the field. Then the helpers every job uses: leftovers, a split folder swap, token
digests (recorded inputs: tests/storage/test_resumable.py).
"""

from __future__ import annotations

import json
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from interplab.core.data.store import ActivationStore
from interplab.core.memory.budget import MemoryBudgetError, set_memory_budget
from interplab.core.storage import atomic
from interplab.core.storage.checkpoint import TokenDigest, check_tokens
from interplab.core.storage.readers import (
    Fields,
    FileError,
    inside,
    load_npz,
    npz_headers,
    read_json,
    read_safetensors,
    safetensors_header,
)
from safetensors.torch import save_file

from tests.tiny import TEXTS, tiny_model


@pytest.fixture(autouse=True)
def _budget():
    yield
    set_memory_budget(None)


def _raw_safetensors(path: Path, header: dict, data: bytes = b"") -> Path:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


# --------------------------------------------------------------------- headers
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


# ---------------------------------------------------------------------- fields
def test_fields_are_typed_exactly_and_named(tmp_path):
    file = tmp_path / "cfg.json"
    file.write_text(json.dumps({"n": 8.9, "s": "8", "b": 1, "o": {"x": True}, "m": {"1": "a", "x": "b"}}))
    f = Fields(file, read_json(file))
    for call, match in (
        (lambda: f.int("n"), r"cfg\.json': n must be an integer, got 8\.9"),
        (lambda: f.float("s"), r"s must be a finite number, got str '8'"),
        (lambda: f.bool("b"), "b must be true or false, got 1"),
        (lambda: f.obj("o").int("x"), r"o\.x must be an integer, got bool True"),
        (lambda: f.str("missing"), "missing is missing"),
        (lambda: f.str_map("m"), r"m\['x'\] must be keyed by an integer id"),
        (lambda: Fields(file, {"k": 3}).int("k", minimum=5), "k must be an integer >= 5, got 3"),
    ):
        with pytest.raises(FileError, match=match):
            call()
    file.write_text('{"a": 1,}')
    with pytest.raises(FileError, match=r"line 1, column 9 is not valid JSON"):
        read_json(file)
    file.write_text("x" * 100)
    with pytest.raises(FileError, match="size is 100 bytes, more than the 10"):
        read_json(file, max_bytes=10)


def test_paths_in_data_never_leave_their_folder(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    assert inside(folder, "labels.json", folder / "meta.json", "labels") == folder / "labels.json"
    for bad in ("../x.json", "/etc/passwd", "a/../../x", "", None):
        with pytest.raises(FileError, match="labels"):
            inside(folder, bad, folder / "meta.json", "labels")
    (folder / "link").symlink_to(tmp_path)
    with pytest.raises(FileError, match="points outside"):
        inside(folder, "link/secret", folder / "meta.json", "labels")


def test_a_tampered_store_is_named_with_its_field(tmp_path):
    model = tiny_model("gpt2")
    store = model.cache(TEXTS * 10, "blocks.1.hook_resid_post", tmp_path / "s", n_tokens=60, context_size=8,
                        shard_tokens=30)  # fmt: skip
    manifest = json.loads((store.path / "manifest.json").read_text())
    for change, match in (
        ({"n_tokens": 61}, "n_tokens is 61 but its shards hold 60"),
        ({"shards": [{"file": "../../etc/passwd", "n_tokens": 60}]}, r"shards\[0\]\.file must be a shard file name"),
        ({"d": {"blocks.1.hook_resid_post": "32"}}, r"d\.blocks\.1\.hook_resid_post must be an integer"),
        ({"dtype": "float64"}, "dtype must be one of"),
    ):
        (store.path / "manifest.json").write_text(json.dumps({**manifest, **change}))
        with pytest.raises(FileError, match=match):
            ActivationStore(store.path)
    (store.path / "manifest.json").write_text(json.dumps(manifest))
    n0, n1 = (entry["n_tokens"] for entry in manifest["shards"])
    save_file({"blocks.1.hook_resid_post": torch.zeros(n1, 16), "tokens": torch.zeros(n1, dtype=torch.int64)},
              str(store.path / "shard_00001.safetensors"))  # fmt: skip
    fresh = ActivationStore(store.path)
    assert fresh.shard(0, "tokens").shape == (n0,)
    with pytest.raises(FileError, match=rf"shard_00001\.safetensors': blocks\.1\.hook_resid_post has shape "
                                        rf"\[{n1}, 16\], expected \[{n1}, 32\]"):  # fmt: skip
        fresh.shard(1, "blocks.1.hook_resid_post")


# ------------------------------------------------------------ crash-safety helpers
def test_a_split_folder_swap_is_finished_by_recover(tmp_path):
    target = tmp_path / "thing"
    with atomic.atomic_folder(target) as work:
        (work / "v").write_text("old")
    # killed after the new folder was complete and the old one moved aside, before the last rename
    new, old = tmp_path / ".thing.new", tmp_path / ".thing.old"
    new.mkdir()
    (new / "v").write_text("new")
    os.rename(target, old)
    (tmp_path / ".thing.tmp-unfinished").mkdir()
    atomic.recover(target)
    assert (target / "v").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["thing"]
    # killed after the old one was moved aside but before the new one was complete: the old one comes back
    os.rename(target, old)
    atomic.recover(target)
    assert (target / "v").read_text() == "new" and not old.exists()


def test_leftover_names_and_cleaning(tmp_path):
    assert atomic.leftover_target(".shard_00001.safetensors.tmp-a1b2") == "shard_00001.safetensors"
    assert atomic.leftover_target(".dash.new") == "dash" and atomic.leftover_target(".dash.old") == "dash"
    assert atomic.leftover_target("shard_00001.safetensors") is None and atomic.leftover_target(".hidden") is None
    (tmp_path / ".a.json.tmp-x").write_text("half")
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / ".keep").write_text("not ours")
    assert atomic.clean_leftovers(tmp_path) == ["a.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".keep", "a.json"]


def test_token_digests_do_not_depend_on_chunking():
    a, b = TokenDigest(), TokenDigest()
    a.update([1, 2, 3, 4])
    b.update(torch.tensor([1, 2]))
    b.update(np.array([3, 4], np.int32))
    assert a.record() == b.record() == {"n_tokens": 4, "sha256": TokenDigest.of([1, 2, 3, 4])}
    check_tokens(a.record(), b, "here")
    c = TokenDigest()
    c.update([1, 2, 3, 5])
    with pytest.raises(ValueError, match="'here' was made from another corpus: the first 4 tokens"):
        check_tokens(a.record(), c, "here")
