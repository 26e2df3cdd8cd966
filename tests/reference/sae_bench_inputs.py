"""The inputs of the sae-bench reference, written by interplab's side (run in interplab's environment).

    .venv/bin/python tests/reference/sae_bench_inputs.py        # rewrites tests/reference/sae_bench/

Writes, under ``tests/reference/sae_bench/``:

- ``inputs.json``: the probing texts with their class and split, the absorption words with their first
  letter and split, and for each absorption letter the probe direction and the main latents that
  interplab's absorption picks (sae-bench's absorption calculator is then run with exactly these);
- ``inputs.safetensors``: the tiny GPT-2's per-token activations of the probing texts at
  ``blocks.0.hook_resid_post`` (``probe_acts_BLD``, BOS and padding zeroed, as sae-bench's
  ``get_all_llm_activations(..., mask_bos_pad_eos_tokens=True)`` leaves them) and the planted
  absorption activations ``absorption_X``;
- ``probing_sae/`` and ``absorption_sae/``: two standard ReLU SAEs as SAELens folders (``SAE.save``).

The probing SAE is a seeded random one on the tiny model (tests/tiny.py); the absorption SAE is
planted by hand: latents 0-2 are "starts with a/b/c", and on some a-words a marker switches latent 0
off while a token-specific latent whose decoder points along "a" fires (absorption), or one whose
decoder is orthogonal to it fires (a false negative that is not absorption).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from interplab.core.evals.absorption import absorption_scores  # noqa: E402

import interplab as ilab  # noqa: E402
from tests.tiny import tiny_hf_model, tiny_tokenizer  # noqa: E402

OUT = Path(__file__).resolve().parent / "sae_bench"
SITE = "blocks.0.hook_resid_post"
CLASSES = {"animal": ["cat", "dog", "bird", "fox"], "colour": ["red", "blue", "green"],
           "mood": ["happy", "sad", "lazy", "quick"]}  # fmt: skip
FILLER = ["the", "a", "sat", "on", "mat", "and", "ran", "big", "small", "to", "house", "tree", "day", "night"]
N_PER_CLASS, N_TEST, D_SAE = 24, 8, 48
LETTERS, N_WORDS, D_ABS = ("a", "b", "c"), 24, 16


def probing_texts(seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    """Texts of three classes (a class word among filler words), their labels and a per-class train/test split."""
    rng = np.random.default_rng(seed)
    texts, labels, split = [], [], []
    for cls, words in CLASSES.items():
        for i in range(N_PER_CLASS):
            text = list(rng.choice(FILLER, size=int(rng.integers(2, 5)))) + list(rng.choice(words, size=3))
            texts.append(" ".join(rng.permutation(text)))
            labels.append(cls)
            split.append("test" if i < N_TEST else "train")
    return texts, labels, split


def probing_inputs() -> tuple[dict, dict]:
    hf, tok = tiny_hf_model("gpt2"), tiny_tokenizer()
    texts, labels, split = probing_texts()
    enc = tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        acts = hf(**enc, output_hidden_states=True).hidden_states[1]
    mask = enc["attention_mask"].bool().clone()
    mask[:, 0] = False  # BOS
    acts = acts * mask[..., None]
    torch.manual_seed(1)
    sae = ilab.SAE.create("standard", d_in=32, d_sae=D_SAE, site=SITE)
    sae.save(OUT / "probing_sae")
    return {"probe_acts_BLD": acts.contiguous()}, {"texts": texts, "labels": labels, "split": split, "site": SITE}


def planted_absorption() -> tuple[np.ndarray, ilab.SAE, list[str], list[str]]:
    """Word activations along one direction per first letter, and an SAE with planted absorption on a-words."""
    rng = np.random.default_rng(2)
    n = len(LETTERS) * N_WORDS
    letters = [c for c in LETTERS for _ in range(N_WORDS)]
    words = [f"{c}w{i}" for c in LETTERS for i in range(N_WORDS)]
    X = rng.normal(0, 0.2, (n, D_ABS))
    for i, c in enumerate(letters):
        X[i, LETTERS.index(c)] += 3.0 + rng.normal(0, 0.3)
    markers = {}  # a-word -> marker dim: 8..11 absorbed (decoder along a), 12 a false negative (decoder off a)
    for i in range(10):
        markers[i] = 8 + (i % 5)
        X[i, markers[i]] += 2.0
    d_sae = 3 + 5 + 6
    W_enc, b_enc, W_dec = np.zeros((D_ABS, d_sae)), np.zeros(d_sae), np.zeros((d_sae, D_ABS))
    for L in range(3):
        W_enc[L, L] = 1.0
        W_enc[8:13, L] = -3.0  # a marker switches the letter latent off
        b_enc[L] = -1.0
        W_dec[L, L] = 1.0
    for j in range(5):
        W_enc[8 + j, 3 + j], b_enc[3 + j] = 2.0, -1.0
        if j < 4:
            W_dec[3 + j, 0], W_dec[3 + j, 8 + j] = 1.0, 0.5  # mostly along "a": absorbs it
        else:
            W_dec[3 + j, 15] = 1.0  # orthogonal to every letter
    W_enc[:, 8:] = rng.normal(0, 0.3, (D_ABS, 6))
    b_enc[8:] = -0.5
    W_dec[8:] = rng.normal(0, 0.3, (6, D_ABS))
    W_dec /= np.linalg.norm(W_dec, axis=1, keepdims=True)
    sae = ilab.SAE.create("standard", d_in=D_ABS, d_sae=d_sae, site=SITE)
    with torch.no_grad():
        sae.W_enc.copy_(torch.tensor(W_enc)), sae.b_enc.copy_(torch.tensor(b_enc))
        sae.W_dec.copy_(torch.tensor(W_dec)), sae.b_dec.zero_()
    return X.astype(np.float32), sae, words, letters


def main() -> None:
    OUT.mkdir(exist_ok=True)
    tensors, meta = probing_inputs()
    X, sae, words, letters = planted_absorption()
    sae.save(OUT / "absorption_sae")
    with torch.no_grad():
        Z = sae.encode(torch.tensor(X)).numpy()
    W_dec = sae.W_dec.detach().numpy()
    # interplab's own probe directions and main latents (the split and probe of absorption_scores)
    seed, test_fraction = 0, 0.5
    rng = np.random.default_rng(seed)
    letters_arr = np.array(letters)
    test = np.zeros(len(letters), dtype=bool)
    for c in LETTERS:
        idx = rng.permutation(np.flatnonzero(letters_arr == c))
        test[idx[: round(len(idx) * test_fraction)]] = True
    _, main = absorption_scores(X, Z, W_dec, letters_arr, test_fraction=test_fraction, seed=seed, min_words=5)
    from sklearn.linear_model import LogisticRegression

    probe = LogisticRegression(max_iter=2000).fit(X[~test], letters_arr[~test])
    dirs = probe.coef_ / np.linalg.norm(probe.coef_, axis=1, keepdims=True)
    tensors["absorption_X"] = torch.tensor(X)
    directions = {c: d.tolist() for c, d in zip(probe.classes_.tolist(), dirs, strict=True)}
    meta["absorption"] = {"words": words, "letters": letters, "test": test.tolist(), "seed": seed,
                          "test_fraction": test_fraction, "main": main, "directions": directions}  # fmt: skip
    save_file(tensors, OUT / "inputs.safetensors")
    (OUT / "inputs.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
