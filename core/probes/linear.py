"""Linear probes on any sites, every layer in one call: held-out accuracy, cross-validation, class balance.

:func:`train` reads the activations once (one pass per batch stops after the last site needed) and
fits an L2-regularised logistic probe per site with :mod:`.solver` (scikit-learn's objective on
standardised features). Texts are split into train and test before anything is fitted, so tokens
of one text never sit on both sides. A :class:`ProbeResult` holds each site's weights and scores;
``result.chart()`` draws accuracy by layer and ``result.direction`` (the best site's weight vector)
is what :func:`interplab.core.steering.from_probe` turns into a steering vector.

Example
-------
>>> res = ilab.probes.train(model, texts, labels, sites="resid_post")     # sequence labels, last token
>>> res.best_site, res.accuracy[res.best_site]
>>> vec = ilab.steering.from_probe(res)                                   # at res.site, unit norm
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from ..checks import check_fraction, check_int, check_number
from ..storage.atomic import write_safetensors
from ..storage.readers import (
    FLOATS,
    Fields,
    FileError,
    expect_arrays,
    expect_values,
    read_safetensors,
    result_header,
)
from ..views.charts import offline
from .features import expand_sites, sequence_features, token_features
from .solver import LogisticFit, fit_logistic, predict

if TYPE_CHECKING:
    from ..model.model import Model

FORMAT = "interplab.probe/1"


@dataclass
class Probe:
    """One site's probe: raw-activation weights ``W_CD`` (one row for two classes) and biases ``b_C``."""

    site: str
    classes: list[Any]
    W_CD: torch.Tensor
    b_C: torch.Tensor

    @property
    def direction(self) -> torch.Tensor:
        """[d] for two classes (towards ``classes[1]``), else [n_classes, d]."""
        return self.W_CD[0] if self.W_CD.shape[0] == 1 else self.W_CD

    def predict(self, x_ND: torch.Tensor) -> list[Any]:
        """Class labels of activations [N, d]."""
        x_ND = torch.as_tensor(x_ND)
        d = self.W_CD.shape[1]
        if x_ND.ndim != 2 or x_ND.shape[1] != d:
            raise ValueError(f"Activations must be [N, {d}] for the probe at {self.site}, got {tuple(x_ND.shape)}.")
        fit = LogisticFit(self.W_CD, self.b_C, 0, True)
        return [self.classes[i] for i in predict(fit, x_ND).tolist()]


