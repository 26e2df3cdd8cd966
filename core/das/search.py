"""Where can a concept be intervened on? A layer search linear in the number of layers.

The knob paper's procedure, in two passes: first a cheap score for every layer, the accuracy of
swapping the *whole* site vector at the chosen positions from source to base (one no-grad pass per
layer over the pairs; the sources of every layer are read in one pass). A layer where even the full
swap does not produce the labels cannot hold the concept there, so DAS is then fitted only at the
``top`` layers by that score. The result reports both per layer (IIA is NaN where DAS was not fitted).

Example
-------
>>> search = ilab.das.layer_search(model, pairs, kind="resid_post", top=3)
>>> search.best_layer, search.chart()
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ..checks import check_int
from ..model.sites import site_name
from ..patching.prompts import PromptPairs
from ..views.charts import offline
from .fit import DASResult, check_fit_args, fit, split
from .intervene import evaluate, prepare
from .pairs import CounterfactualPairs

if TYPE_CHECKING:
    from ..model.model import Model

KINDS = ("resid_pre", "resid_post", "resid_mid", "attn_out", "mlp_out")


@dataclass(repr=False)
class LayerSearch:
    """Per layer: the full-swap accuracy (``score``) and, where DAS was fitted, its held-out IIA."""

    layers: np.ndarray
    score: np.ndarray
    iia: np.ndarray
    kind: str
    k: int
    results: dict[int, DASResult] = field(default_factory=dict)

    @property
    def best_layer(self) -> int:
        """The fitted layer with the highest IIA (the earliest on a tie)."""
        fitted = [(float(v), -int(layer)) for layer, v in zip(self.layers, self.iia, strict=True) if not np.isnan(v)]
        return -max(fitted)[1]

    @property
    def best(self) -> DASResult:
        """The DAS result at :attr:`best_layer`."""
        return self.results[self.best_layer]

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame({"layer": self.layers, "full_swap": self.score, "das_iia": self.iia})

    def chart(self) -> Any:
        """Altair: full-swap accuracy per layer (bars) and DAS IIA where fitted (points)."""
        import altair as alt

        df = self.to_pandas()
        bars = alt.Chart(df).mark_bar(opacity=0.35).encode(
            x=alt.X("layer:O"), y=alt.Y("full_swap:Q", title="accuracy", scale=alt.Scale(domain=[0, 1])),
            tooltip=["layer", alt.Tooltip("full_swap:Q", format=".2f")])  # fmt: skip
        points = alt.Chart(df.dropna()).mark_point(filled=True, size=80, color="crimson").encode(
            x="layer:O", y="das_iia:Q", tooltip=["layer", alt.Tooltip("das_iia:Q", format=".2f")])  # fmt: skip
        title = f"layer search ({self.kind}): bars full swap, points DAS k={self.k} IIA"
        return offline((bars + points).properties(title=title, width=380, height=220))

    def __repr__(self) -> str:
        rows = ", ".join(f"L{int(layer)} {s:.2f}" + ("" if np.isnan(v) else f"/{v:.2f}")
                         for layer, s, v in zip(self.layers, self.score, self.iia, strict=True))  # fmt: skip
        return f"LayerSearch({self.kind}, k={self.k}; full swap/IIA: {rows})"


def layer_search(
    model: Model,
    pairs: CounterfactualPairs | PromptPairs,
    kind: str = "resid_post",
    positions: int | Sequence[int] = -1,
    k: int = 1,
    top: int = 3,
    layers: Sequence[int] | None = None,
    test_size: float = 0.25,
    seed: int = 0,
    progress: bool = True,
    **fit_kwargs: Any,
) -> LayerSearch:
    """Score every layer by a full swap, then fit DAS (``k`` dimensions) at the ``top`` layers only.

    ``kind`` is the site kind searched (``resid_post``, ``resid_pre``, ...); other keywords go to :func:`fit`.

    >>> search = layer_search(model, pairs, top=2, epochs=2)
    """
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not one of {KINDS}.")
    layer_list = list(range(model.n_layers)) if layers is None else [check_int("layer", x, 0, model.n_layers - 1)
                                                                       for x in layers]  # fmt: skip
    if not layer_list:
        raise ValueError("layers is empty: give at least one layer (or None for all).")
    top = check_int("top", top, minimum=1)
    sites = [site_name(layer, kind) for layer in layer_list]
    model.parse_sites(sites)
    pairs, _, pos, k = check_fit_args(model, pairs, sites[0], k, positions, test_size)
    _, test_idx = split(len(pairs), test_size, seed)
    scores = []
    for site in tqdm(sites, desc="layer scores", disable=not progress, leave=False):
        prep = prepare(model, pairs[test_idx], site, pos)
        scores.append(evaluate(model, prep, torch.arange(len(test_idx)), None)["iia"])
    score = np.array(scores)
    chosen = sorted(np.argsort(-score, kind="stable")[: min(top, len(sites))].tolist())
    iia = np.full(len(sites), np.nan)
    results = {}
    for i in tqdm(chosen, desc="DAS per layer", disable=not progress, leave=False):
        res = fit(model, pairs, sites[i], k=k, positions=pos, test_size=test_size, seed=seed, progress=False,
                  **fit_kwargs)  # fmt: skip
        iia[i] = res.iia
        results[layer_list[i]] = res
    return LayerSearch(np.array(layer_list), score, iia, kind, k, results)
