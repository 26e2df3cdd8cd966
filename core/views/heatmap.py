"""Data for token heatmaps: documents of tokens, one or many values per token, top features.

Plain data, no widget code: the heatmap widgets render a :class:`HeatmapData`.

Example
-------
>>> data = heatmap_data([["The", " cat"], ["Hi"]], torch.rand(3, 8))  # 3 tokens, 8 features
>>> data.n_tokens, data.n_features
(3, 8)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..memory import release
from ..model.activations import Activations
from .colors import ColorScale, bos_mask, column_scales

TOP_K = 5
#: Tokens encoded at once when an SAE gives the features: [512, d_sae] float32 temporaries (8 MB at 4096 latents;
#: 2048 rows lifted a notebook kernel's peak by 0.29 GB through the encoder's temporaries).
ENCODE_ROWS = 512
#: Free heap the encoding loop lets glibc keep before giving it back (glibc raises its mmap threshold after
#: freeing a large block, so later blocks come from the heap and its size only grows).
HEAP_SLACK_BYTES = 16 * 1024**2
#: The most latents offered by default when an SAE gives the features (those that fire most).
DEFAULT_LATENTS = 32


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
    top_filter: str = ""  # which features the top lists leave out, in a few words ("": none)

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
    docs: list[list[Any]] = [list(tokens)] if isinstance(tokens[0], str) else [list(d) for d in tokens]
    for i, doc in enumerate(docs):
        if not all(isinstance(t, str) for t in doc):
            raise TypeError(f"Document {i} holds tokens that are not strings.")
    flat: list[str] = [t for doc in docs for t in doc]  # strings: checked above
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


def heatmap_data_from_sae(
    acts: Activations,
    sae: Any,
    features: Sequence[int] | None = None,
    labels: Sequence[str] | None = None,
    saved_labels: Mapping[int, str] | None = None,
    top_filter: tuple[np.ndarray | None, str] = (None, ""),
) -> HeatmapData:
    """Heatmap data from collected activations encoded by an SAE (anything with ``encode`` and ``site``).

    Its latents are the features: ``features`` picks them, default the :data:`DEFAULT_LATENTS` that fire most
    on these tokens (BOS and the ``top_filter`` latents left out). Tokens are encoded :data:`ENCODE_ROWS` at a
    time and only the chosen latents' columns are kept, never [tokens, d_sae]; the hover's top latents come from
    all of them.
    ``saved_labels`` (the SAE's latent labels) label the features unless ``labels`` does, and the top latents.
    ``top_filter`` is a mask [d_sae] of latents left out of the hover's top latents (dense ones: see
    :func:`interplab.core.features.density.density_filter`) and that rule in a few words.

    >>> data = heatmap_data_from_sae(model.collect(texts, sites=[sae.site]), sae, features=[3, 17])
    """
    site = getattr(sae, "site", None)
    if site not in acts.sites:
        raise ValueError(f"The SAE reads {site!r}, but these activations hold {acts.sites}.")
    x = acts.flat(site)
    blocks = range(0, x.shape[0], ENCODE_ROWS)
    with torch.no_grad():
        width = int(sae.encode(x[:1].to(torch.float32)).shape[1])
        bos = torch.from_numpy(bos_mask(acts.flat_str_tokens(), np.cumsum([0] + [len(t) for t in acts.str_tokens])))
        if features is not None:  # checked before any encoding
            features = check_features(features)
            bad = [f for f in features if not 0 <= f < width]
            if bad:
                raise ValueError(f"Latents {bad} are out of range for an SAE of width {width}.")
        peaks, top_ids, top_vals, picked = [], [], [], []
        for i in blocks:
            latents = sae.encode(x[i : i + ENCODE_ROWS].to(torch.float32))
            ids, vals = top_columns(_without(latents, top_filter[0]))  # the hover: top latents over all of them
            top_ids.append(ids)
            top_vals.append(vals)
            if features is None:
                keep = ~bos[i : i + ENCODE_ROWS]  # the default leaves BOS out
                peaks.append((latents[keep] if keep.any() else latents).max(0).values)
            else:
                picked.append(latents[:, features])
            del latents
            release(HEAP_SLACK_BYTES)  # 8 MB blocks freed in turn would otherwise pile up in the heap
        top = (np.concatenate(top_ids), np.concatenate(top_vals))
        if features is None:  # default: the latents that fire most on these tokens
            features = _strongest(torch.stack(peaks).max(0).values, top_filter[0])
            picked = [sae.encode(x[i : i + ENCODE_ROWS].to(torch.float32))[:, features] for i in blocks]
        columns = torch.cat(picked)
    release()  # the blocks' freed temporaries go back to the OS
    saved = dict(saved_labels or {})
    if labels is None:  # the SAE's saved latent labels, shown wherever latent ids are
        labels = [saved.get(f, "") for f in features]
    data = heatmap_data(acts.str_tokens, columns, feature_ids=features, labels=labels, top=top)
    data.top_labels = {int(i): saved[int(i)] for i in np.unique(top[0]).tolist() if int(i) in saved}
    data.top_filter = top_filter[1] if top_filter[0] is not None else ""
    return data


def _strongest(peak_M: torch.Tensor, left_out_M: np.ndarray | None) -> list[int]:
    """The :data:`DEFAULT_LATENTS` latents with the highest peaks, the ``left_out_M`` ones not among them (unless
    every latent is)."""
    if left_out_M is not None and not left_out_M.all():
        peak_M = peak_M.masked_fill(torch.from_numpy(np.asarray(left_out_M, dtype=bool)), -float("inf"))
    return torch.topk(peak_M, min(DEFAULT_LATENTS, int(torch.isfinite(peak_M).sum()))).indices.tolist()


def _without(latents_TM: torch.Tensor, left_out_M: np.ndarray | None) -> torch.Tensor:
    """The activations with the ``left_out_M`` latents set to 0 (not among a token's top latents)."""
    if left_out_M is None or not left_out_M.any():
        return latents_TM
    return latents_TM.masked_fill(torch.from_numpy(np.asarray(left_out_M, dtype=bool)), 0.0)


def as_heatmap_data(
    source: Any,
    values: Any = None,
    *,
    site: str | None = None,
    features: Sequence[int] | None = None,
    labels: Sequence[str] | None = None,
    latent_labels: Callable[[Any], Mapping[int, str]] | None = None,
    latent_filter: Callable[[Any], tuple[np.ndarray | None, str]] | None = None,
) -> HeatmapData:
    """Heatmap data from what a heatmap widget is given: a :class:`HeatmapData` as it is; :class:`Activations`
    (``site``'s dimensions, or with an SAE as ``values`` its latents, labelled by ``latent_labels(sae)`` when
    the SAE has a config, its hover's top latents filtered by ``latent_filter(sae)``: a mask of latents left
    out and the rule in words); or string tokens with ``values``.

    >>> as_heatmap_data(acts, sae, features=[3, 17], latent_labels=load_labels)
    >>> as_heatmap_data(["The", " cat"], [0.5, 1.0])
    """
    if isinstance(source, HeatmapData):
        return source
    if isinstance(source, Activations):
        if values is not None and hasattr(values, "encode") and hasattr(values, "site"):
            saved = latent_labels(values) if latent_labels is not None and hasattr(values, "cfg") else {}
            left_out = latent_filter(values) if latent_filter is not None else (None, "")
            return heatmap_data_from_sae(source, values, features, labels, saved, left_out)
        if values is not None:
            raise TypeError(
                f"With Activations, the second argument is an SAE (ilab.SAE), got {type(values).__name__}: "
                f"{values!r:.60}; use site=/features= to pick dimensions."
            )
        return heatmap_data_from_activations(source, site=site, features=features, labels=labels)
    if values is None:
        raise TypeError("Give values with string tokens: FeatureHeatmap(tokens, values).")
    return heatmap_data(source, values, feature_ids=features, labels=labels)
