"""The stitching paper's two comparisons (Leask et al.), each measured against a control that could fail.

:func:`novel_insertion`: the large SAE's *novel* latents (no small latent at decoder cosine >= ``threshold``,
a data-free split) inserted into the small SAE lower its error, more than as many large latents drawn at
random; and, one latent at a time, novel latents lower it more often than reconstruction latents do.

:func:`meta_resemblance`: a meta-SAE's latent directions (trained on the large SAE's decoder rows) resemble
the smaller SAE's decoder rows: the best |cosine| of each meta-latent with a small SAE's row, against random
directions drawn with the large decoder's own second moment (they share its anisotropy, so they pass only as
far as that alone explains) and isotropic random unit vectors.

Example
-------
>>> ins = novel_insertion(sae512, sae4096, x_TD); ins.holds(), ins.table
>>> res = meta_resemblance(meta, sae512, sae4096); res.holds(), res.table
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch.nn.functional import normalize

from ..checks import check_float, check_fraction, check_int
from ..saes import SAE
from .meta import decoder_rows


def _check_pair(small: Any, large: Any) -> None:
    for name, sae in (("small", small), ("large", large)):
        if not isinstance(sae, SAE):
            raise TypeError(f"{name} must be an interplab SAE, got {type(sae).__name__}.")
    if small.d_in != large.d_in:
        raise ValueError(f"small reads d_in={small.d_in} and large d_in={large.d_in}: the claims need one site.")


@dataclass
class NovelInsertion:
    """Errors of the small SAE, with its novel latents inserted, with as many random large latents, and of the
    large SAE (``table``: one row per reconstruction; ``per_latent``: each kind's share of live latents
    that lower the small SAE's error when inserted alone)."""

    table: pd.DataFrame  # reconstruction, n_inserted, mse, draw
    per_latent: pd.DataFrame  # kind, n_latents, n_live, share_lowering, mean_delta
    mse_small: float
    mse_novel: float
    mse_random: np.ndarray  # [draws]

    def holds(self) -> bool:
        """The paper's direction: inserting the novel latents lowers the error, below every random draw."""
        return self.mse_novel < self.mse_small and bool(self.mse_novel < self.mse_random.min())

    def chart(self) -> Any:
        """MSE of each reconstruction (random draws as points)."""
        import altair as alt

        from ..views.charts import offline

        return offline(alt.Chart(self.table).mark_point(filled=True, size=70).encode(
            x=alt.X("mse:Q", title="MSE on held-out tokens"), y=alt.Y("reconstruction:N", title=None),
            tooltip=["reconstruction", "n_inserted", "mse"]).properties(width=360))  # fmt: skip


@torch.no_grad()
def novel_insertion(
    small: SAE, large: SAE, x_TD: torch.Tensor, threshold: float = 0.7, draws: int = 5, seed: int = 0
) -> NovelInsertion:
    """Insert ``large``'s novel latents into ``small`` and compare the error with ``draws`` random sets of as many.

    >>> ins = ilab.matching.novel_insertion(sae512, sae4096, acts.flat(site)); ins.holds()
    """
    _check_pair(small, large)
    threshold = check_fraction("threshold", threshold, what="a cosine similarity")
    draws = check_int("draws", draws, minimum=1)
    if not isinstance(x_TD, torch.Tensor) or x_TD.ndim != 2 or x_TD.shape[1] != small.d_in or len(x_TD) == 0:
        raise ValueError(f"x_TD must be activations [T, {small.d_in}], got {getattr(x_TD, 'shape', type(x_TD))}.")
    x = x_TD.float()
    f_l, d_l = large.encode(x), large.W_dec.detach().float()
    recon = small.decode(small.encode(x))
    novel = (decoder_rows(large) @ decoder_rows(small).T).max(1).values < threshold
    n = int(novel.sum())
    mse = lambda r: float((x - r).pow(2).sum(1).mean())  # noqa: E731
    inserted = lambda idx: mse(recon + f_l[:, idx] @ d_l[idx])  # noqa: E731
    gen = torch.Generator().manual_seed(seed)
    random = np.array([inserted(torch.randperm(large.d_sae, generator=gen)[:n]) for _ in range(draws)])
    rows = [("small", 0, mse(recon), 0), (f"small + {n} novel", n, inserted(novel.nonzero().flatten()), 0)]
    rows += [(f"small + {n} random", n, float(v), i) for i, v in enumerate(random)]
    rows.append(("large", large.d_sae, mse(large.decode(f_l)), 0))
    err = x - recon  # one latent alone: ||err - f w||^2 - ||err||^2, summed over tokens
    delta = (f_l.pow(2) * d_l.pow(2).sum(1) - 2 * f_l * (err @ d_l.T)).sum(0) / len(x)
    live = (f_l > 0).any(0)
    per = []
    for kind, mask in (("novel", novel), ("reconstruction", ~novel)):
        sel = mask & live
        per.append({"kind": kind, "n_latents": int(mask.sum()), "n_live": int(sel.sum()),
                    "share_lowering": float((delta[sel] < 0).float().mean()) if bool(sel.any()) else float("nan"),
                    "mean_delta": float(delta[sel].mean()) if bool(sel.any()) else float("nan")})  # fmt: skip
    table = pd.DataFrame(rows, columns=["reconstruction", "n_inserted", "mse", "draw"])
    return NovelInsertion(table=table, per_latent=pd.DataFrame(per), mse_small=rows[0][2], mse_novel=rows[1][2],
                          mse_random=random)  # fmt: skip


@dataclass
class MetaResemblance:
    """Each direction set's best |cosine| with a small SAE's decoder rows (``max_cos``: name -> [n]), summarised
    in ``table`` (mean, median, standard error per set)."""

    max_cos: dict[str, np.ndarray]
    table: pd.DataFrame

    def margin(self, control: str = "decoder-covariance random") -> float:
        """How many standard errors the meta-latents' mean best |cosine| lies above ``control``'s.

        >>> res.margin("random unit")
        """
        controls = [k for k in self.max_cos if k != "meta-latents"]
        if control not in controls:
            raise ValueError(f"control={control!r} is not a control here; choose one of {controls}.")
        a, b = self.max_cos["meta-latents"], self.max_cos[control]
        se = float(np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b)))
        return float((a.mean() - b.mean()) / max(se, 1e-12))

    def holds(self, sigmas: float = 4.0) -> bool:
        """The paper's claim: meta-latents resemble the small SAE's latents more than directions drawn with the
        large decoder's second moment do (mean best |cosine| ``sigmas`` standard errors above; medians above).

        >>> res.holds()
        """
        sigmas = check_float("sigmas", sigmas, minimum=0.0)
        meta, control = self.max_cos["meta-latents"], self.max_cos["decoder-covariance random"]
        return self.margin() > sigmas and float(np.median(meta)) > float(np.median(control))

    def chart(self) -> Any:
        """Distributions of the best |cosine| per direction, one per set."""
        import altair as alt

        from ..views.charts import offline

        long = pd.DataFrame([(k, float(v)) for k, vs in self.max_cos.items() for v in vs], columns=["set", "max_cos"])
        return offline(alt.Chart(long).transform_density("max_cos", groupby=["set"], as_=["max_cos", "density"])
                       .mark_line().encode(x=alt.X("max_cos:Q", title="best |cosine| with a small SAE's decoder row"),
                                           y="density:Q", color="set:N").properties(width=380, height=200))  # fmt: skip


