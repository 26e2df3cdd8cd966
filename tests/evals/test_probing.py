"""Sparse probing (SAEBench definition) against a brute-force computation on a tiny model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.evals.labelled import brown_letters, passages
from interplab.core.evals.probing import sparse_probing
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import interplab as ilab
from tests.tiny import tiny_hf_model, tiny_tokenizer

SITE = "blocks.0.hook_resid_post"
ANIMALS = ["cat", "dog", "bird", "fox"]
COLOURS = ["red", "blue", "green"]


def _data(n: int = 24) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(0)
    texts, labels = [], []
    for i in range(n):
        kind = ["animal", "colour", "both"][i % 3]
        words = list(rng.choice(["the", "a", "sat", "on", "mat", "and", "ran", "big", "small"], size=5))
        if kind in ("animal", "both"):
            words.insert(int(rng.integers(0, 5)), str(rng.choice(ANIMALS)))
        if kind in ("colour", "both"):
            words.insert(int(rng.integers(0, 5)), str(rng.choice(COLOURS)))
        texts.append(" ".join(words))
        labels.append(kind)
    return texts, labels


def test_sparse_probing_matches_brute_force() -> None:
    hf, tok = tiny_hf_model("gpt2"), tiny_tokenizer()
    model = ilab.load_model(hf, tokenizer=tok)
    sae = ilab.SAE.create("standard", d_in=32, d_sae=48, site=SITE)
    texts, labels = _data()
    result = sparse_probing(sae, model, texts, labels, ks=(1, 3), test_fraction=0.25, seed=5, batch_size=5,
                            progress=False)  # fmt: skip
    # reference: one text at a time, plain means, numpy selection, the same probe recipe
    X, Z = [], []
    for text in texts:
        ids = tok(text, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            h = hf(ids, output_hidden_states=True).hidden_states[1][0, 1:]
            X.append(h.mean(0).numpy())
            Z.append(sae.encode(h).mean(0).numpy())
    X, Z, y_all = np.array(X), np.array(Z), np.array(labels)
    for cls in sorted(set(labels)):
        rng = np.random.default_rng(5)
        pos = np.flatnonzero(y_all == cls)
        neg = rng.permutation(np.flatnonzero(y_all != cls))[: len(pos)]
        pos = rng.permutation(pos)[: len(neg)]
        t_pos, t_neg = round(len(pos) * 0.25), round(len(neg) * 0.25)
        test, train = np.r_[pos[:t_pos], neg[:t_neg]], np.r_[pos[t_pos:], neg[t_neg:]]
        ytr, yte = (y_all[train] == cls).astype(int), (y_all[test] == cls).astype(int)

        def acc(F: np.ndarray, ytr=ytr, yte=yte, train=train, test=test) -> float:
            p = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000)).fit(F[train], ytr)
            return float((p.predict(F[test]) == yte).mean())

        assert result.scores.loc[cls, "llm_accuracy"] == pytest.approx(acc(X))
        for k in (1, 3):
            gap = [abs(Z[train][ytr == 1, j].mean() - Z[train][ytr == 0, j].mean()) for j in range(48)]
            best = sorted(range(48), key=lambda j: -gap[j])[:k]
            assert sorted(result.selected[cls][k]) == sorted(best)
            assert result.scores.loc[cls, f"sae_top_{k}_accuracy"] == pytest.approx(acc(Z[:, best]))
    assert result.scores.loc["mean", "llm_accuracy"] == pytest.approx(result.scores.drop("mean").llm_accuracy.mean())
    table = result.table
    assert set(table.group) == {"animal", "colour", "both", "mean"} and len(table) == 4 * 3


def test_bad_labels_fail_before_any_forward_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    model = ilab.load_model(tiny_hf_model("gpt2"), tokenizer=tiny_tokenizer())
    monkeypatch.setattr(type(model), "run_sites", lambda *a, **k: pytest.fail("a forward pass ran"))
    sae = ilab.SAE.create("standard", d_in=32, d_sae=48, site=SITE)
    texts, labels = _data()
    with pytest.raises(ValueError, match="one label per text: 24 texts, got 23 labels"):
        sparse_probing(sae, model, texts, labels[:-1])
    with pytest.raises(ValueError, match="at least two classes"):
        sparse_probing(sae, model, texts, ["x"] * 24)
    with pytest.raises(ValueError, match=r"k must be an integer in 1\.\.48, got 100"):
        sparse_probing(sae, model, texts, labels, ks=(1, 100))


def test_brown_genres_follow_the_catalogue() -> None:
    letters = brown_letters()
    assert len(letters) == 500 and letters[0] == "A" and letters[-1] == "R"
    assert letters.count("J") == 80 and letters.count("G") == 75
    assert passages("a b c d e", 2) == ["a b", "c d"]
