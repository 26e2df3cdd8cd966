"""Sparse probing (SAEBench): how much of a full-activation probe does a probe on k SAE latents keep?

For each class of a labelled text set, a balanced one-versus-rest task: as many texts of other
classes as of the class, drawn with a seed, split into train and test. Each text is the mean of its
activations over tokens (BOS left out, at most ``max_tokens``), at the site and in the SAE's
latents. A logistic-regression probe on the full activation gives the reference accuracy; for each
k, the k latents whose mean differs most between the two sides of the training split get a probe of
their own. SAEBench reports test accuracy of each.

``convention="sae-bench"`` reproduces sae-bench 0.6.0's definition (``evals/sparse_probing``): each
class's texts are split into train and test first, and each side gets its own balanced task whose
negatives are ``ceil(n_pos / n_other_classes)`` texts drawn from each other class, then ``n_pos`` of
those; the top-k probes are ``LogisticRegression(C=1, max_iter=1000)`` on the raw (unscaled) latents;
the full-activation probe is a linear probe trained with AdamW (lr 1e-2, batch 250, up to 100 epochs,
stopped after 10 epochs without a better test accuracy), reporting its best test accuracy (sae-bench
selects on the test split). The default stays interplab's: one balanced task per class shared by all
probes, standardised lbfgs probes for both, and no selection on the test split.
``tests/evals/test_reference_sae_bench.py`` checks the sae-bench convention against sae-bench's own
functions run on the same tasks (``tests/reference/build_sae_bench.sh``); sae-bench draws every probe's
task afresh from torch's global generator, so the whole-pipeline numbers agree in distribution, not
draw for draw, while each part agrees exactly on the same task.

Example
-------
>>> texts, labels = brown_genres()
>>> result = sparse_probing(sae, model, texts, labels, ks=(1, 2, 5, 20))
>>> result.table      # per class and mean: llm_accuracy, sae_top_1_accuracy, ...
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from ..checks import check_fraction, check_int, check_positive_int, check_texts
from ..memory.freeing import scope
from ..views.charts import offline
from .tidy import check_sae, encode_rows, site_batches, tidy

if TYPE_CHECKING:
    from ..model.model import Model
    from ..saes.base import SAE


def pooled(
    sae: SAE, model: Model, texts: list[str], site: str, max_tokens: int = 128, batch_size: int = 8,
    progress: bool = True,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Per text, the mean over its tokens (BOS left out, the first ``max_tokens``) of the site's
    activations ``[N, d]`` and of the SAE's latents ``[N, d_sae]`` (float32)."""
    check_sae(sae)
    texts = check_texts(texts)
    check_positive_int("max_tokens", max_tokens)
    check_positive_int("batch_size", batch_size)
    site = sae.check_fits(model, site)
    enc = model.to_tokens(texts)
    enc = {k: v[:, :max_tokens] for k, v in enc.items()}
    skip = 1 if model.tokenizer.bos_token_id is not None else 0
    xs, zs = [], []
    total = -(-len(texts) // batch_size)
    for rows, x in tqdm(site_batches(model, site, enc, batch_size), total=total, desc="probing activations",
                        leave=False, disable=not progress or total <= 1):  # fmt: skip
        keep = enc["attention_mask"][rows, : x.shape[1]].bool().clone()
        keep[:, :skip] = False
        n = keep.sum(1, keepdim=True).clamp(min=1).float()
        z = torch.zeros(*keep.shape, sae.d_sae)
        z[keep] = encode_rows(sae, x[keep])
        w = keep.float()[..., None]
        xs.append(((x * w).sum(1) / n).numpy())
        zs.append(((z * w).sum(1) / n).numpy())
    return np.concatenate(xs).astype(np.float32), np.concatenate(zs).astype(np.float32)


CONVENTIONS = ("interplab", "sae-bench")


def balanced_task(labels: np.ndarray, cls: str, test_fraction: float, seed: int) -> tuple[np.ndarray, ...]:
    """Train and test indices and binary targets of a balanced one-versus-rest task for ``cls``."""
    rng = np.random.default_rng(seed)
    pos = np.flatnonzero(labels == cls)
    neg = rng.permutation(np.flatnonzero(labels != cls))[: len(pos)]
    pos = rng.permutation(pos)[: len(neg)]
    n_test_pos, n_test_neg = max(1, round(len(pos) * test_fraction)), max(1, round(len(neg) * test_fraction))
    test = np.concatenate([pos[:n_test_pos], neg[:n_test_neg]])
    train = np.concatenate([pos[n_test_pos:], neg[n_test_neg:]])
    return train, (labels[train] == cls).astype(int), test, (labels[test] == cls).astype(int)


def sae_bench_task(labels: np.ndarray, cls: str, test_fraction: float, seed: int) -> tuple[np.ndarray, ...]:
    """Like :func:`balanced_task` with sae-bench's sampling: split each class first, then per side the
    negatives are ``ceil(n_pos / n_other)`` texts of each other class, of which ``n_pos`` are kept."""
    rng = np.random.default_rng(seed)
    test_mask = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        test_mask[idx[: max(1, round(len(idx) * test_fraction))]] = True
    sides = []
    for side in (~test_mask, test_mask):
        pos = np.flatnonzero(side & (labels == cls))
        others = [c for c in np.unique(labels[side]) if c != cls]
        quota = -(-len(pos) // max(1, len(others)))
        neg = np.concatenate([rng.permutation(np.flatnonzero(side & (labels == c)))[:quota] for c in others])
        rows = rng.permutation(np.concatenate([pos, rng.permutation(neg)[: len(pos)]]))
        sides += [rows, (labels[rows] == cls).astype(int)]
    return tuple(sides)


def probe_accuracy(X_train: np.ndarray, y_train: np.ndarray, X_test: np.ndarray, y_test: np.ndarray,
                   convention: str = "interplab") -> float:  # fmt: skip
    """Test accuracy of a logistic-regression probe (scikit-learn, lbfgs, C=1): on standardised features
    (``"interplab"``), or on the raw features with ``max_iter=1000`` as sae-bench's ``train_sklearn_probe``."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if convention == "sae-bench":
        probe = LogisticRegression(C=1.0, max_iter=1000)
        probe.fit(X_train.astype(np.float32), y_train)
        return float(probe.score(X_test.astype(np.float32), y_test))
    probe = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))
    probe.fit(X_train, y_train)
    return float(probe.score(X_test, y_test))


def adam_probe(
    X_train: np.ndarray, y_train: np.ndarray, X_test: np.ndarray, y_test: np.ndarray, seed: int | torch.Tensor = 0,
    epochs: int = 100, lr: float = 1e-2, batch_size: int = 250, patience: int = 10,
) -> tuple[torch.nn.Linear, float]:  # fmt: skip
    """sae-bench's full-activation probe (``train_probe_gpu``): a linear probe trained with AdamW on binary
    cross-entropy; returns the probe of the best test accuracy over epochs and that accuracy (early stop
    after ``patience`` epochs without a better one). ``seed`` seeds torch's generator (or is a
    ``torch.get_rng_state()`` to start from); the global generator is restored afterwards.

    >>> probe, accuracy = adam_probe(X[train], y[train], X[test], y[test], seed=0)
    """
    import copy

    Xtr, Xte = torch.as_tensor(X_train, dtype=torch.float32), torch.as_tensor(X_test, dtype=torch.float32)
    ytr, yte = torch.as_tensor(y_train).long(), torch.as_tensor(y_test).long()
    with torch.random.fork_rng(devices=[]), torch.enable_grad():
        if isinstance(seed, torch.Tensor):
            torch.set_rng_state(seed)
        else:
            torch.manual_seed(seed)
        probe = torch.nn.Linear(Xtr.shape[1], 1)
        opt = torch.optim.AdamW(probe.parameters(), lr=lr)
        loss_fn = torch.nn.BCEWithLogitsLoss()
        best, best_probe, waited = 0.0, copy.deepcopy(probe), 0
        for _ in range(epochs):
            order = torch.randperm(len(Xtr))
            for i in range(0, len(Xtr), batch_size):
                rows = order[i : i + batch_size]
                loss = loss_fn(probe(Xtr[rows]).squeeze(-1), ytr[rows].float())
                opt.zero_grad()
                loss.backward()
                opt.step()
            with torch.no_grad():
                acc = ((probe(Xte).squeeze(-1) > 0).long() == yte).float().mean().item()
            if acc > best:
                best, best_probe, waited = acc, copy.deepcopy(probe), 0
            else:
                waited += 1
            if waited >= patience:
                break
    return best_probe, best


def adam_probe_accuracy(X_train: np.ndarray, y_train: np.ndarray, X_test: np.ndarray, y_test: np.ndarray,
                        seed: int | torch.Tensor = 0) -> float:  # fmt: skip
    """The best test accuracy of :func:`adam_probe` (sae-bench's ``llm_test_accuracy`` of one class)."""
    return adam_probe(X_train, y_train, X_test, y_test, seed)[1]


def top_latents(Z_train: np.ndarray, y_train: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` latents whose mean differs most (in absolute value) between the positive and negative texts."""
    diff = np.abs(Z_train[y_train == 1].mean(0) - Z_train[y_train == 0].mean(0))
    return np.argsort(-diff, kind="stable")[:k]


@dataclass(repr=False)
class ProbingResult:
    """Sparse-probing accuracies: ``scores`` has one row per class (and ``mean``), a column per probe."""

    site: str
    ks: list[int]
    scores: pd.DataFrame  # index: class; columns llm_accuracy, sae_top_{k}_accuracy
    selected: dict[str, dict[int, list[int]]]  # class -> k -> latents

    @property
    def table(self) -> pd.DataFrame:
        """Tidy rows: one per (class or ``mean``, probe)."""
        return pd.concat([tidy("sparse_probing", self.site, row.to_dict(), group=cls)
                          for cls, row in self.scores.iterrows()], ignore_index=True)  # fmt: skip

    def chart(self) -> Any:
        """Mean test accuracy against k, with the full-activation probe as a rule."""
        import altair as alt

        mean = self.scores.loc["mean"]
        df = pd.DataFrame({"k": self.ks, "accuracy": [mean[f"sae_top_{k}_accuracy"] for k in self.ks]})
        line = (
            alt.Chart(df)
            .mark_line(point=True)
            .encode(
                x=alt.X("k:Q", scale=alt.Scale(type="log")), y=alt.Y("accuracy:Q", scale=alt.Scale(domain=[0.4, 1]))
            )
        )
        rule = alt.Chart(pd.DataFrame({"llm": [mean["llm_accuracy"]]})).mark_rule(strokeDash=[4, 4]).encode(y="llm:Q")
        return offline((line + rule).properties(title=f"Sparse probing at {self.site} (dashed: full activation)",
                                                width=260, height=180))  # fmt: skip

    def __repr__(self) -> str:
        return f"ProbingResult({self.site}, mean:\n{self.scores.loc['mean'].round(3).to_string()})"


@scope()
def sparse_probing(
    sae: SAE, model: Model, texts: Sequence[str], labels: Sequence[Any], ks: Sequence[int] = (1, 2, 5, 20),
    site: str | None = None, test_fraction: float = 0.25, seed: int = 0, max_tokens: int = 128,
    batch_size: int = 8, progress: bool = True, convention: str = "interplab",
) -> ProbingResult:  # fmt: skip
    """Sparse probing of ``sae`` on labelled ``texts`` (one label each; every class needs 4 texts or more);
    ``convention="sae-bench"`` samples and probes as sae-bench 0.6.0 does (module docstring).

    >>> sparse_probing(sae, model, *brown_genres()).scores
    """
    check_sae(sae)
    texts = check_texts(texts)
    labels_arr = np.asarray([str(v) for v in labels]) if not isinstance(labels, str) else np.asarray([])
    if len(labels_arr) != len(texts):
        raise ValueError(f"labels must give one label per text: {len(texts)} texts, got {len(labels_arr)} labels.")
    classes, counts = np.unique(labels_arr, return_counts=True)
    if len(classes) < 2:
        raise ValueError(f"labels must hold at least two classes, got {classes.tolist()}.")
    if counts.min() < 4:
        raise ValueError(f"Class {classes[counts.argmin()]!r} has {counts.min()} texts; each class needs at least 4.")
    ks = [check_int("k", k, 1, sae.d_sae) for k in ks]
    check_fraction("test_fraction", test_fraction)
    check_positive_int("max_tokens", max_tokens)
    check_positive_int("batch_size", batch_size)
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}.")
    site = sae.check_fits(model, site)
    X, Z = pooled(sae, model, texts, site, max_tokens, batch_size, progress)
    rows: dict[str, dict[str, float]] = {}
    selected: dict[str, dict[int, list[int]]] = {}
    for cls in classes.tolist():
        task = sae_bench_task if convention == "sae-bench" else balanced_task
        train, y_train, test, y_test = task(labels_arr, cls, test_fraction, seed)
        if convention == "sae-bench":
            row = {"llm_accuracy": adam_probe_accuracy(X[train], y_train, X[test], y_test, seed)}
        else:
            row = {"llm_accuracy": probe_accuracy(X[train], y_train, X[test], y_test)}
        selected[cls] = {}
        for k in ks:
            idx = top_latents(Z[train], y_train, k)
            selected[cls][k] = idx.tolist()
            row[f"sae_top_{k}_accuracy"] = probe_accuracy(Z[train][:, idx], y_train, Z[test][:, idx], y_test,
                                                          convention)  # fmt: skip
        rows[cls] = row
    scores = pd.DataFrame.from_dict(rows, orient="index")
    scores.loc["mean"] = scores.mean(0)
    return ProbingResult(site=site, ks=ks, scores=scores, selected=selected)
