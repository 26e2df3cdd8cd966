"""Data for token heatmaps: documents of tokens, one or many values per token, top features.

Plain data, no widget code: the heatmap widgets render a :class:`HeatmapData`.

Example
-------
>>> data = heatmap_data([["The", " cat"], ["Hi"]], torch.rand(3, 8))  # 3 tokens, 8 features
>>> data.n_tokens, data.n_features
(3, 8)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..model.activations import Activations
from .colors import ColorScale, bos_mask, column_scales

TOP_K = 5


@dataclass(repr=False)
class HeatmapData:
    """Tokens of one or many documents with values per token and feature.

    ``values`` is [n_tokens, n_features] float32; ``doc_starts`` [n_docs + 1] marks where
    each document's tokens begin in the flat token order; ``vocab`` holds each distinct
    token string once and ``token_ids`` [n_tokens] indexes it. ``top_features`` holds, per
    token, the ids of its ``k`` largest features: among the columns, or among every feature of
    the source (all latents of an SAE) when the heatmap shows only some. ``bos`` marks the
    BOS tokens that colour scales leave out by default.
    """

    vocab: list[str]
    token_ids: np.ndarray  # int32 [n_tokens]
    doc_starts: np.ndarray  # int32 [n_docs + 1]
    values: np.ndarray  # float32 [n_tokens, n_features]
    feature_ids: list[int]
    labels: list[str]
    top_features: np.ndarray  # int32 [n_tokens, k]: feature ids, largest value first
    top_values: np.ndarray  # float32 [n_tokens, k]
    bos: np.ndarray | None = None  # bool [n_tokens]: BOS at a document's start (left out of colour scales)
    top_labels: dict[int, str] = field(default_factory=dict)  # labels of top features that are not columns

    def __post_init__(self) -> None:
        if self.bos is None:
            self.bos = bos_mask(self.tokens(), self.doc_starts)

    @property
    def n_tokens(self) -> int:
        """Tokens over all documents."""
        return int(self.token_ids.shape[0])

    @property
    def n_features(self) -> int:
        """Value columns (features) per token."""
        return int(self.values.shape[1])

    @property
    def n_docs(self) -> int:
        return int(self.doc_starts.shape[0] - 1)

    def tokens(self) -> list[str]:
        """Every token's text, flat."""
        return [self.vocab[i] for i in self.token_ids.tolist()]

    def color_scales(
        self,
        scale: str = "auto",
        vmin: float | None = None,
        vmax: float | None = None,
        center: float | None = None,
        exclude_bos: bool = True,
    ) -> list[ColorScale]:
        """One colour scale per feature column (see :mod:`~interplab.core.views.colors`); BOS left out by default.

        >>> heatmap_data(["<bos>", " a", " b"], [50.0, 1.0, 2.0]).color_scales()[0].vmax
        2.0
        """
        exclude = self.bos if exclude_bos else None
        return column_scales(self.values, scale=scale, vmin=vmin, vmax=vmax, center=center, exclude_T=exclude)

    def __repr__(self) -> str:
        return f"HeatmapData({self.n_docs} docs, {self.n_tokens} tokens, {self.n_features} features)"


def _as_float_matrix(values: torch.Tensor | np.ndarray | Sequence[float], n_tokens: int) -> np.ndarray:
    arr = values.detach().to(torch.float32).cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
    arr = np.asarray(arr, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] != n_tokens:
        raise ValueError(
            f"values must be [n_tokens] or [n_tokens, n_features] with n_tokens={n_tokens}; got shape {arr.shape}."
        )
    if not np.isfinite(arr).all():
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"values hold NaN or inf (first at token {bad[0]}, feature {bad[1]}).")
    return np.ascontiguousarray(arr)