@dataclass(repr=False)
class ProbeResult:
    """Probes at several sites and how well each does on held-out texts.

    ``accuracy``/``train_accuracy``/``cv_mean``/``cv_std`` map each site to a number; ``balance`` is each
    class's share of the examples (so chance is ``max(balance)``); ``probes`` hold the weights.
    """

    sites: list[str]
    classes: list[Any]
    accuracy: dict[str, float]
    train_accuracy: dict[str, float]
    cv_mean: dict[str, float]
    cv_std: dict[str, float]
    balance: dict[str, float]
    n_train: int
    n_test: int
    level: str
    probes: dict[str, Probe] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def best_site(self) -> str:
        """The site with the highest held-out accuracy (the earliest on a tie)."""
        return max(self.sites, key=lambda s: (self.accuracy[s], -self.sites.index(s)))

    @property
    def site(self) -> str:
        """Where :attr:`direction` reads: the best site."""
        return self.best_site

    @property
    def direction(self) -> torch.Tensor:
        """The best site's probe weights: [d] for two classes, [n_classes, d] otherwise."""
        return self.probes[self.best_site].direction

    @property
    def chance(self) -> float:
        """Accuracy of always answering the most common class."""
        return max(self.balance.values())

    def __getitem__(self, site: str) -> Probe:
        if site not in self.probes:
            raise KeyError(f"No probe at {site!r}; this result has {self.sites}.")
        return self.probes[site]

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame({"site": self.sites, "layer": [_layer(s) for s in self.sites],
                             "test": [self.accuracy[s] for s in self.sites],
                             "train": [self.train_accuracy[s] for s in self.sites],
                             "cv_mean": [self.cv_mean[s] for s in self.sites],
                             "cv_std": [self.cv_std[s] for s in self.sites]})  # fmt: skip

    def chart(self) -> Any:
        """Altair: held-out, train and cross-validated accuracy by layer, chance as a dashed rule."""
        import altair as alt

        df = self.to_pandas()
        long = df.melt(id_vars=["site", "layer"], value_vars=["test", "train", "cv_mean"], var_name="split",
                       value_name="accuracy").dropna()  # fmt: skip
        x = alt.X("layer:O", title="layer") if df["layer"].notna().all() else alt.X("site:N", sort=None)
        lines = alt.Chart(long).mark_line(point=True).encode(
            x=x, y=alt.Y("accuracy:Q", scale=alt.Scale(domain=[0, 1])), color="split:N",
            tooltip=["site", "split", alt.Tooltip("accuracy:Q", format=".3f")])  # fmt: skip
        rule = alt.Chart({"values": [{"chance": self.chance}]}).mark_rule(strokeDash=[4, 3], color="gray").encode(
            y="chance:Q")  # fmt: skip
        title = f"probe accuracy by layer ({self.level} labels, {len(self.classes)} classes; dashed: chance)"
        return offline((lines + rule).properties(title=title, width=380, height=220))

    def __repr__(self) -> str:
        rows = ", ".join(f"{_short(s)}: {self.accuracy[s]:.3f}" for s in self.sites)
        return (
            f"ProbeResult({len(self.classes)} classes, {self.n_train} train / {self.n_test} test examples, "
            f"chance {self.chance:.3f}; best {self.best_site} {self.accuracy[self.best_site]:.3f}; {rows})"
        )

    # ----------------------------------------------------------------- io
    def save(self, path: str | os.PathLike[str]) -> Path:
        """One safetensors file: each site's weights, and the scores and classes as JSON metadata."""
        path = Path(path)
        tensors = {}
        for i, site in enumerate(self.sites):
            tensors[f"W.{i}"] = self.probes[site].W_CD.contiguous()
            tensors[f"b.{i}"] = self.probes[site].b_C.contiguous()
        meta = {k: getattr(self, k) for k in ("sites", "classes", "accuracy", "train_accuracy", "cv_mean", "cv_std",
                                               "balance", "n_train", "n_test", "level", "settings")}  # fmt: skip
        try:
            text = json.dumps(meta, allow_nan=True)
        except TypeError as err:
            raise TypeError(f"Probe classes and settings must be JSON values to be saved: {err}") from None
        return write_safetensors(path, tensors, {"format": FORMAT, "interplab": text})

    @staticmethod
    def load(path: str | os.PathLike[str]) -> ProbeResult:
        """Read a file written by :meth:`save`: header and fields checked before any tensor is read."""
        path = Path(path)
        header, info = result_header(path, FORMAT, "probe result")
        sites = info.list("sites")
        classes = info.list("classes")
        if not sites or not all(isinstance(s, str) for s in sites) or len(classes) < 2:
            raise FileError(path, "sites", "must name at least one site, and classes at least two")
        if not all(isinstance(c, (str, int, float, bool)) for c in classes) or len(set(classes)) != len(classes):
            raise FileError(path, "classes", f"must be distinct labels (strings or numbers), got {classes!r:.100}")
        rows = 1 if len(classes) == 2 else len(classes)
        first = header.tensors.get("W.0")  # None: expect_arrays names it missing
        w_shape = None if first is None else (rows, first.shape[-1])
        expected: dict[str, tuple[tuple[int, ...] | None, Sequence[str]]] = {}
        for i in range(len(sites)):
            expected[f"W.{i}"] = (w_shape, FLOATS)
            expected[f"b.{i}"] = ((rows,), FLOATS)
        expect_arrays(path, header.tensors, expected)
        _, tensors = read_safetensors(path, " (a probe result)")
        for name, tensor in tensors.items():
            expect_values(path, name, tensor)
        maps = {key: _scores(path, info, key, sites) for key in ("accuracy", "train_accuracy", "cv_mean", "cv_std")}
        probes = {s: Probe(s, classes, tensors[f"W.{i}"].float(), tensors[f"b.{i}"].float())
                  for i, s in enumerate(sites)}  # fmt: skip
        return ProbeResult(sites, classes, **maps, balance=dict(info.obj("balance").data),
                           n_train=info.int("n_train", minimum=0), n_test=info.int("n_test", minimum=0),
                           level=info.str("level", choices=("sequence", "token")), probes=probes,
                           settings=dict(info.obj("settings", {}).data))  # fmt: skip


def _scores(path: Path, info: Fields, key: str, sites: list[str]) -> dict[str, float]:
    """One score per site: a fraction in 0..1, or NaN where there was nothing to score."""
    m = info.obj(key)
    if set(m.data) != set(sites):
        raise FileError(path, key, f"must give one number per site {sites}")
    out = {}
    for s in sites:
        value = m.raw(s, float("nan"))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FileError(path, f"{key}.{s}", f"must be a number in 0..1 (or NaN), got {value!r:.60}")
        if not math.isnan(value):
            expect_values(path, f"{key}.{s}", value, 0, maximum=1)
        out[s] = float(value)
    return out


