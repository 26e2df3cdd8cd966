"""Feature absorption (SAEBench, first-letter task): a general latent silently off where a specific one took over.

1. Activations of single-token words at the site (each word alone after BOS, or in ``template``).
2. A logistic-regression probe for the first letter on the activations (train split): its
   direction per letter ``p_L`` says what "starts with L" looks like in the model.
3. Per letter, the *main* latents: k-sparse probing on the SAE's latents (latents ranked by mean
   difference), k grown from 1 while the test F1 still rises by at least ``f1_jump`` (up to ``k_max``).
4. On test words of letter L that the probe gets right, the SAE *misses* when no main latent fires,
   and the miss is *absorbed* when the active latent that contributes most along ``p_L``
   (activation x decoder . p_L) has a decoder cosine with ``p_L`` of at least ``cos_threshold`` and
   carries at least ``min_share`` of the active latents' positive contributions along ``p_L``:
   another latent carries the letter. (SAEBench's cosine threshold; the share is interplab's guard
   against crediting a latent that only grazes the direction.) The absorption rate is absorbed / probe-correct words.

``convention="sae-bench"`` applies sae-bench 0.6.0's per-word rule instead
(``FeatureAbsorptionCalculator``, see :func:`sae_bench_word_scores`): a latent's projection is its
activation times its decoder's *cosine* with ``p_L``; a word is fully absorbed when every main latent
is below 1e-8, the top-projecting latent has cosine >= ``cos_threshold`` (0.025) and carries at least
0.4 of the activation's own projection ``x . p_L`` (which must be >= 0); the *absorption fraction*
credits up to 3 non-main latents with cosine >= 0.1. The words counted are the test words whose
one-vs-rest probe (balanced logistic regression per letter) scores above 0, and the main latents'
k-sparse probe grows while F1 rises by more than ``f1_jump`` (as sae-bench's
``add_feature_splits_to_metrics_df``). What stays interplab's: latents are ranked by mean difference
(sae-bench ranks them by an L1-penalised probe trained with Adam) and all probes are scikit-learn fits
(sae-bench's letter probe is trained with Adam). ``tests/evals/test_reference_sae_bench.py`` checks the
per-word rule against sae-bench's calculator on the same activations, directions and main latents.

Example
-------
>>> result = absorption(sae, model)
>>> result.scores.loc["mean", "absorption_rate"]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from ..checks import check_int, check_positive_int
from ..memory.freeing import scope
from ..views.charts import offline
from .tidy import check_sae, encode_rows, site_batches, tidy

if TYPE_CHECKING:
    from ..model.model import Model
    from ..saes.base import SAE


def vocabulary_words(tokenizer: Any, n: int = 1500, seed: int = 0, min_len: int = 3) -> list[str]:
    """Up to ``n`` lowercase alphabetic words that are single tokens with a leading space, drawn with ``seed``."""
    pattern = re.compile(rf"^ [a-z]{{{min_len},}}$")
    pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    found = sorted({s for s in pieces if pattern.match(s)})
    rng = np.random.default_rng(seed)
    return sorted(w.strip() for w in rng.permutation(found)[:n].tolist())


def word_ids(tokenizer: Any, words: Sequence[str], template: str) -> tuple[list[str], list[int]]:
    """Texts and the word's token position in each; a ValueError naming a word that is not one token."""
    texts, positions = [], []
    for word in words:
        if not isinstance(word, str) or not word or not word[0].isalpha():
            raise ValueError(f"Absorption words must start with a letter, got {word!r}.")
        spaced = " {word}" in template
        ids = tokenizer((" " if spaced else "") + word, add_special_tokens=False)["input_ids"]
        text = template.format(word=word)
        toks = tokenizer(text)["input_ids"]
        if len(ids) != 1 or toks.count(ids[0]) != 1 or tokenizer.decode(ids).strip() != word:
            raise ValueError(f"Absorption word {word!r} is not one token in {text!r}; use single-token words.")
        texts.append(text)
        positions.append(toks.index(ids[0]))
    return texts, positions