def heatmap_data(
    tokens: Sequence[Sequence[str]] | Sequence[str],
    values: torch.Tensor | np.ndarray | Sequence[float],
    feature_ids: Sequence[int] | None = None,
    labels: Sequence[str] | None = None,
    top: tuple[np.ndarray, np.ndarray] | None = None,
) -> HeatmapData:
    """Build heatmap data from string tokens (one list per document, or one flat document).

    ``values`` is [n_tokens] (one scalar per token) or [n_tokens, n_features], flat in
    document order. ``feature_ids`` name the columns (default 0..n-1); ``labels`` label them.
    ``top`` gives each token's top feature ids and values ([n_tokens, k] each) over more
    features than the columns (default: the top columns).
    """
    if not tokens:
        raise ValueError("tokens is empty: give at least one token.")
    if not isinstance(tokens[0], (str, list, tuple)):
        raise TypeError(
            f"Tokens must be strings (one list per document, or one flat list), not {type(tokens[0]).__name__}: "
            "these are not strings."
        )
    docs = [list(tokens)] if isinstance(tokens[0], str) else [list(d) for d in tokens]
    for i, doc in enumerate(docs):
        if not all(isinstance(t, str) for t in doc):
            raise TypeError(f"Document {i} holds tokens that are not strings.")
    flat = [t for doc in docs for t in doc]
    if not flat:
        raise ValueError("tokens is empty: give at least one token.")
    arr = _as_float_matrix(values, len(flat))
    n_features = arr.shape[1]
    ids = list(range(n_features)) if feature_ids is None else [int(f) for f in feature_ids]
    if len(ids) != n_features:
        raise ValueError(f"{len(ids)} feature_ids for {n_features} value columns.")
    names = [""] * n_features if labels is None else [str(x) for x in labels]
    if len(names) != n_features:
        raise ValueError(f"{len(names)} labels for {n_features} value columns.")
    vocab: dict[str, int] = {}
    token_ids = np.fromiter((vocab.setdefault(t, len(vocab)) for t in flat), dtype=np.int32, count=len(flat))
    starts = np.zeros(len(docs) + 1, dtype=np.int32)
    starts[1:] = np.cumsum([len(d) for d in docs])
    if top is None:
        top_ids, top_vals = top_columns(arr)
        top_ids = np.asarray(ids, dtype=np.int32)[top_ids]
    else:
        top_ids, top_vals = (np.ascontiguousarray(a) for a in top)
        if top_ids.shape != top_vals.shape or top_ids.ndim != 2 or top_ids.shape[0] != len(flat):
            raise ValueError(
                f"top must be two [n_tokens={len(flat)}, k] arrays; got {top_ids.shape} and {top_vals.shape}."
            )
    return HeatmapData(
        vocab=list(vocab),
        token_ids=token_ids,
        doc_starts=starts,
        values=arr,
        feature_ids=ids,
        labels=names,
        top_features=np.ascontiguousarray(top_ids, dtype=np.int32),
        top_values=np.ascontiguousarray(top_vals, dtype=np.float32),
    )


def top_columns(values_TF: np.ndarray | torch.Tensor, k: int = TOP_K) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` largest columns and their values, largest first: [n, k] ids (int32) and values."""
    if isinstance(values_TF, torch.Tensor):
        vals, idx = values_TF.float().topk(min(k, values_TF.shape[1]), dim=1)
        return idx.numpy().astype(np.int32), vals.numpy().astype(np.float32)
    arr = values_TF
    n, n_features = arr.shape
    k = min(k, n_features)
    top = np.argpartition(-arr, k - 1, axis=1)[:, :k] if n_features > k else np.tile(np.arange(k), (n, 1))
    top_vals = np.take_along_axis(arr, top, 1)
    order = np.argsort(-top_vals, axis=1, kind="stable")
    return np.take_along_axis(top, order, 1).astype(np.int32), np.take_along_axis(top_vals, order, 1)


def check_features(features: Any) -> list[int]:
    """Feature (dimension or latent) ids as a non-empty list of ints; a clear error otherwise."""
    if isinstance(features, (str, bytes)) or not isinstance(features, Sequence | np.ndarray | torch.Tensor):
        raise TypeError(f"features must be a list of feature ids, got {type(features).__name__}: {features!r:.60}.")
    items = features.tolist() if isinstance(features, (np.ndarray, torch.Tensor)) else list(features)
    if not items:
        raise ValueError("features is empty: give at least one feature id (or None for the default ones).")
    for f in items:
        if isinstance(f, bool) or not isinstance(f, (int, np.integer)):
            raise TypeError(f"features must be integer ids, got {f!r} in {items!r:.80}.")
    return [int(f) for f in items]


def heatmap_data_from_activations(
    acts: Activations,
    site: str | None = None,
    features: Sequence[int] | None = None,
    labels: Sequence[str] | None = None,
) -> HeatmapData:
    """Heatmap data from collected activations: the site's dimensions are the features.

    ``features`` picks dimensions (neurons, residual directions); default all of them.
    """
    if not isinstance(acts, Activations):
        raise TypeError(f"Expected Activations from Model.collect, got {type(acts).__name__}.")
    if site is None:
        if len(acts.sites) != 1:
            raise ValueError(f"These activations hold several sites; pass site= one of {acts.sites}.")
        site = acts.sites[0]
    flat = acts.flat(site)
    if features is not None:
        features = check_features(features)
        bad = [f for f in features if not 0 <= f < flat.shape[1]]
        if bad:
            raise ValueError(f"Features {bad} are out of range for {site} (width {flat.shape[1]}).")
        flat = flat[:, features]
    return heatmap_data(acts.str_tokens, flat, feature_ids=features, labels=labels)
