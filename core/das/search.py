"""Where can a concept be intervened on? A layer search linear in the number of layers.

Two passes: first a cheap score for every layer, then DAS fitted only at the ``top`` layers by that score.
The result reports per layer the full swap, the score and, where fitted, DAS's held-out IIA (NaN elsewhere).

``score="full_swap"`` ranks by the accuracy of swapping the *whole* site vector at the chosen positions from
source to base (one no-grad pass per layer over the held-out pairs; the sources of every layer are read in one
pass). A layer where even the full swap does not produce the labels cannot hold the concept there. Late layers,
where the answer itself is already written at the last token, score high by this measure whether or not a
low-dimensional subspace there carries the concept.

``score="das"`` is the knob paper's linear-time search: the low-dimensional intervention itself is fitted at
every layer, briefly (``score_epochs`` passes over ``score_pairs`` training pairs), and its IIA on the held-out
pairs is the score; the cost is linear in the number of layers. The full swap is reported beside it.

Example
-------
>>> search = ilab.das.layer_search(model, pairs, kind="resid_post", top=3)
>>> search.best_layer, search.chart()
>>> ilab.das.layer_search(model, pairs, score="das", layers=[8, 10, 12], top=1).best_layer
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ..checks import check_int
from ..model.model import position_columns
from ..model.sites import site_name
from ..model.trace_ops import orthonormal
from ..patching.prompts import PromptPairs
from ..views.charts import offline
from .fit import DASResult, check_fit_args, fit, split
from .intervene import Prepared, evaluate, run
from .pairs import CounterfactualPairs, label_ids

if TYPE_CHECKING:
    from ..model.model import Model

KINDS = ("resid_pre", "resid_post", "resid_mid", "attn_out", "mlp_out")
#: How layers are ranked before DAS is fitted at the top ones.
SCORES = ("full_swap", "das")


@dataclass(repr=False)
class LayerSearch:
    """Per layer: the ranking ``score`` (``scoring``: the full swap's accuracy, or a short DAS fit's held-out IIA),
    the full swap's accuracy and, where DAS was fitted, its held-out IIA."""

    layers: np.ndarray
    score: np.ndarray
    iia: np.ndarray
    kind: str
    k: int
    results: dict[int, DASResult] = field(default_factory=dict)
    full_swap: np.ndarray | None = None  # None: the score is the full swap
    scoring: str = "full_swap"

    def __post_init__(self) -> None:
        if self.full_swap is None:
            self.full_swap = self.score

    @property
    def best_layer(self) -> int:
        """The fitted layer with the highest IIA (the earliest on a tie)."""
        fitted = [(float(v), -int(layer)) for layer, v in zip(self.layers, self.iia, strict=True) if not np.isnan(v)]
        return -max(fitted)[1]

    @property
    def full_swap_layer(self) -> int:
        """The layer where the full swap scores highest (the earliest on a tie): what a full-swap ranking picks."""
        swap = np.asarray(self.full_swap)
        return int(self.layers[int(np.argmax(swap))])

    @property
    def best(self) -> DASResult:
        """The DAS result at :attr:`best_layer`."""
        return self.results[self.best_layer]

    def to_pandas(self) -> Any:
        import pandas as pd

        df = pd.DataFrame({"layer": self.layers, "full_swap": self.full_swap, "das_iia": self.iia})
        if self.scoring == "das":
            df["das_score"] = self.score
        return df

    def chart(self) -> Any:
        """Altair: full-swap accuracy per layer (bars), DAS IIA where fitted (points) and, for ``scoring="das"``,
        the short fits' IIA that ranked the layers (ticks)."""
        import altair as alt

        df = self.to_pandas()
        bars = alt.Chart(df).mark_bar(opacity=0.35).encode(
            x=alt.X("layer:O"), y=alt.Y("full_swap:Q", title="accuracy", scale=alt.Scale(domain=[0, 1])),
            tooltip=["layer", alt.Tooltip("full_swap:Q", format=".2f")])  # fmt: skip
        points = alt.Chart(df.dropna(subset=["das_iia"])).mark_point(filled=True, size=80, color="crimson").encode(
            x="layer:O", y="das_iia:Q", tooltip=["layer", alt.Tooltip("das_iia:Q", format=".2f")])  # fmt: skip
        title = f"layer search ({self.kind}): bars full swap, points DAS k={self.k} IIA"
        layers = bars + points
        if self.scoring == "das":
            layers += alt.Chart(df).mark_tick(thickness=3, size=24, color="black").encode(
                x="layer:O", y="das_score:Q", tooltip=["layer", alt.Tooltip("das_score:Q", format=".2f")])  # fmt: skip
            title += ", ticks the short fits' IIA (the ranking)"
        return offline(layers.properties(title=title, width=380, height=220))

    def __repr__(self) -> str:
        if self.scoring == "das":
            rows = ", ".join(f"L{int(layer)} {f:.2f}/{s:.2f}" + ("" if np.isnan(v) else f"/{v:.2f}")
                             for layer, f, s, v in zip(self.layers, np.asarray(self.full_swap), self.score, self.iia,
                                                       strict=True))  # fmt: skip
            return f"LayerSearch({self.kind}, k={self.k}, scored by DAS; full swap/short DAS/IIA: {rows})"
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
    score: str = "full_swap",
    score_pairs: int = 32,
    score_epochs: int = 1,
    **fit_kwargs: Any,
) -> LayerSearch:
    """Score every layer (``score``: ``"full_swap"`` or ``"das"``), then fit DAS (``k`` dimensions) at the ``top``.

    ``kind`` is the site kind searched (``resid_post``, ``resid_pre``, ...); other keywords go to :func:`fit`
    (``lr`` and ``batch_size`` to the short fits of ``score="das"`` as well, which train ``score_epochs`` passes
    over the first ``score_pairs`` training pairs and are scored on the same held-out pairs as the full swap).

    >>> search = layer_search(model, pairs, top=2, epochs=2)
    >>> layer_search(model, pairs, score="das", layers=[8, 10, 12], top=1, epochs=2).best_layer
    """
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not one of {KINDS}.")
    if score not in SCORES:
        raise ValueError(f"score={score!r} is not one of {SCORES}.")
    layer_list = list(range(model.n_layers)) if layers is None else [check_int("layer", x, 0, model.n_layers - 1)
                                                                       for x in layers]  # fmt: skip
    if not layer_list:
        raise ValueError("layers is empty: give at least one layer (or None for all).")
    top = check_int("top", top, minimum=1)
    score_pairs = check_int("score_pairs", score_pairs, minimum=1)
    score_epochs = check_int("score_epochs", score_epochs, minimum=1)
    sites = [site_name(layer, kind) for layer in layer_list]
    model.parse_sites(sites)
    pairs, _, pos, k = check_fit_args(model, pairs, sites[0], k, positions, test_size)
    train_idx, test_idx = split(len(pairs), test_size, seed)
    sub_idx = train_idx[:score_pairs] if score == "das" else train_idx[:0]
    preps = prepare_sites(model, pairs[torch.cat([sub_idx, test_idx])], sites, pos)
    local_train, local_test = torch.arange(len(sub_idx)), torch.arange(len(sub_idx), len(sub_idx) + len(test_idx))
    lr, batch_size = fit_kwargs.get("lr", 0.01), fit_kwargs.get("batch_size", 16)
    full_swap, das_scores = [], []
    for prep in tqdm(preps, desc="layer scores", disable=not progress, leave=False):
        full_swap.append(evaluate(model, prep, local_test, None)["iia"])
        if score == "das":
            split_idx = (local_train, local_test)
            das_scores.append(short_das_iia(model, prep, split_idx, k, score_epochs, lr, batch_size, seed))
    ranking = np.array(das_scores if score == "das" else full_swap)
    chosen = sorted(np.argsort(-ranking, kind="stable")[: min(top, len(sites))].tolist())
    iia = np.full(len(sites), np.nan)
    results = {}
    for i in tqdm(chosen, desc="DAS per layer", disable=not progress, leave=False):
        res = fit(model, pairs, sites[i], k=k, positions=pos, test_size=test_size, seed=seed, progress=False,
                  **fit_kwargs)  # fmt: skip
        iia[i] = res.iia
        results[layer_list[i]] = res
    return LayerSearch(np.array(layer_list), ranking, iia, kind, k, results, np.array(full_swap), score)


