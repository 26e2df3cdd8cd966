"""The prepared tokenizer.json holds its BPE merges as strings, minified; an older prepared folder is upgraded once.

The embedded model's tokenizer.json pretty-printed with merges as pairs is 33 MB and takes about 1.5 s to parse;
the compact form parses in about 1.1 s and gives the same token ids.
"""

from __future__ import annotations

import json

import pytest
from interplab.core.loading import embedded
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

TEXTS = ["the cat sat on the mat", "a dog and a cat", "the theatre thereafter", "mat mats matter"] * 20


def _bpe(path):
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=80, special_tokens=["[UNK]"]))
    tok.save(str(path), pretty=True)
    data = json.loads(path.read_text())
    assert isinstance(data["model"]["merges"][0], list)  # the pair form, as the conversion writes it
    return tok


def test_compact_tokenizer_gives_the_same_ids(tmp_path):
    path = tmp_path / "tokenizer.json"
    tok = _bpe(path)
    size = path.stat().st_size
    assert embedded.compact_tokenizer(path)
    data = json.loads(path.read_text())
    assert all(isinstance(m, str) and m.count(" ") == 1 for m in data["model"]["merges"])
    assert path.stat().st_size < size
    again = Tokenizer.from_file(str(path))
    for text in [*TEXTS[:4], "unseen words, the theatre"]:
        assert again.encode(text).ids == tok.encode(text).ids


def test_a_merge_with_a_space_is_left_as_pairs(tmp_path):
    path = tmp_path / "tokenizer.json"
    _bpe(path)
    data = json.loads(path.read_text())
    data["model"]["merges"][0] = ["a b", "c"]  # "a b c" would be ambiguous as a string
    path.write_text(json.dumps(data))
    assert not embedded.compact_tokenizer(path)
    assert json.loads(path.read_text())["model"]["merges"][0] == ["a b", "c"]


def test_an_older_prepared_folder_is_upgraded_once(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPLAB_CACHE", str(tmp_path))
    folder = embedded.embedded_model_dir()
    folder.mkdir(parents=True)
    _bpe(folder / "tokenizer.json")
    (folder / "interplab-ready").write_text(json.dumps({**embedded.FORMAT, "source": "x.gguf"}))
    assert embedded.prepare_embedded_model() == folder  # format 3: not converted again (no GGUF needed)
    mark = embedded.prepared_format()
    assert mark["merges"] == "strings" and mark["source"] == "x.gguf" and mark["format"] == embedded.FORMAT["format"]
    assert isinstance(json.loads((folder / "tokenizer.json").read_text())["model"]["merges"][0], str)
    stamp = (folder / "tokenizer.json").stat().st_mtime_ns
    embedded.prepare_embedded_model()
    assert (folder / "tokenizer.json").stat().st_mtime_ns == stamp  # once


@pytest.mark.embedded
def test_the_embedded_tokenizer_loads_from_either_form(embedded):
    ids = embedded.to_tokens("The theatre's thereafter: 12,345 cats.")["input_ids"][0].tolist()
    assert len(ids) > 5 and embedded.tokenizer.decode(ids[1:]) == "The theatre's thereafter: 12,345 cats."
