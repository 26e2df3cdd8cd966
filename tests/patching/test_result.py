"""Patching result files (core/patching/result.py): a tampered file is refused, naming the file and the field."""

from __future__ import annotations

import json

import numpy as np
import pytest
from interplab.core.storage.readers import FileError

import interplab as ilab
from tests.tiny import tiny_model


def test_a_tampered_patching_result_is_named_with_its_field(tmp_path):
    gpt2 = tiny_model("gpt2")
    pairs = ilab.patching.prompt_pairs(gpt2, ["the cat sat"], ["the dog sat"], ["on"], ["to"])
    result = ilab.patching.grid(gpt2, pairs, site="resid_pre")
    result.save(tmp_path / "grid.npz")
    with np.load(tmp_path / "grid.npz") as f:
        arrays = dict(f)
    meta = json.loads(bytes(arrays["meta"]).decode())

    def tampered(**change):  # type: ignore[no-untyped-def]
        m = {**meta, **change}
        np.savez(tmp_path / "bad.npz", **{**arrays, "meta": np.frombuffer(json.dumps(m).encode(), np.uint8)})
        return tmp_path / "bad.npz"

    for change, match in (
        ({"rows": [0, 1, 2]}, r"meta\.rows must be 2 integers"),
        ({"clean_baseline": "x"}, r"meta\.clean_baseline must be a finite number"),
        ({"site": "anywhere"}, r"meta\.site must be one of"),
        ({"evil": 1}, r"meta\.evil is not a field"),
        ({"top_tokens": []}, r"meta\.top_tokens must hold"),
    ):
        with pytest.raises(FileError, match=match):
            ilab.patching.PatchingResult.load(tampered(**change))
    np.savez(tmp_path / "bad.npz", **{**arrays, "values": np.zeros(3, np.float32)})
    with pytest.raises(FileError, match=r"values is missing or not a 2-D"):
        ilab.patching.PatchingResult.load(tmp_path / "bad.npz")
