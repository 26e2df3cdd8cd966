"""PS-Eval against the MSE-L0 frontier: are SAEs that reconstruct better at a given sparsity more monosemantic?

For each SAE: its L0 (mean active latents per token) and normalised MSE (squared error over the
activations' variance, so 1 - explained variance) on the activations given, and its PS-Eval metrics
(:func:`~.polysemy.polysemy`, every SAE read in one forward pass). **Frontier position** is the
*frontier gap*: ``log10(nMSE)`` minus ``log10`` of the lowest nMSE any SAE of the sweep reaches with at
most the same L0. It is 0 for an SAE on the frontier and grows the further an SAE lies above it.
:attr:`ParetoResult.rank_correlation` is Spearman's rho between the frontier score (``-gap``: higher is
closer to the frontier) and a PS-Eval metric; the PS-Eval paper's finding is that it is not positive.

Example
-------
>>> result = pareto(saes, model, store.read(site)[-1024:])
>>> result.table[["name", "l0", "nmse", "frontier_gap", "accuracy"]]
>>> result.rank_correlation("accuracy")       # (rho, p_value)
>>> result.chart()
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from ..views.charts import offline
from .polysemy import PolysemyResult, PolyWord, polysemy
from .tidy import check_choices, check_sae, encode_rows

if TYPE_CHECKING:
    from ..model.model import Model
    from ..saes.base import SAE

METRICS = ("accuracy", "precision", "recall", "specificity")


def frontier_gap(l0: Sequence[float], nmse: Sequence[float]) -> np.ndarray:
    """``log10(nmse)`` minus ``log10`` of the lowest nmse reached at an L0 no larger: 0 on the MSE-L0 frontier.

    >>> frontier_gap([4, 16, 16], [0.5, 0.2, 0.4]).round(3).tolist()
    [0.0, 0.0, 0.301]
    """
    l0_a, nmse_a = np.asarray(l0, dtype=float), np.asarray(nmse, dtype=float)
    if l0_a.shape != nmse_a.shape or l0_a.ndim != 1 or l0_a.size == 0:
        raise ValueError(f"l0 and nmse must be two lists of one length, got shapes {l0_a.shape} and {nmse_a.shape}.")
    if not (np.isfinite(nmse_a).all() and (nmse_a > 0).all() and np.isfinite(l0_a).all()):
        raise ValueError(f"nmse must be positive and finite and l0 finite, got nmse={nmse_a.tolist()}.")
    best = np.array([nmse_a[l0_a <= v].min() for v in l0_a])
    return np.log10(nmse_a) - np.log10(best)


@dataclass(repr=False)
class ParetoResult:
    """One row per SAE: name, site, L0, MSE, normalised MSE, frontier gap, on_frontier and the PS-Eval metrics."""

    table: pd.DataFrame

    def rank_correlation(self, metric: str = "accuracy") -> tuple[float, float]:
        """Spearman's rho (and its p-value) between frontier score (``-frontier_gap``) and a PS-Eval ``metric``.

        >>> rho, p = result.rank_correlation("recall")
        """
        from scipy.stats import spearmanr

        check_choices("metric", [metric], METRICS)
        if len(self.table) < 3:
            raise ValueError(f"A rank correlation needs at least 3 SAEs, got {len(self.table)}.")
        rho, p = spearmanr(-self.table["frontier_gap"], self.table[metric])
        return float(rho), float(p)

    def beats(self, control: Sequence[PolysemyResult], metric: str = "accuracy") -> bool:
        """Whether the sweep's mean PS-Eval ``metric`` exceeds the mean of ``control`` (e.g. random SAEs' results).

        >>> sweep.beats(ilab.evals.polysemy(random_saes, model), "accuracy")
        """
        check_choices("metric", [metric], METRICS)
        if not isinstance(control, (list, tuple)) or not control:
            raise ValueError(f"control must be a non-empty list of PolysemyResult, got {control!r:.80}.")
        return float(self.table[metric].mean()) > float(np.mean([r.metrics[metric] for r in control]))

    def chart(self, metric: str = "accuracy") -> Any:
        """L0 against normalised MSE (log scales, the frontier as a line), coloured by ``metric``; beside it the
        frontier gap against ``metric``."""
        import altair as alt

        check_choices("metric", [metric], METRICS)
        df = self.table.copy()
        tip = ["name", "l0", "nmse", "frontier_gap", *METRICS]
        base = alt.Chart(df).properties(width=260, height=200)
        dots = base.mark_circle(size=90).encode(
            x=alt.X("l0:Q", scale=alt.Scale(type="log"), title="L0"),
            y=alt.Y("nmse:Q", scale=alt.Scale(type="log"), title="normalised MSE"),
            color=alt.Color(f"{metric}:Q", scale=alt.Scale(scheme="viridis")), tooltip=tip)  # fmt: skip
        line = alt.Chart(df[df.on_frontier].sort_values("l0")).mark_line(color="gray").encode(x="l0:Q", y="nmse:Q")
        names = base.mark_text(dx=8, align="left", fontSize=9).encode(x="l0:Q", y="nmse:Q", text="name:N")
        left = (line + dots + names).properties(title="MSE-L0 frontier")
        rho, _ = self.rank_correlation(metric)
        right = base.mark_circle(size=90).encode(
            x=alt.X("frontier_gap:Q", title="frontier gap (log10 nMSE above the frontier)"),
            y=alt.Y(f"{metric}:Q", title=f"PS-Eval {metric}"), tooltip=tip,
        ).properties(title=f"PS-Eval {metric} by frontier gap (Spearman rho of -gap: {rho:.2f})")  # fmt: skip
        return offline(alt.hconcat(left, right))

    def __repr__(self) -> str:
        return f"ParetoResult({len(self.table)} SAEs)\n{self.table.round(3).to_string(index=False)}"


def pareto(
    saes: Sequence[SAE], model: Model, acts: torch.Tensor | Mapping[str, torch.Tensor],
    words: list[PolyWord] | str | os.PathLike[str] | None = None, names: Sequence[str] | None = None,
    batch_size: int = 32, progress: bool = True,
) -> ParetoResult:  # fmt: skip
    """L0, MSE and PS-Eval of each SAE in ``saes``, and each one's gap to the sweep's MSE-L0 frontier.

    ``acts``: activations [tokens, d] where every SAE reads, or a mapping from site to them (each SAE uses
    its own site's). ``words``: PS-Eval's words (default the built-in 48). ``names``: one per SAE (default
    from its architecture and settings).

    >>> result = pareto([topk4, topk16, l1], model, store.read("blocks.6.hook_resid_post")[-1024:])
    >>> result.rank_correlation("accuracy")
    """
    saes = _check_saes(saes)
    names = _names(saes, names)
    rows = [_reconstruction(sae, _acts_for(sae, acts, name)) for sae, name in zip(saes, names, strict=True)]
    results = polysemy(saes, model, words, batch_size=batch_size, progress=progress)
    table = pd.DataFrame([{"name": n, "site": r.site, **row, **{m: r.metrics[m] for m in METRICS}}
                          for n, r, row in zip(names, results, rows, strict=True)])  # fmt: skip
    table.insert(5, "frontier_gap", frontier_gap(table["l0"], table["nmse"]))
    table.insert(6, "on_frontier", table["frontier_gap"] <= 1e-12)
    return ParetoResult(table)


def _check_saes(saes: Any) -> list[Any]:
    if not isinstance(saes, (list, tuple)) or len(saes) < 2:
        raise ValueError(f"saes must be a list of at least 2 SAEs to place on a frontier, got {saes!r:.80}.")
    for sae in saes:
        check_sae(sae)
    return list(saes)


def _names(saes: list[Any], names: Sequence[str] | None) -> list[str]:
    if names is None:
        return [_default_name(s.cfg) for s in saes]
    names = list(names)
    if len(names) != len(saes) or len(set(names)) != len(names) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"names must be {len(saes)} distinct strings, one per SAE, got {names!r}.")
    return names


def _default_name(cfg: Any) -> str:
    setting = f" k={cfg.k}" if cfg.k is not None else ""
    setting += f" l1={cfg.l1_coefficient:g}" if cfg.l1_coefficient is not None else ""
    return f"{cfg.arch}{setting} w={cfg.d_sae} @ {cfg.site}"


def _acts_for(sae: Any, acts: Any, name: str) -> torch.Tensor:
    if isinstance(acts, Mapping):
        if sae.cfg.site not in acts:
            raise ValueError(f"acts has no activations for {name}'s site {sae.cfg.site!r}; it has {list(acts)}.")
        acts = acts[sae.cfg.site]
    if not isinstance(acts, torch.Tensor) or acts.ndim != 2 or acts.shape[1] != sae.cfg.d_in or len(acts) < 2:
        shape = tuple(acts.shape) if isinstance(acts, torch.Tensor) else type(acts).__name__
        raise ValueError(f"acts for {name} must be a tensor [tokens >= 2, {sae.cfg.d_in}], got {shape}.")
    return acts


def _reconstruction(sae: Any, x_TD: torch.Tensor) -> dict[str, float]:
    x_TD = x_TD.float()
    latents_TS = encode_rows(sae, x_TD)
    with torch.no_grad():
        recon_TD = sae.decode(latents_TS.to(sae.W_dec.dtype)).float()
    mse = float(((recon_TD - x_TD) ** 2).sum(1).mean())
    variance = float(((x_TD - x_TD.mean(0)) ** 2).sum(1).mean())
    nmse = mse / variance if variance > 0 else math.nan
    return {"l0": float((latents_TS > 0).float().sum(1).mean()), "mse": mse, "nmse": nmse}
