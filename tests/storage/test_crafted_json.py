"""Deeply nested JSON is refused before it is parsed, in every reader (core/storage/readers/json_fields.py
``parse_json``).

``"[" * 50000 + "]" * 50000`` makes Python's parser raise RecursionError; the nesting is measured first
(brackets inside strings do not count) and a file nesting deeper than ``MAX_JSON_DEPTH`` is a FileError
naming the file and the part of it.
"""

from __future__ import annotations

import json
import struct

import pytest
import torch
from interplab.core.data.corpus import check_jsonl
from interplab.core.storage.checkpoint import read_state_file, save_state
from interplab.core.storage.readers import MAX_JSON_DEPTH, FileError, json_depth, parse_json, read_json
from safetensors.torch import save

import interplab as ilab

DEEP = "[" * 50000 + "]" * 50000
DEPTH = r"nests 50000 levels deep, more than the 100"


@pytest.mark.parametrize(("text", "depth"), [
    ("1", 0), ("[]", 1), ('{"a": [1, {"b": []}]}', 4), ('["]]]", "[[[", "\\\\", "\\"["]', 1),
    ('{"a": "' + "[" * 500 + '"}', 1), ("[" * 101 + "]" * 101, 101),
])  # fmt: skip
def test_json_depth_counts_brackets_outside_strings(text, depth):
    assert json_depth(text) == depth
    if depth <= MAX_JSON_DEPTH:
        assert parse_json(text, "x.json") == json.loads(text)


def test_a_deep_json_file_is_refused_naming_it(tmp_path):
    file = tmp_path / "cfg.json"
    file.write_text(DEEP)
    with pytest.raises(FileError, match=rf"cfg\.json': content {DEPTH}"):
        read_json(file)


def test_an_sae_config_and_a_store_manifest_that_nest_deep_are_refused(tmp_path):
    sae = ilab.SAE.create("topk", d_in=8, d_sae=4, k=2, site="blocks.0.hook_resid_post")
    sae.save(tmp_path / "sae")
    (tmp_path / "sae" / "cfg.json").write_text(DEEP)
    with pytest.raises(FileError, match=DEPTH):
        ilab.load_sae(tmp_path / "sae")
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "manifest.json").write_text(DEEP)
    with pytest.raises(FileError, match=rf"manifest\.json': content {DEPTH}"):
        ilab.ActivationStore(tmp_path / "store")


def test_deep_json_inside_safetensors_files_is_refused(tmp_path):
    header = DEEP.encode()
    file = tmp_path / "w.safetensors"
    file.write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(FileError, match=rf"w\.safetensors': header {DEPTH}"):
        read_state_file(file, "job")
    state = tmp_path / "checkpoint.safetensors"
    save_state(state, "job", {"n": 1}, {"w": torch.zeros(2)})
    meta = {"format": "interplab-checkpoint", "version": "1", "job": "job", "inputs": DEEP, "state": "{}"}
    state.write_bytes(save({"w": torch.zeros(2)}, metadata=meta))
    with pytest.raises(FileError, match=rf"checkpoint\.safetensors': inputs {DEPTH}"):
        read_state_file(state, "job")
    vector = tmp_path / "v.safetensors"
    vector.write_bytes(save({"direction": torch.ones(4)}, metadata={"format": "interplab.steering_vector/1",
                                                                     "interplab": DEEP}))  # fmt: skip
    with pytest.raises(FileError, match=DEPTH):
        ilab.steering.SteeringVector.load(vector)


def test_a_deep_corpus_line_is_named_like_any_bad_line(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"text": "fine"}) + "\n" + DEEP + "\n")
    with pytest.raises(ValueError, match=r"c\.jsonl:2: expected a JSON object"):
        check_jsonl(corpus)
