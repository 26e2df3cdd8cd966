"""First-letter absorption: a planted case with known answers, and the site path on a tiny model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.evals.absorption import absorption, absorption_scores

import interplab as ilab
from tests.tiny import tiny_hf_model, tiny_tokenizer


def _planted(n: int = 60, n_absorbed: int = 15, seed: int = 0):
    """Letters a and b along dims 0 and 1; latent 0 = "starts with a", latent 1 = "starts with b"; on the
    first ``n_absorbed`` a-words latent 0 is off and a token-specific latent (one each, decoder along a) fires."""
    rng = np.random.default_rng(seed)
    d, d_sae = 8, 2 + n_absorbed + 1
    letters = np.array(["a"] * n + ["b"] * n)
    X = rng.normal(0, 0.3, (2 * n, d))
    X[:n, 0] += 3.0
    X[n:, 1] += 3.0
    W_dec = np.zeros((d_sae, d))
    W_dec[0, 0] = W_dec[1, 1] = 1.0
    Z = np.zeros((2 * n, d_sae))
    Z[:n, 0] = 1.0
    Z[n:, 1] = 1.0
    for i in range(n_absorbed):
        Z[i, 0] = 0.0
        Z[i, 2 + i] = 2.0
        W_dec[2 + i] = 0.0
        W_dec[2 + i, 0], W_dec[2 + i, 2 + (i % 6)] = 1.0, 0.5  # mostly along "a"
    Z[:, -1] = rng.random(2 * n) > 0.5  # a noise latent orthogonal to both letters
    W_dec[-1, 7] = 1.0
    return X, Z, W_dec, letters


def test_planted_absorption_is_found() -> None:
    X, Z, W_dec, letters = _planted()
    scores, main = absorption_scores(X, Z, W_dec, letters, test_fraction=0.5, seed=3, f1_jump=0.5, min_words=5)
    # brute force: the same seeded split, then the words each letter's test half holds
    rng = np.random.default_rng(3)
    test = np.zeros(len(letters), dtype=bool)
    for c in ("a", "b"):
        idx = rng.permutation(np.flatnonzero(letters == c))
        test[idx[: round(len(idx) * 0.5)]] = True
    a_test = np.flatnonzero(test & (letters == "a"))
    expected = np.isin(a_test, np.arange(15)).mean()
    assert main == {"a": [0], "b": [1]}
    assert scores.loc["a", "probe_accuracy"] == 1.0
    assert scores.loc["a", "absorption_rate"] == pytest.approx(expected)
    assert scores.loc["a", "false_negative_rate"] == pytest.approx(expected)
    assert 0 < expected < 1
    assert scores.loc["b", "absorption_rate"] == 0.0
    # a miss whose active latent does not point along the letter is a false negative, not absorption
    W_off = W_dec.copy()
    W_off[2:17] = 0.0
    W_off[2:17, 7] = 1.0
    off, _ = absorption_scores(X, Z, W_off, letters, test_fraction=0.5, seed=3, f1_jump=0.5, min_words=5)
    assert off.loc["a", "absorption_rate"] == 0.0 and off.loc["a", "false_negative_rate"] == pytest.approx(expected)


def test_site_path_reads_each_word_token() -> None:
    hf, tok = tiny_hf_model("gpt2"), tiny_tokenizer()
    model = ilab.load_model(hf, tokenizer=tok)
    site = "blocks.0.hook_resid_post"
    sae = ilab.SAE.create("standard", d_in=32, d_sae=40, site=site)
    words = ["sat", "store", "small", "sad", "slow", "dog", "day", "drink", "big", "blue", "bird", "tree", "the"]
    captured = {}
    import importlib

    mod = importlib.import_module("interplab.core.evals.absorption")

    real = mod.absorption_scores

    def spy(X, Z, W_dec, letters, *args):
        captured.update(X=X, Z=Z, letters=letters)
        return real(X, Z, W_dec, letters, *args)

    mp = pytest.MonkeyPatch()
    mp.setattr(mod, "absorption_scores", spy)
    try:
        result = absorption(sae, model, words=words, min_words=3, batch_size=4, test_fraction=0.34)
    finally:
        mp.undo()
    for i, w in enumerate(words):  # reference: BOS + the word through the HF model
        ids = tok(" " + w, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            h = hf(ids, output_hidden_states=True).hidden_states[1][0, 1]
        assert np.allclose(captured["X"][i], h.numpy(), atol=1e-5)
        assert np.allclose(captured["Z"][i], sae.encode(h).detach().numpy(), atol=1e-5)
    assert list(captured["letters"]) == [w[0] for w in words]
    assert set(result.scores.index) == {"s", "d", "b", "mean"}


def test_bad_words_fail_before_any_forward_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    model = ilab.load_model(tiny_hf_model("gpt2"), tokenizer=tiny_tokenizer())
    monkeypatch.setattr(type(model), "run_sites", lambda *a, **k: pytest.fail("a forward pass ran"))
    sae = ilab.SAE.create("standard", d_in=32, d_sae=40, site="blocks.0.hook_resid_post")
    with pytest.raises(ValueError, match="'zebra' is not one token"):
        absorption(sae, model, words=["cat", "zebra"])
    with pytest.raises(ValueError, match="must start with a letter, got '42'"):
        absorption(sae, model, words=["cat", "42"])
