"""SAE stitching (Leask et al.): move latents of a larger SAE into a smaller one on the same site.

Each latent of the large SAE is compared with the small SAE's latents by decoder cosine
similarity: one with no small latent above ``threshold`` is **novel** (it adds information:
inserting it lowers the error), one with a close small latent is a **reconstruction** latent
(it re-represents what its small partners hold: swapping it in replaces them). Stitching starts
from the small SAE, inserts the novel latents, then swaps in the reconstruction latents group by
group (removing their small partners), and records the reconstruction MSE at each step.

Example
-------
>>> st = stitch(small, large, x_TD)                  # x_TD: activations of the site
>>> st.kinds[:5], st.curve.tail(1)                   # "novel"/"reconstruction" per large latent; MSE curve
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..checks import check_fraction, check_int
from ..saes import SAE


@dataclass
class Stitching:
    """The large SAE's latents classified, their partners, and the MSE curve as they are stitched in."""

    kinds: np.ndarray  # [M_large] "novel" | "reconstruction"
    max_cosine: np.ndarray  # [M_large] best decoder cosine with a small latent
    partners: list[list[int]]  # [M_large] small latents each replaces (empty for novel ones)
    delta_mse: np.ndarray  # [M_large] change of the small SAE's MSE when the latent alone is inserted
    curve: Any  # DataFrame: step, n_novel, n_swapped, n_small, n_large, mse, stage
    mse_small: float
    mse_large: float

    def chart(self) -> Any:
        """MSE as latents are stitched in (novel ones first, then swaps), with both SAEs' own MSE."""
        import altair as alt

        from ..views.charts import offline

        line = alt.Chart(self.curve).mark_line(point=True).encode(
            x=alt.X("n_large:Q", title="latents of the large SAE stitched in"), y=alt.Y("mse:Q", title="MSE"),
            color=alt.Color("stage:N"), tooltip=["n_small", "n_large", "mse"])  # fmt: skip
        rules = alt.Chart(self.curve.head(1).assign(small=self.mse_small, large=self.mse_large)).transform_fold(
            ["small", "large"], as_=["sae", "value"]).mark_rule(strokeDash=[4, 3]).encode(
            y="value:Q", color=alt.Color("sae:N"))  # fmt: skip
        return offline((line + rules).properties(title="Stitching a large SAE into a small one", width=360))


@torch.no_grad()
def stitch(small: SAE, large: SAE, x_TD: torch.Tensor, threshold: float = 0.7, points: int = 40) -> Stitching:
    """Classify ``large``'s latents against ``small`` and record the MSE curve of stitching them in.

    >>> st = ilab.matching.stitch(sae_1k, sae_4k, acts.flat(site))
    """
    for name, sae in (("small", small), ("large", large)):
        if not isinstance(sae, SAE):
            raise TypeError(f"{name} must be an interplab SAE, got {type(sae).__name__}.")
    if small.d_in != large.d_in:
        raise ValueError(f"small reads d_in={small.d_in} and large d_in={large.d_in}: stitching needs one site.")
    threshold = check_fraction("threshold", threshold, what="a cosine similarity")
    points = check_int("points", points, minimum=2)
    if not isinstance(x_TD, torch.Tensor) or x_TD.ndim != 2 or x_TD.shape[1] != small.d_in or len(x_TD) == 0:
        raise ValueError(f"x_TD must be activations [T, {small.d_in}], got {getattr(x_TD, 'shape', type(x_TD))}.")
    x = x_TD.float()
    f_s, f_l = small.encode(x), large.encode(x)
    d_s = small.W_dec.detach().float()
    d_l = large.W_dec.detach().float()
    cos = torch.nn.functional.normalize(d_l, dim=1) @ torch.nn.functional.normalize(d_s, dim=1).T  # [Ml, Ms]
    best = cos.max(1).values
    recon = small.decode(f_s)
    mse = lambda r: float((x - r).pow(2).sum(1).mean())  # noqa: E731
    err = x - recon
    # inserting latent j alone: ||err - f_j w_j||^2 - ||err||^2 = f_j^2 |w_j|^2 - 2 f_j (err . w_j)
    delta = (f_l.pow(2) * d_l.pow(2).sum(1) - 2 * f_l * (err @ d_l.T)).sum(0) / len(x)
    novel = best < threshold
    partners = [[] if bool(novel[j]) else (cos[j] >= threshold).nonzero().flatten().tolist() for j in range(len(d_l))]
    kinds = np.where(novel.numpy(), "novel", "reconstruction")
    # the curve: novel latents (most helpful first), then reconstruction latents with their partners removed
    order_novel = [int(j) for j in torch.argsort(delta) if bool(novel[j])]
    order_swap = [int(j) for j in torch.argsort(-best) if not bool(novel[j])]
    steps = [("novel", j) for j in order_novel] + [("swap", j) for j in order_swap]
    marks = set(np.unique(np.linspace(0, len(steps), points).round().astype(int)).tolist())
    removed = torch.zeros(small.d_sae, dtype=torch.bool)
    rows = [{"step": 0, "n_novel": 0, "n_swapped": 0, "n_small": small.d_sae, "n_large": 0, "mse": mse(recon),
             "stage": "novel"}]  # fmt: skip
    n_novel = n_swap = 0
    for i, (stage, j) in enumerate(steps, start=1):
        recon += f_l[:, j : j + 1] * d_l[j]
        if stage == "swap":
            gone = [p for p in partners[j] if not bool(removed[p])]
            if gone:
                idx = torch.as_tensor(gone)
                recon -= f_s[:, idx] @ d_s[idx]
                removed[idx] = True
            n_swap += 1
        else:
            n_novel += 1
        if i in marks:
            rows.append({"step": i, "n_novel": n_novel, "n_swapped": n_swap, "n_small": int((~removed).sum()),
                         "n_large": n_novel + n_swap, "mse": mse(recon), "stage": stage})  # fmt: skip
    import pandas as pd

    return Stitching(kinds=kinds, max_cosine=best.numpy(), partners=partners, delta_mse=delta.numpy(),
                     curve=pd.DataFrame(rows), mse_small=mse(small.decode(f_s)),
                     mse_large=mse(large.decode(f_l)))  # fmt: skip
