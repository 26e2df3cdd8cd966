"""Hidden-state approximation (SAE Match): predict layer L+g's activation from layer L's SAE.

Layer L's activation is encoded by its SAE; the folded latent activations (each divided by its
threshold) are carried to layer L+g's latents through the chained matches and decoded there with
the folded decoder. Explained variance by gap g says how far features persist (g = 0 is the
SAE's own reconstruction).

Example
-------
>>> df = explained_by_gap(acts, saes, max_gap=3)      # acts: {site: [T, D]} or Activations
>>> explained_variance_chart(df)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..checks import check_int
from ..saes import SAE
from ..views.charts import offline
from .folding import Match, fold
from .lineage import compose, match_chain


def explained_variance(x_TD: torch.Tensor, x_hat_TD: torch.Tensor) -> float:
    """1 - residual variance / total variance (over tokens, summed over the width)."""
    if x_TD.shape != x_hat_TD.shape or x_TD.ndim != 2:
        raise ValueError(f"x_TD and x_hat_TD must both be [tokens, width] of one shape, got {list(x_TD.shape)} "
                         f"and {list(x_hat_TD.shape)}.")  # fmt: skip
    total = (x_TD - x_TD.mean(0)).pow(2).sum()
    return float(1 - (x_TD - x_hat_TD).pow(2).sum() / total.clamp_min(1e-12))


@torch.no_grad()
def approximate(x_TD: torch.Tensor, sae_from: SAE, sae_to: SAE, perm: np.ndarray) -> torch.Tensor:
    """Layer L+g's activation predicted from layer L's ``x_TD`` via ``sae_from``'s latents mapped by ``perm``."""
    if len(perm) != sae_from.d_sae or sae_from.d_sae != sae_to.d_sae:
        raise ValueError(f"perm must map {sae_from.d_sae} latents onto an SAE of the same size "
                         f"(got {len(perm)} entries and an SAE of {sae_to.d_sae}).")  # fmt: skip
    ff, ft = fold(sae_from), fold(sae_to)
    acts = sae_from.encode(x_TD.float()) / ff.scale  # folded activations
    moved = torch.zeros_like(acts)
    moved[:, torch.as_tensor(perm, device=acts.device)] = acts
    return moved.to(ft.W_dec.device) @ ft.W_dec + sae_to.b_dec.detach()


def _flat(acts: Any, site: str) -> torch.Tensor:
    if hasattr(acts, "flat"):
        return acts.flat(site)
    x = acts[site]
    return x.reshape(-1, x.shape[-1])


def explained_by_gap(
    acts: Mapping[str, torch.Tensor] | Any, saes: Sequence[SAE], max_gap: int = 3,
    chain: Sequence[Match] | None = None, progress: bool = True,
) -> Any:  # fmt: skip
    """Explained variance of layer L+g predicted from layer L, for every start and gap up to ``max_gap``.

    ``saes`` are in layer order (each reads the site ``acts`` holds for it); ``chain`` reuses matches
    from :func:`match_chain`. Returns a DataFrame: ``from_site``, ``to_site``, ``gap``, ``explained_variance``.

    >>> df = ilab.matching.explained_by_gap(model.collect(texts, sites), saes, max_gap=3)
    """
    import pandas as pd

    max_gap = min(check_int("max_gap", max_gap, minimum=0), len(saes) - 1)
    for sae in saes:
        if not sae.site or sae.site not in acts:
            raise ValueError(f"acts holds no activations for {sae.site!r} (an SAE's site); it holds "
                             f"{list(acts.sites if hasattr(acts, 'sites') else acts)}.")  # fmt: skip
    chain = list(chain) if chain is not None else match_chain(saes, progress=progress)
    rows = []
    for start in range(len(saes)):
        x_from = _flat(acts, saes[start].site)
        for gap in range(0, min(max_gap, len(saes) - 1 - start) + 1):
            end = start + gap
            perm = np.arange(saes[start].d_sae) if gap == 0 else compose(chain[start:end])
            x_to = _flat(acts, saes[end].site)
            ev = explained_variance(x_to, approximate(x_from, saes[start], saes[end], perm))
            rows.append({"from_site": saes[start].site, "to_site": saes[end].site, "gap": gap,
                         "explained_variance": ev})  # fmt: skip
    return pd.DataFrame(rows)


def explained_variance_chart(df: Any) -> Any:
    """Explained variance by gap: one point per start layer, the mean as a line (the paper's figure)."""
    import altair as alt

    base = alt.Chart(df)
    points = base.mark_circle(opacity=0.5).encode(x=alt.X("gap:O", title="gap g (layers)"),
                                                  y=alt.Y("explained_variance:Q", title="explained variance"),
                                                  tooltip=["from_site", "to_site", "explained_variance"])  # fmt: skip
    line = base.mark_line().encode(x="gap:O", y="mean(explained_variance):Q")
    return offline((points + line).properties(title="Layer L+g from layer L's SAE through matched latents",
                                              width=320, height=220))  # fmt: skip