def _layer(site: str) -> float:
    parts = site.split(".")
    return float(parts[1]) if len(parts) > 2 and parts[0] == "blocks" and parts[1].isdigit() else float("nan")


def _short(site: str) -> str:
    return site.replace("blocks.", "L").replace(".hook_", " ")


# -------------------------------------------------------------------- train
def _check_labels(model: Model, texts: list[str], labels: Any) -> tuple[str, list[Any]]:
    """("sequence", one label per text) or ("token", one list per text, one label or None per token)."""
    if isinstance(labels, (str, bytes)) or not isinstance(labels, (Sequence, np.ndarray, torch.Tensor)):
        raise TypeError(f"labels must be a list (one per text, or one list per text of one per token), got "
                        f"{type(labels).__name__}.")  # fmt: skip
    labels = labels.tolist() if isinstance(labels, (np.ndarray, torch.Tensor)) else list(labels)
    if len(labels) != len(texts):
        raise ValueError(f"Got {len(texts)} texts but {len(labels)} labels; give one label per text (or one list of "
                         "per-token labels per text).")  # fmt: skip
    token_level = [isinstance(x, (list, tuple)) for x in labels]
    if any(token_level) and not all(token_level):
        raise TypeError("labels mixes lists and single values: give one label per text, or one list per text.")
    if not all(token_level):
        return "sequence", labels
    for i, (text, row) in enumerate(zip(texts, labels, strict=True)):
        n = int(model.to_tokens(text)["attention_mask"].sum())
        if len(row) != n:
            toks = model.to_str_tokens(text)
            raise ValueError(f"labels[{i}] has {len(row)} entries but text {i} has {n} tokens {toks!r:.200} (BOS "
                             "included): give one label (or None to skip) per token.")  # fmt: skip
    return "token", [list(r) for r in labels]


def _classes(values: list[Any]) -> tuple[list[Any], torch.Tensor]:
    bad = [v for v in values if isinstance(v, float) and not np.isfinite(v)]
    if bad or any(not isinstance(v, (str, int, bool, np.integer)) for v in values):
        odd = next(v for v in values if v in bad or not isinstance(v, (str, int, bool, np.integer)))
        raise TypeError(f"Labels are class names (str, int or bool), got {odd!r} ({type(odd).__name__}).")
    classes = sorted(set(values), key=lambda v: (str(type(v)), v))
    if len(classes) < 2:
        raise ValueError(f"A probe needs at least two classes; every label is {classes[0]!r}.")
    index = {c: i for i, c in enumerate(classes)}
    return [c.item() if isinstance(c, np.generic) else c for c in classes], torch.tensor([index[v] for v in values])