def prepare_sites(model: Model, pairs: CounterfactualPairs, sites: list[str], positions: list[int],
                  batch_size: int = 16) -> list[Prepared]:  # fmt: skip
    """:func:`~interplab.core.das.intervene.prepare` for several sites, the sources of all read in one pass per batch.

    >>> preps = prepare_sites(model, pairs, ["blocks.8.hook_resid_post", "blocks.10.hook_resid_post"], [-1])
    """
    base_ids = [model.to_tokens(t)["input_ids"][0] for t in pairs.base]
    order = [site.name for site in model.parse_sites(sites)]  # run_sites returns them in forward order
    per_site: dict[str, list[torch.Tensor]] = {name: [] for name in order}
    for start in range(0, len(pairs), batch_size):
        enc = model.to_tokens(pairs.source[start : start + batch_size])
        cols = position_columns(enc["attention_mask"].sum(1), positions)
        for name, values in zip(order, model.run_sites(enc, order), strict=True):
            per_site[name].append(values[torch.arange(len(cols))[:, None], cols])
    base_labels = None if pairs.base_labels is None else label_ids(model, pairs.base_labels)
    labels = label_ids(model, pairs.labels)
    return [Prepared(name, positions, base_ids, torch.cat(per_site[model.parse_site(name).name]), labels, base_labels)
            for name in sites]  # fmt: skip


def short_das_iia(model: Model, prep: Prepared, split_idx: tuple[torch.Tensor, torch.Tensor], k: int, epochs: int,
                  lr: float, batch_size: int, seed: int) -> float:  # fmt: skip
    """A short DAS fit (Adam over ``epochs`` seeded passes of the train pairs) scored by IIA on the test pairs.

    >>> short_das_iia(model, prep, (torch.arange(24), torch.arange(24, 44)), k=1, epochs=1, lr=0.05, batch_size=8,
    ...               seed=0)
    """
    train_idx, test_idx = split_idx
    d = prep.source_NPD.shape[-1]
    A = orthonormal(torch.randn(d, k, generator=torch.Generator().manual_seed(seed))).contiguous().requires_grad_(True)
    opt = torch.optim.Adam([A], lr=lr)
    for epoch in range(epochs):
        order = train_idx[torch.randperm(len(train_idx), generator=torch.Generator().manual_seed(seed * 1000 + epoch))]
        for start in range(0, len(order), batch_size):
            _, grad, _ = run(model, prep, order[start : start + batch_size], None, A)
            opt.zero_grad()
            A.grad = grad
            opt.step()
    return evaluate(model, prep, test_idx, orthonormal(A.detach()), batch_size)["iia"]