def f1(y: np.ndarray, pred: np.ndarray) -> float:
    tp, fp, fn = float((y & pred).sum()), float((~y & pred).sum()), float((y & ~pred).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def main_latents(Z_tr: np.ndarray, y_tr: np.ndarray, Z_te: np.ndarray, y_te: np.ndarray, k_max: int,
                 f1_jump: float, strict: bool = False) -> tuple[list[int], float]:  # fmt: skip
    """The main latents of one letter by k-sparse probing, and their probe's test F1 (``strict``: k grows
    only while F1 rises by more than ``f1_jump``, as sae-bench; otherwise by at least ``f1_jump``)."""
    from sklearn.linear_model import LogisticRegression

    order = np.argsort(-(Z_tr[y_tr].mean(0) - Z_tr[~y_tr].mean(0)), kind="stable")
    best: tuple[list[int], float] = ([int(order[0])], -1.0)
    for k in range(1, k_max + 1):
        idx = order[:k]
        probe = LogisticRegression(max_iter=1000, class_weight="balanced").fit(Z_tr[:, idx], y_tr)
        score = f1(y_te, probe.predict(Z_te[:, idx]).astype(bool))
        if k > 1 and (score - best[1] <= f1_jump if strict else score - best[1] < f1_jump):
            break
        best = ([int(i) for i in idx], score)
    return best


CONVENTIONS = ("interplab", "sae-bench")
EPS = 1e-8  # sae-bench: a main latent "fires" at or above this


def sae_bench_word_scores(
    X: np.ndarray, Z: np.ndarray, W_dec: np.ndarray, direction: np.ndarray, main: Sequence[int],
    cos_threshold: float = 0.025, fraction_cos_threshold: float = 0.1, proportion: float = 0.4, max_absorbing: int = 3,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """sae-bench's per-word absorption for one letter: ``(absorption_fraction [N], is_full_absorption [N])``
    of words with activations ``X [N, d]`` and latents ``Z [N, d_sae]``, the letter's probe ``direction [d]``
    and its ``main`` latents (sae-bench 0.6.0, ``FeatureAbsorptionCalculator.calculate_absorption``)."""
    p = np.asarray(direction, dtype=np.float32)
    p = p / np.linalg.norm(p)
    W = np.asarray(W_dec, dtype=np.float32)
    cos = (W @ p) / np.maximum(np.linalg.norm(W, axis=1), EPS)
    proj = np.asarray(Z, dtype=np.float32) * cos  # [N, d_sae]
    act = np.asarray(X, dtype=np.float32) @ p  # [N]
    main = list(main)
    main_proj = proj[:, main].sum(1)
    candidate = np.ones(proj.shape[1], dtype=bool)
    candidate[main] = False
    candidate &= cos >= fraction_cos_threshold
    fraction, full = np.zeros(len(act)), np.zeros(len(act), dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):  # x . p == 0: sae-bench divides by it too
        for i in range(len(act)):
            fraction[i], full[i] = _sae_bench_word(act[i], proj[i], Z[i], main, main_proj[i], candidate, cos,
                                                   cos_threshold, proportion, max_absorbing)  # fmt: skip
    return fraction, full


def _sae_bench_word(act: float, proj: np.ndarray, z: np.ndarray, main: list[int], main_proj: float,
                    candidate: np.ndarray, cos: np.ndarray, cos_threshold: float, proportion: float,
                    max_absorbing: int) -> tuple[float, bool]:  # fmt: skip
    """One word: its absorption fraction and whether it is fully absorbed (sae-bench's branches, in order)."""
    absorbing = np.sort(proj[candidate & (proj > 0)])[::-1][:max_absorbing].sum()
    if main_proj >= act or absorbing / act < proportion:
        fraction = 0.0
    elif main_proj <= 0.0:
        fraction = 1.0
    else:
        a = min(absorbing, act - main_proj)
        fraction = float(np.clip(a / (a + main_proj), 0.0, 1.0))
    top = int(np.argmax(proj))
    full = bool((z[main] < EPS).all() and cos[top] >= cos_threshold and act >= 0 and proj[top] / act >= proportion)
    return fraction, full


def absorption_scores(
    X: np.ndarray, Z: np.ndarray, W_dec: np.ndarray, letters: np.ndarray, test_fraction: float = 0.3,
    seed: int = 0, k_max: int = 5, f1_jump: float = 0.03, cos_threshold: float = 0.025, min_words: int = 10,
    min_share: float = 0.5, convention: str = "interplab",
) -> tuple[pd.DataFrame, dict[str, list[int]]]:  # fmt: skip
    """The absorption computation on arrays: activations ``X [N, d]``, latents ``Z [N, d_sae]``, decoder
    ``W_dec [d_sae, d]`` and each word's first letter. Returns per-letter scores (and ``mean``) and main latents."""
    from sklearn.linear_model import LogisticRegression

    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}.")

    keep_letters = [c for c, n in zip(*np.unique(letters, return_counts=True), strict=True) if n >= min_words]
    if len(keep_letters) < 2:
        raise ValueError(f"Fewer than two first letters have {min_words} words or more; give more words.")
    mask = np.isin(letters, keep_letters)
    X, Z, letters = X[mask], Z[mask], letters[mask]
    rng = np.random.default_rng(seed)
    test = np.zeros(len(letters), dtype=bool)
    for c in keep_letters:
        idx = rng.permutation(np.flatnonzero(letters == c))
        test[idx[: max(1, round(len(idx) * test_fraction))]] = True
    probe = LogisticRegression(max_iter=2000).fit(X[~test], letters[~test])
    pred = probe.predict(X[test])
    coef = np.concatenate([-probe.coef_, probe.coef_]) if len(probe.classes_) == 2 else probe.coef_
    dirs = coef / np.linalg.norm(coef, axis=1, keepdims=True)
    dec = W_dec / np.maximum(np.linalg.norm(W_dec, axis=1, keepdims=True), 1e-12)
    rows, mains = {}, {}
    for li, c in enumerate(probe.classes_.tolist()):
        y_tr, y_te = letters[~test] == c, letters[test] == c
        main, main_f1 = main_latents(Z[~test], y_tr, Z[test], y_te, k_max, f1_jump, strict=convention == "sae-bench")
        mains[c] = main
        if convention == "sae-bench":
            rows[c] = _sae_bench_letter(X, Z, W_dec, letters, test, c, cos_threshold, main, main_f1)
            continue
        cos = dec @ dirs[li]
        correct = np.flatnonzero(y_te & (pred == c))
        missed = absorbed = 0
        for t in correct:
            z = Z[test][t]
            if (z[main] > 0).any():
                continue
            missed += 1
            active = np.flatnonzero(z > 0)
            if active.size:
                contrib = z[active] * (W_dec[active] @ dirs[li])
                best = int(np.argmax(contrib))
                share = contrib[best] / max(float(contrib[contrib > 0].sum()), 1e-12)
                absorbed += bool(cos[active[best]] >= cos_threshold and contrib[best] > 0 and share >= min_share)
        n = max(1, len(correct))
        rows[c] = {"absorption_rate": absorbed / n, "false_negative_rate": missed / n, "main_f1": main_f1,
                   "n_main_latents": len(main), "probe_accuracy": float((pred[y_te] == c).mean()),
                   "n_test_words": float(y_te.sum())}  # fmt: skip
    scores = pd.DataFrame.from_dict(rows, orient="index")
    scores.loc["mean"] = scores.mean(0)
    return scores, mains


def _sae_bench_letter(X: np.ndarray, Z: np.ndarray, W_dec: np.ndarray, letters: np.ndarray, test: np.ndarray, c: str,
                      cos_threshold: float, main: list[int], main_f1: float) -> dict[str, float]:  # fmt: skip
    """One letter's scores under sae-bench's rule: a balanced one-vs-rest probe picks the words counted."""
    from sklearn.linear_model import LogisticRegression

    probe = LogisticRegression(max_iter=2000, class_weight="balanced").fit(X[~test], letters[~test] == c)
    y_te = letters[test] == c
    counted = y_te & (probe.decision_function(X[test]) > 0)
    direction = probe.coef_[0]
    fraction, full = sae_bench_word_scores(X[test][counted], Z[test][counted], W_dec, direction, main, cos_threshold)
    missed = (Z[test][counted][:, main] < EPS).all(1)
    n = max(1, int(counted.sum()))
    return {"absorption_rate": float(full.sum()) / n, "absorption_fraction": float(fraction.sum()) / n,
            "false_negative_rate": float(missed.sum()) / n, "main_f1": main_f1, "n_main_latents": len(main),
            "probe_accuracy": float(counted.sum() / max(1, y_te.sum())), "n_test_words": float(y_te.sum())}  # fmt: skip


@dataclass(repr=False)
class AbsorptionResult:
    """First-letter absorption of one SAE: per-letter scores (and ``mean``) and each letter's main latents."""

    site: str
    scores: pd.DataFrame
    main: dict[str, list[int]]

    @property
    def table(self) -> pd.DataFrame:
        return pd.concat([tidy("absorption", self.site, row.to_dict(), group=g) for g, row in self.scores.iterrows()],
                         ignore_index=True)  # fmt: skip

    def chart(self) -> Any:
        """Absorption and false-negative rates per letter."""
        import altair as alt

        df = (
            self.scores.drop("mean")
            .reset_index(names="letter")
            .melt(id_vars="letter", value_vars=["absorption_rate", "false_negative_rate"], var_name="metric")
        )
        return offline(alt.Chart(df).mark_bar().encode(x="letter:N", y="value:Q", color="metric:N",
                       xOffset="metric:N", tooltip=["letter", "metric", "value"]).properties(
                       title=f"First-letter absorption at {self.site}", width=420, height=160))  # fmt: skip

    def __repr__(self) -> str:
        m = self.scores.loc["mean"]
        return (
            f"AbsorptionResult({self.site}, {len(self.scores) - 1} letters: absorption_rate="
            f"{m.absorption_rate:.3f}, false_negative_rate={m.false_negative_rate:.3f})"
        )


@scope()
def absorption(
    sae: SAE, model: Model, words: Sequence[str] | None = None, site: str | None = None, template: str = " {word}",
    n_words: int = 1500, k_max: int = 5, f1_jump: float = 0.03, cos_threshold: float = 0.025,
    test_fraction: float = 0.3, seed: int = 0, min_words: int = 10, batch_size: int = 128, min_share: float = 0.5,
    convention: str = "interplab",
) -> AbsorptionResult:  # fmt: skip
    """First-letter feature absorption of ``sae`` (SAEBench's task) on single-token ``words``
    (default: ``n_words`` drawn from the tokenizer's lowercase words); ``convention="sae-bench"`` applies
    sae-bench 0.6.0's per-word rule and adds an ``absorption_fraction`` column (module docstring).

    >>> absorption(sae, model, convention="sae-bench").scores.loc["mean"]
    """
    check_sae(sae)
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}.")
    check_int("k_max", k_max, 1, sae.d_sae)
    check_positive_int("batch_size", batch_size)
    if "{word}" not in template:
        raise ValueError(f"template must hold '{{word}}', got {template!r}.")
    site = sae.check_fits(model, site)
    if words is None:
        words = vocabulary_words(model.tokenizer, check_positive_int("n_words", n_words), seed)
    texts, positions = word_ids(model.tokenizer, list(words), template)
    enc = model.to_tokens(texts)
    pos = torch.tensor(positions)
    xs = []
    for rows, x in site_batches(model, site, enc, batch_size):
        p = pos[rows]
        xs.append(x[torch.arange(len(p)), p])
    X = torch.cat(xs)
    Z = encode_rows(sae, X).numpy()
    letters = np.array([w[0].lower() for w in words])
    scores, main = absorption_scores(X.numpy(), Z, sae.W_dec.detach().float().cpu().numpy(), letters, test_fraction,
                                     seed, k_max, f1_jump, cos_threshold, min_words, min_share, convention)  # fmt: skip
    return AbsorptionResult(site=site, scores=scores, main=main)
