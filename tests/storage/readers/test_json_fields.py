"""JSON fields read with exact types, each error naming the file and the field (core/storage/readers/json_fields.py)."""

from __future__ import annotations

import json

import pytest
from interplab.core.storage.readers import Fields, FileError, read_json


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
