"""PS-Eval (polysemy): the built-in dataset against the embedded tokenizer, metrics against brute force."""

from __future__ import annotations

import json
from itertools import combinations

import numpy as np
import pytest
import torch
from interplab.core.evals.polysemy import PolyWord, Sense, check_polysemy, load_polysemy, polysemy
from interplab.core.storage.readers import FileError

import interplab as ilab
from tests.tiny import tiny_hf_model, tiny_tokenizer

SITE = "blocks.0.hook_resid_post"
WORDS = [
    PolyWord("dog", [Sense("a", ["the dog sat", "a big dog ran", "the red dog sat on the mat"]),
                     Sense("b", ["when the dog went to the store", "the lazy dog and the cat"])]),
    PolyWord("tree", [Sense("a", ["the tree", "a big green tree"]), Sense("b", ["the bird sat on the tree"]),
                      Sense("c", ["John gave the tree a drink", "the tree and the house"])]),
]  # fmt: skip


def _sae(d: int, d_sae: int = 16, seed: int = 3) -> ilab.SAE:
    sae = ilab.SAE.create("topk", d_in=d, d_sae=d_sae, k=3, site=SITE)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        sae.W_enc.copy_(torch.randn(d, d_sae, generator=gen))
        sae.b_enc.zero_()
    return sae


def test_metrics_match_brute_force() -> None:
    hf, tok = tiny_hf_model("gpt2"), tiny_tokenizer()
    model = ilab.load_model(hf, tokenizer=tok)
    sae = _sae(32)
    result = polysemy(sae, model, WORDS, batch_size=3, progress=False)
    # reference: one text at a time through the Hugging Face model, the word found by its id, plain loops
    tops, senses, words = [], [], []
    for pw in WORDS:
        wid = tok.convert_tokens_to_ids(pw.word)
        for s, sense in enumerate(pw.senses):
            for text in sense.contexts:
                ids = tok(text, return_tensors="pt")["input_ids"]
                with torch.no_grad():
                    h = hf(ids, output_hidden_states=True).hidden_states[1][0]
                pos = ids[0].tolist().index(wid)
                lat = sae.encode(h[pos])
                tops.append(int(lat.argmax()) if float(lat.max()) > 0 else -1)
                senses.append(s)
                words.append(pw.word)
    counts = {"tp": 0, "tn": 0, "fp": 0, "fn": 0}
    for a, b in combinations(range(len(tops)), 2):
        if words[a] != words[b]:
            continue
        different, separated = senses[a] != senses[b], tops[a] != tops[b]
        key = ("t" if different == separated else "f") + ("p" if separated else "n")
        counts[key] += 1
    tp, tn, fp, fn = counts["tp"], counts["tn"], counts["fp"], counts["fn"]
    assert result.contexts.top_latent.tolist() == tops
    assert len(result.pairs) == tp + tn + fp + fn == 10 + 10
    assert result.metrics["accuracy"] == pytest.approx((tp + tn) / (tp + tn + fp + fn))
    assert result.metrics["recall"] == pytest.approx(tp / (tp + fn))
    assert result.metrics["specificity"] == pytest.approx(tn / (tn + fp))
    if tp + fp:
        assert result.metrics["precision"] == pytest.approx(tp / (tp + fp))
    assert len(set(tops)) > 1  # the check is not vacuous
    table = result.table
    assert set(table.metric) == {"accuracy", "precision", "recall", "specificity", "n_pairs"}
    assert (table.suite == "polysemy").all() and (table.site == SITE).all()
    assert len(result.per_word()) == 2


def test_bad_words_fail_before_any_forward_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    model = ilab.load_model(tiny_hf_model("gpt2"), tokenizer=tiny_tokenizer())
    monkeypatch.setattr(type(model), "run_sites", lambda *a, **k: pytest.fail("a forward pass ran"))
    two_tokens = [PolyWord("dog cat", [Sense("a", ["the dog cat"]), Sense("b", ["a dog cat"])])]
    with pytest.raises(ValueError, match=r"'dog cat' is not one token for this tokenizer"):
        polysemy(_sae(32), model, two_tokens)
    missing = [PolyWord("dog", [Sense("a", ["the dog sat"]), Sense("b", ["the cat sat"])])]
    with pytest.raises(ValueError, match=r"Context 'the cat sat' .* holds the token ' dog' 0 times"):
        polysemy(_sae(32), model, missing)
    with pytest.raises(TypeError, match="sae must be an interplab SAE"):
        polysemy("sae", model, WORDS)


def test_polysemy_files_are_validated(tmp_path) -> None:
    bad = tmp_path / "p.json"
    bad.write_text(
        json.dumps(
            {
                "format": "interplab-polysemy",
                "version": 1,
                "words": [{"word": "bank", "senses": [{"gloss": "x", "contexts": ["a bank"]}]}],
            }
        )
    )
    with pytest.raises(FileError, match="'bank' needs at least two senses"):
        load_polysemy(bad)
    bad.write_text(json.dumps({"format": "other", "version": 1, "words": []}))
    with pytest.raises(FileError, match="format"):
        load_polysemy(bad)


@pytest.mark.embedded
def test_builtin_dataset_is_single_tokens_for_the_embedded_tokenizer(embedded) -> None:
    words = load_polysemy()
    assert len(words) >= 40
    assert all(len(w.senses) >= 2 and all(len(s.contexts) >= 5 for s in w.senses) for w in words)
    texts, positions, _ = check_polysemy(embedded.tokenizer, words)  # raises on a multi-token word
    assert len(texts) == sum(len(s.contexts) for w in words for s in w.senses)
    assert len({w.word for w in words}) == len(words)
    assert np.all(np.array(positions) >= 1)  # after BOS


def test_a_list_of_saes_is_read_in_one_pass_and_matches_each_alone() -> None:
    model = ilab.load_model(tiny_hf_model("gpt2"), tokenizer=tiny_tokenizer())
    a = _sae(32, seed=3)
    b = ilab.SAE.create("topk", d_in=32, d_sae=16, k=3, site="blocks.1.hook_mlp_out")
    calls = []
    real = type(model).run_sites
    model.run_sites = lambda enc, sites: calls.append(list(sites)) or real(model, enc, sites)  # type: ignore[method-assign]
    both = polysemy([a, b], model, WORDS, batch_size=100, progress=False)
    assert len(calls) == 1 and len(calls[0]) == 2
    for sae, got in zip((a, b), both, strict=True):
        alone = polysemy(sae, model, WORDS, progress=False)
        assert got.site == alone.site and got.metrics == alone.metrics
        assert got.contexts.top_latent.tolist() == alone.contexts.top_latent.tolist()