@torch.no_grad()
def meta_resemblance(meta: SAE, small: SAE, large: SAE, seed: int = 0) -> MetaResemblance:
    """Compare ``meta``'s latent directions with ``small``'s decoder rows against random directions.

    ``meta`` was trained on ``large``'s decoder rows; the controls are as many random directions drawn with
    those rows' second moment, and as many isotropic random unit vectors.

    >>> res = ilab.matching.meta_resemblance(meta, sae512, sae4096); res.holds(), res.margin()
    """
    _check_pair(small, large)
    if not isinstance(meta, SAE) or meta.d_in != large.d_in:
        raise ValueError(f"meta must be an SAE on {large.d_in}-wide decoder rows, got {type(meta).__name__}"
                         f"{'' if not isinstance(meta, SAE) else f' reading d_in={meta.d_in}'}.")  # fmt: skip
    target = decoder_rows(small)
    gen = torch.Generator().manual_seed(seed)
    n, rows = meta.d_sae, decoder_rows(large)
    sets = {
        "meta-latents": normalize(meta.W_dec.detach().float(), dim=1),
        "decoder-covariance random": normalize(torch.randn(n, len(rows), generator=gen) @ rows, dim=1),
        "random unit": normalize(torch.randn(n, large.d_in, generator=gen), dim=1),
    }
    max_cos = {name: (dirs @ target.T).abs().max(1).values.numpy() for name, dirs in sets.items()}
    table = pd.DataFrame([{"directions": name, "n": len(v), "mean": float(v.mean()), "median": float(np.median(v)),
                           "se": float(v.std(ddof=1) / np.sqrt(len(v)))} for name, v in max_cos.items()])  # fmt: skip
    return MetaResemblance(max_cos=max_cos, table=table)
