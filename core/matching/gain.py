"""Folding's gain (SAE Match): hidden-state approximation at gap 1 with folded, unfolded and random pairings.

SAE Match's claim is that folding each latent's threshold into its vectors improves the matching of
SAEs at consecutive layers. :func:`folding_gain` measures it: for every pair of consecutive SAEs,
layer L+1's activation is predicted from layer L's SAE through the latents paired by folded matching,
by matching without folding, and by random one-to-one pairings (the control), always with the same
approximation (:func:`~.approximate.approximate`); the explained variance of each is the score.

Example
-------
>>> gain = ilab.matching.folding_gain(xs, [sae5, sae6, sae7])
>>> gain.wide(), gain.folded_wins(), gain.chart()
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..checks import check_int
from ..saes import SAE
from ..views.charts import offline
from .approximate import approximate, explained_variance
from .folding import match

PAIRINGS = ("folded", "unfolded", "random")


@dataclass(repr=False)
class FoldingGain:
    """Explained variance at gap 1 per pair of consecutive SAEs and pairing (random: the mean over seeds)."""

    table: Any  # DataFrame: from_site, to_site, pairing, explained_variance, same_as_folded
    n_random: int

    def wide(self) -> Any:
        """One row per pair of SAEs, one column per pairing."""
        wide = self.table.pivot(index=["from_site", "to_site"], columns="pairing", values="explained_variance")
        return wide[list(PAIRINGS)]

    def means(self) -> dict[str, float]:
        """The mean explained variance of each pairing over the pairs of SAEs."""
        return {name: float(v) for name, v in self.wide().mean().items()}

    def folded_wins(self) -> bool:
        """SAE Match's claim: folded matching explains more, on average over the pairs, than matching without
        folding and than random pairing."""
        mean = self.means()
        return mean["folded"] > mean["unfolded"] and mean["folded"] > mean["random"]

    def chart(self) -> Any:
        """Altair: explained variance at gap 1 per pair of SAEs, one bar per pairing."""
        import altair as alt

        df = self.table.assign(pair=self.table.from_site + " → " + self.table.to_site)
        return offline(
            alt.Chart(df)
            .mark_bar()
            .encode(
                x=alt.X("pairing:N", sort=list(PAIRINGS), title=None),
                y=alt.Y("explained_variance:Q", title="explained variance at gap 1"),
                color=alt.Color("pairing:N", sort=list(PAIRINGS)),
                column=alt.Column("pair:N", title=None),
            )
            .properties(width=120, height=200, title="Folding's gain")
        )

    def __repr__(self) -> str:
        mean = self.means()
        parts = ", ".join(f"{name} {mean[name]:.3f}" for name in PAIRINGS)
        return f"FoldingGain({len(self.wide())} pairs at gap 1; mean explained variance: {parts})"


def _rows_of(acts: Mapping[str, torch.Tensor] | Any, site: str) -> torch.Tensor:
    x = acts.flat(site) if hasattr(acts, "flat") else acts[site]
    return x.reshape(-1, x.shape[-1]).float()


def folding_gain(
    acts: Mapping[str, torch.Tensor] | Any,
    saes: Sequence[SAE],
    n_random: int = 3,
    seed: int = 0,
    dense: bool = False,
    progress: bool = False,
) -> FoldingGain:
    """Gap-1 explained variance of consecutive ``saes`` matched with folding, without it, and at random.

    ``acts`` maps each SAE's site to its activations (``{site: [T, D]}`` or an ``Activations``); ``saes`` are
    in layer order, all of one width. ``n_random`` random pairings per pair of SAEs (seeded) make the control.
    ``dense=True`` matches with the exact dense solver (see :func:`~.folding.match`), so that folding and not
    the sparse solver's candidate graph is all that differs between the two matchings.

    >>> gain = ilab.matching.folding_gain(model.collect(texts, sites), saes)
    >>> gain.folded_wins()
    """
    import pandas as pd

    if isinstance(saes, SAE) or not isinstance(saes, Sequence) or len(saes) < 2:
        raise ValueError(f"folding_gain needs a list of at least two SAEs in layer order, got {saes!r:.80}.")
    for i, sae in enumerate(saes):
        if not isinstance(sae, SAE):
            raise TypeError(f"saes[{i}] must be an interplab SAE, got {type(sae).__name__}.")
        if not sae.site or sae.site not in acts:
            held = list(acts.sites if hasattr(acts, "sites") else acts)
            raise ValueError(f"acts holds no activations for {sae.site!r} (saes[{i}]'s site); it holds {held}.")
    n_random = check_int("n_random", n_random, minimum=1)
    rng = np.random.default_rng(check_int("seed", seed, minimum=0))
    rows = []
    for a, b in itertools.pairwise(saes):
        x_from, x_to = _rows_of(acts, a.site), _rows_of(acts, b.site)
        folded = match(a, b, dense=dense, progress=progress).perm
        perms = {"folded": [folded], "unfolded": [match(a, b, dense=dense, progress=progress, folded=False).perm],
                 "random": [rng.permutation(a.d_sae) for _ in range(n_random)]}  # fmt: skip
        for pairing, options in perms.items():
            ev = [explained_variance(x_to, approximate(x_from, a, b, perm)) for perm in options]
            same = float(np.mean([np.mean(perm == folded) for perm in options]))
            rows.append({"from_site": a.site, "to_site": b.site, "pairing": pairing,
                         "explained_variance": float(np.mean(ev)), "same_as_folded": same})  # fmt: skip
    return FoldingGain(pd.DataFrame(rows), n_random)
