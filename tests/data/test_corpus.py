"""Corpora: every accepted form, clear errors, the Brown detokeniser and the default corpus."""

from __future__ import annotations

import json
import re

import interplab.core.data.corpus as corpus_mod
import pytest
from interplab.core.data.corpus import _detokenize_brown, iter_texts


def test_list_tuple_and_generator():
    docs = ["the cat sat", "a dog ran", "  spaced  "]
    assert list(iter_texts(docs)) == docs
    assert list(iter_texts(tuple(docs))) == docs
    assert list(iter_texts(d for d in docs)) == docs


def test_txt_file_is_one_document(tmp_path):
    text = "First line.\nSecond line, with ünïcode.\n"
    path = tmp_path / "notes.txt"
    path.write_text(text, encoding="utf-8")
    assert list(iter_texts(path)) == [text]
    assert list(iter_texts(str(path))) == [text]


def test_jsonl_file_one_document_per_line(tmp_path):
    path = tmp_path / "docs.jsonl"
    rows = [{"text": "one", "id": 1}, {"text": 'two "quoted"\nnewline'}, {"text": "three"}]
    path.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n\n   \n" + json.dumps(rows[2]) + "\n")
    assert list(iter_texts(path)) == ["one", 'two "quoted"\nnewline', "three"]


def test_folder_of_txt_and_jsonl_in_sorted_order(tmp_path):
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "b1"}) + "\n" + json.dumps({"text": "b2"}) + "\n")
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.txt").write_text("c")
    (tmp_path / "readme.md").write_text("not a corpus file")
    (tmp_path / "data.json").write_text('{"text": "not jsonl"}')
    assert list(iter_texts(tmp_path)) == ["a", "b1", "b2", "c"]


class FakeDataset:
    """What iter_texts needs of a Hugging Face ``datasets.Dataset``: column names and row dicts."""

    def __init__(self, rows: list[dict], columns: list[str]):
        self.rows, self.column_names = rows, columns

    def __iter__(self):
        return iter(self.rows)

    def __len__(self):
        return len(self.rows)


def test_dataset_like_object_uses_the_text_column():
    rows = [{"text": "x y", "label": 0}, {"text": "z", "label": 1}]
    assert list(iter_texts(FakeDataset(rows, ["text", "label"]))) == ["x y", "z"]


def test_dataset_without_text_column_names_its_columns():
    with pytest.raises(ValueError, match="text") as err:
        list(iter_texts(FakeDataset([{"content": "x"}], ["content", "label"])))
    assert "content" in str(err.value) and "label" in str(err.value)


def test_default_and_none_mean_the_default_corpus(monkeypatch):
    monkeypatch.setattr(corpus_mod, "default_corpus", lambda: ["default doc"])
    assert list(iter_texts("default")) == ["default doc"]
    assert list(iter_texts(None)) == ["default doc"]


def test_missing_path_is_named(tmp_path):
    missing = tmp_path / "nowhere" / "corpus.txt"
    with pytest.raises(FileNotFoundError) as err:
        list(iter_texts(missing))
    assert str(missing) in str(err.value)
    assert "default" in str(err.value), "the message should list the accepted forms"


def test_a_missing_corpus_path_is_an_error_not_the_text(monkeypatch):
    from interplab.core.features import feature_data

    from tests.contracts.test_crash_safety import SITE, _sae
    from tests.model.test_limits import no_forward
    from tests.tiny import tiny_model

    gpt2 = tiny_model("gpt2")
    handle = no_forward(gpt2, monkeypatch)
    try:
        with pytest.raises(FileNotFoundError, match=r"Corpus path '/no/such/file\.jsonl' does not exist"):
            feature_data(_sae(), gpt2, "/no/such/file.jsonl")
        with pytest.raises(FileNotFoundError, match=r"/no/such/file\.jsonl"):
            gpt2.cache("/no/such/file.jsonl", SITE, "/tmp/never-written", n_tokens=10)
    finally:
        handle.remove()


def test_empty_folder(tmp_path):
    (tmp_path / "ignored.md").write_text("x")
    with pytest.raises(ValueError, match=r"no \.txt or \.jsonl") as err:
        list(iter_texts(tmp_path))
    assert str(tmp_path) in str(err.value)


def test_non_string_item_is_named():
    with pytest.raises(TypeError) as err:
        list(iter_texts(["fine", "also fine", 42]))
    assert "2" in str(err.value) and "int" in str(err.value)


@pytest.mark.parametrize("bad", [42, 3.5, object()])
def test_unsupported_type(bad):
    with pytest.raises(TypeError, match=type(bad).__name__):
        list(iter_texts(bad))


def test_jsonl_line_without_text_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"text": "ok"}) + "\n" + json.dumps({"body": "no text key"}) + "\n")
    with pytest.raises(ValueError) as err:
        list(iter_texts(path))
    assert "bad.jsonl" in str(err.value) and "2" in str(err.value) and "text" in str(err.value)


# --------------------------------------------------------------------------- Brown detokeniser


def test_brown_detokenizer_quotes_and_punctuation():
    tagged = "The/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' ./."
    assert _detokenize_brown(tagged) == 'The jury said "no evidence".'


def test_brown_detokenizer_paragraphs_brackets_and_clitics():
    tagged = (
        "\n\n\tThe/at Fulton/np-tl County/nn-tl Grand/jj-tl Jury/nn-tl said/vbd Friday/nr ,/, "
        "``/`` yes/rb ,/, ''/'' and/cc ``/`` no/at ''/'' ;/. it/pps was/bedz n't/* (/( "
        "really/rb )/) over/in ?/.\n\n\n\tA/at 1/2/cd cup/nn ,/, Atlanta/np 's/$ best/jjt !/.\n"
    )
    first, second = _detokenize_brown(tagged).split("\n\n")
    assert first == 'The Fulton County Grand Jury said Friday, "yes," and "no"; it wasn\'t (really) over?'
    assert second == "A 1/2 cup, Atlanta's best!"


def test_brown_detokenizer_skips_empty_blocks():
    assert _detokenize_brown("\n\n   \n\n") == ""


# --------------------------------------------------------------------------- default corpus


@pytest.mark.embedded
def test_default_corpus_is_large_english_prose():
    docs = corpus_mod.default_corpus()
    assert len(docs) >= 2_000
    assert all(isinstance(d, str) and d.strip() for d in docs)
    words = [w for d in docs for w in d.split()]
    assert len(words) >= 2_500_000
    text = "".join(docs)
    assert sum(c.isascii() for c in text) / len(text) > 0.99
    # Detokenised: no Brown tags (word/tag) or `` '' quote tokens left over.
    tagged = sum(bool(re.fullmatch(r"[A-Za-z]+/[a-z$*-]+", w)) for w in words)
    assert tagged / len(words) < 1e-3
    assert text.count("``") < 100
    common = {"the", "of", "and", "to", "a", "in"}
    assert sum(w.lower() in common for w in words) / len(words) > 0.1, "ordinary English"
    assert list(iter_texts("default"))[:3] == docs[:3]
