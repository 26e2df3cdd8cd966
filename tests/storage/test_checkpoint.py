"""The checkpoints of long jobs (core/storage/checkpoint.py): recorded inputs, token digests."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.storage.checkpoint import (
    TokenDigest,
    check_inputs,
    check_tokens,
    differences,
    load_state,
    save_state,
)
from interplab.core.storage.readers import FileError


def test_a_checkpoint_records_its_inputs_and_refuses_others(tmp_path):
    state = {"step": 3, "w": torch.arange(4.0), "opt": {0: {"exp": torch.ones(2)}, "groups": [{"betas": (0.9, 0.99)}]}}
    inputs = {"model": "m", "specs": [{"width": 8}]}
    path = tmp_path / "ck.safetensors"
    save_state(path, "job", inputs, state)
    back = load_state(path, "job", inputs)
    assert back["step"] == 3 and torch.equal(back["w"], state["w"])
    assert torch.equal(back["opt"][0]["exp"], torch.ones(2))
    assert back["opt"]["groups"][0]["betas"] == (0.9, 0.99)
    assert differences(inputs, {"model": "m", "specs": [{"width": 16}]}) == {"specs[0].width": (8, 16)}
    with pytest.raises(ValueError, match=r"other inputs than this call's \(specs\[0\]\.width: 8 there, 16 now\)"):
        load_state(path, "job", {"model": "m", "specs": [{"width": 16}]})
    with pytest.raises(FileError, match="job is a checkpoint of 'job', not of 'other'"):
        load_state(path, "other", inputs)
    assert load_state(tmp_path / "none.safetensors", "job", inputs) is None
    with pytest.raises(ValueError, match=r"'.*ck\.safetensors' was made with other inputs than this call's \(a: 1"):
        check_inputs({"a": 1}, {"a": 2}, path, "job")


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