def _split(groups_N: torch.Tensor, n_groups: int, test_size: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Boolean train and test masks over examples, splitting by group (text)."""
    perm = torch.randperm(n_groups, generator=torch.Generator().manual_seed(seed))
    n_test = max(1, round(test_size * n_groups)) if test_size > 0 else 0
    if n_test >= n_groups:
        raise ValueError(f"test_size={test_size} leaves no text to train on ({n_groups} texts).")
    test_groups = torch.zeros(n_groups, dtype=torch.bool)
    test_groups[perm[:n_test]] = True
    test = test_groups[groups_N]
    return ~test, test


def train(
    model: Model,
    texts: str | Sequence[str],
    labels: Sequence[Any],
    sites: str | Sequence[str] = "resid_post",
    position: int | str = -1,
    test_size: float = 0.25,
    cv: int | None = None,
    C: float = 1.0,
    seed: int = 0,
    batch_size: int = 8,
    progress: bool = True,
) -> ProbeResult:
    """Train a logistic probe at each site and score it on held-out texts.

    ``labels``: one per text (sequence-level: the vector at ``position``, -1 the last token, or ``"mean"``)
    or one list per text with a label (or None to skip) for every token, BOS included (token-level).
    ``sites``: a kind for every layer (``"resid_post"``, ``"mlp_out"``, ...), a site name or a list.
    ``cv`` folds of cross-validation on the training texts (0: none; default 3 where at least 3 texts train,
    else none; more folds than training texts is refused); ``C`` is scikit-learn's inverse regularisation strength.
    Every check runs before the forward pass.

    >>> res = train(model, ["I loved it", "I hated it", ...], [1, 0, ...], sites="resid_post")
    """
    texts = cast("list[str]", model.check_inputs(texts))  # texts, or an image batch for a vision model
    site_names = expand_sites(model, sites)
    if not (position == "mean" or (isinstance(position, int) and not isinstance(position, bool))):
        raise ValueError(f"position must be a token index (e.g. -1, the last token) or 'mean', got {position!r}.")
    test_size = check_fraction("test_size", test_size, "[")
    cv = None if cv is None else check_int("cv", cv, minimum=0)
    if cv == 1:
        raise ValueError("cv must be 0 (no cross-validation) or at least 2 folds, got 1.")
    C = check_number(C, "C")
    if C <= 0:
        raise ValueError(f"C must be positive, got {C}.")
    level, labels = _check_labels(model, texts, labels)
    if level == "sequence":
        classes, y_N = _classes(labels)
        groups_N = torch.arange(len(texts))
        if isinstance(position, int):  # not "mean"
            shortest = min(int(model.to_tokens(t)["attention_mask"].sum()) for t in texts)
            if not -shortest <= position < shortest:
                raise ValueError(f"position={position} is outside a text of {shortest} tokens.")
    else:
        classes, y_N = _classes([v for row in labels for v in row if v is not None])
    if len(texts) < 2 and test_size > 0:
        raise ValueError("A held-out split needs at least two texts (or test_size=0).")
    n_fit = int(_split(torch.arange(len(texts)), len(texts), test_size, seed)[0].sum())
    if cv is None:  # 3 folds where the training texts allow it
        cv = 3 if n_fit >= 3 else 0
    if cv > n_fit:
        raise ValueError(f"cv={cv} folds need at least {cv} training texts; {n_fit} of the {len(texts)} texts train "
                         f"(test_size={test_size}). Use cv <= {n_fit}, or cv=0.")  # fmt: skip
    if level == "sequence":
        feats = sequence_features(model, texts, site_names, position, batch_size, progress)
    else:
        feats, _, groups_N = token_features(model, texts, labels, site_names, batch_size, progress)
    train_N, test_N = _split(groups_N, len(texts), test_size, seed)
    counts = torch.bincount(y_N, minlength=len(classes)).float()
    balance = {str(c): float(n / counts.sum()) for c, n in zip(classes, counts, strict=True)}
    result = ProbeResult(site_names, classes, {}, {}, {}, {}, balance, int(train_N.sum()), int(test_N.sum()), level,
                         settings={"C": C, "cv": cv, "test_size": test_size, "seed": seed, "position": position,
                                   "model": model.name})  # fmt: skip
    n_classes = len(classes)
    for site in site_names:
        x_ND = feats[site]
        fit = fit_logistic(x_ND[train_N], y_N[train_N], n_classes, C)
        result.probes[site] = Probe(site, classes, fit.W_CD, fit.b_C)
        result.train_accuracy[site] = _acc(fit, x_ND[train_N], y_N[train_N])
        result.accuracy[site] = _acc(fit, x_ND[test_N], y_N[test_N]) if test_N.any() else float("nan")
        result.cv_mean[site], result.cv_std[site] = _cross_validate(
            x_ND[train_N], y_N[train_N], groups_N[train_N], n_classes, C, cv, seed
        )
    return result


def _acc(fit: LogisticFit, x_ND: torch.Tensor, y_N: torch.Tensor) -> float:
    return float((predict(fit, x_ND) == y_N).float().mean()) if len(y_N) else float("nan")


def _cross_validate(x_ND: torch.Tensor, y_N: torch.Tensor, groups_N: torch.Tensor, n_classes: int, C: float,
                    folds: int, seed: int) -> tuple[float, float]:  # fmt: skip
    """Mean and standard deviation of the held-out accuracy over ``folds`` folds of the groups."""
    uniq = groups_N.unique()
    if folds == 0 or len(uniq) < folds:
        return float("nan"), float("nan")
    perm = uniq[torch.randperm(len(uniq), generator=torch.Generator().manual_seed(seed + 1))]
    scores = []
    for f in range(folds):
        held = torch.isin(groups_N, perm[f::folds])
        if held.all() or not held.any() or len(y_N[~held].unique()) < 2:
            continue
        fit = fit_logistic(x_ND[~held], y_N[~held], n_classes, C)
        scores.append(_acc(fit, x_ND[held], y_N[held]))
    if not scores:
        return float("nan"), float("nan")
    arr = np.array(scores)
    return float(arr.mean()), float(arr.std())
