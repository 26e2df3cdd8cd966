"""SAE Match (Balagansky et al.): align the latents of two SAEs without data.

Each latent's activation threshold is *folded* into its vectors (encoder column and bias divided
by it, decoder row multiplied by it), which makes a latent and a rescaled copy of it (same
behaviour, other threshold) identical. Latents are then paired one to one by the linear assignment
that minimises the mean squared error between folded decoder rows (and encoder columns with
``encoder=True``).

The assignment is solved on a sparse candidate graph (each latent's ``candidates`` nearest latents
on the other side, both ways, plus the pairing by rank of norm so a full matching always exists;
:func:`scipy.sparse.csgraph.min_weight_full_bipartite_matching`),
built block by block so the dense cost matrix never exists; the graph grows when it has no full
matching. ``dense=True`` solves the full matrix with :func:`scipy.optimize.linear_sum_assignment`
(the reference, and the benchmark's baseline).

Example
-------
>>> m = match(sae_a, sae_b)
>>> m.perm[12], m.error[12]        # the latent of sae_b matched to latent 12 of sae_a, and its MSE
>>> m.share_below(0.1)             # share of latents matched with an error under 0.1
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import min_weight_full_bipartite_matching
from tqdm.auto import tqdm

from ..checks import check_int, check_number
from ..memory.budget import check_memory
from ..saes import SAE

#: Rows of the cost matrix computed at once (a block is rows x d_sae floats).
BLOCK = 1024
#: Neighbours by rank of norm added on each side of the pairing by rank (unrelated latents: norms dominate).
BAND = 4


@dataclass
class Folded:
    """An SAE's latents with their thresholds folded in: ``W_enc`` [M, D], ``b_enc`` [M], ``W_dec`` [M, D]."""

    W_enc: torch.Tensor
    b_enc: torch.Tensor
    W_dec: torch.Tensor
    scale: torch.Tensor  # [M] the factor folded (the threshold, or 1 where there is none)


def thresholds(sae: SAE) -> torch.Tensor:
    """Each latent's activation threshold [M]: the SAE's own (JumpReLU, BatchTopK), else ones (ReLU, TopK)."""
    t = sae.threshold
    if t is None:
        return torch.ones(sae.d_sae, device=sae.W_dec.device)
    t = t.detach().float().clone()
    return torch.where(t > 0, t, torch.ones_like(t))


def fold(sae: SAE, by_threshold: bool = True) -> Folded:
    """Fold each latent's threshold into its encoder column, encoder bias and decoder row.

    A latent fires where ``pre > t``, so dividing the encoder by ``t`` makes it fire above 1, and the
    decoder times ``t`` keeps the reconstruction the same. ``by_threshold=False`` folds nothing (every
    factor 1): the SAE's own parameters in the same layout, the baseline that folding is compared with.

    >>> fold(sae).scale[:3], fold(sae, by_threshold=False).scale[:3]
    """
    t = thresholds(sae) if by_threshold else torch.ones(sae.d_sae, device=sae.W_dec.device)
    with torch.no_grad():
        return Folded(W_enc=(sae.W_enc.detach().float() / t).T.contiguous(), b_enc=sae.b_enc.detach().float() / t,
                      W_dec=sae.W_dec.detach().float() * t[:, None], scale=t)  # fmt: skip


@dataclass
class Match:
    """Latent ``i`` of SAE A goes to latent ``perm[i]`` of SAE B with mean squared error ``error[i]``."""

    perm: np.ndarray  # [M_a] int64
    error: np.ndarray  # [M_a] float32, MSE between folded decoder rows (+ encoder columns)
    site_a: str = ""
    site_b: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    def share_below(self, bound: float) -> float:
        """Share of A's latents whose match has an error below ``bound``."""
        return float((self.error < check_number(bound, "bound")).mean())

    def __len__(self) -> int:
        return len(self.perm)

    def to_frame(self) -> Any:
        """One row per latent of A: ``latent``, ``match``, ``error``."""
        import pandas as pd

        return pd.DataFrame({"latent": np.arange(len(self.perm)), "match": self.perm, "error": self.error})

    def __repr__(self) -> str:
        med = float(np.median(self.error)) if len(self.error) else float("nan")
        return f"Match({self.site_a or 'A'} -> {self.site_b or 'B'}, {len(self)} latents, median error {med:.3g})"


def _check_pair(sae_a: Any, sae_b: Any) -> None:
    for name, sae in (("sae_a", sae_a), ("sae_b", sae_b)):
        if not isinstance(sae, SAE):
            raise TypeError(
                f"{name} must be an interplab SAE (ilab.load_sae / ilab.train_sae), got {type(sae).__name__}."
            )
    if sae_a.d_in != sae_b.d_in:
        raise ValueError(f"SAEs of different widths cannot be matched: sae_a reads d_in={sae_a.d_in}, "
                         f"sae_b d_in={sae_b.d_in}.")  # fmt: skip
    if sae_a.d_sae != sae_b.d_sae:
        raise ValueError(f"match pairs latents one to one: sae_a has {sae_a.d_sae} latents and sae_b {sae_b.d_sae}. "
                         "Use ilab.matching.stitch for SAEs of different sizes.")  # fmt: skip


def _vectors(f: Folded, encoder: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows compared (decoder, with the encoder beside it) and their squared norms."""
    v = torch.cat([f.W_dec, f.W_enc], 1) if encoder else f.W_dec
    return v, v.pow(2).sum(1)


def cost_block(va: torch.Tensor, na: torch.Tensor, vb: torch.Tensor, nb: torch.Tensor) -> torch.Tensor:
    """MSE between each row of ``va`` and each row of ``vb`` [rows_a, rows_b] (through one matmul)."""
    return ((na[:, None] + nb[None, :] - 2 * va @ vb.T) / va.shape[1]).clamp_min_(0)


def match(
    sae_a: SAE,
    sae_b: SAE,
    encoder: bool = False,
    candidates: int = 32,
    dense: bool = False,
    progress: bool = True,
    folded: bool = True,
) -> Match:
    """Pair every latent of ``sae_a`` with one of ``sae_b`` (same width) by folded-parameter MSE.

    ``folded=False`` pairs them by the MSE of their parameters as they are (thresholds left out): the
    baseline of SAE Match's folding.

    >>> m = ilab.matching.match(ilab.load_sae("embedded", layer=6), sae7)
    >>> m.share_below(0.05)
    """
    _check_pair(sae_a, sae_b)
    if not isinstance(folded, bool):
        raise TypeError(f"folded must be True (fold thresholds in, SAE Match) or False, got {folded!r}.")
    n = sae_a.d_sae
    candidates = min(check_int("candidates", candidates, minimum=1), n)
    if dense:
        check_memory(f"A dense {n:,} x {n:,} cost matrix", 12 * n * n, "Use the sparse solver (dense=False).")
    else:
        check_memory(f"Matching two SAEs of {n:,} latents", 4 * (BLOCK * n + 2 * n * (2 * sae_a.d_in + 64)))
    fa, fb = fold(sae_a, folded), fold(sae_b, folded)
    va, na = _vectors(fa, encoder)
    vb, nb = _vectors(fb, encoder)
    if dense:
        cost = torch.cat([cost_block(va[i : i + BLOCK], na[i : i + BLOCK], vb, nb) for i in range(0, n, BLOCK)])
        rows, perm = linear_sum_assignment(cost.numpy())
        error = cost[torch.as_tensor(rows), torch.as_tensor(perm)].numpy()
        info = {"solver": "dense", "folded": folded}
        return Match(perm.astype(np.int64), error.astype(np.float32), sae_a.site, sae_b.site, info)
    k = candidates
    while True:
        perm, error = _sparse_assignment(va, na, vb, nb, k, progress)
        if perm is not None:
            return Match(perm, error, sae_a.site, sae_b.site, {"solver": "sparse", "candidates": k, "folded": folded})
        if k >= n:  # pragma: no cover - a complete graph always has a full matching
            raise RuntimeError("No full matching found on the complete graph.")
        k = min(n, 2 * k)


def _nearest_both(va: torch.Tensor, na: torch.Tensor, vb: torch.Tensor, nb: torch.Tensor, k: int,
                  progress: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """Each row of ``va``'s ``k`` cheapest rows of ``vb`` and each row of ``vb``'s ``k`` cheapest rows of ``va``
    (costs and indices), from one pass over the cost matrix, block by block."""
    vals, idx = [], []
    col_vals = torch.full((k, len(vb)), float("inf"))
    col_idx = torch.zeros((k, len(vb)), dtype=torch.long)
    for i in tqdm(range(0, len(va), BLOCK), desc="match", disable=not progress, leave=False):
        c = cost_block(va[i : i + BLOCK], na[i : i + BLOCK], vb, nb)
        v, j = torch.topk(c, k, dim=1, largest=False)
        vals.append(v)
        idx.append(j)
        cv, ci = torch.topk(c, min(k, len(c)), dim=0, largest=False)
        merged_v, pick = torch.topk(torch.cat([col_vals, cv]), k, dim=0, largest=False)
        col_idx = torch.gather(torch.cat([col_idx, ci + i]), 0, pick)
        col_vals = merged_v
    return torch.cat(vals), torch.cat(idx), col_vals.T.contiguous(), col_idx.T.contiguous()


def _sparse_assignment(
    va: torch.Tensor, na: torch.Tensor, vb: torch.Tensor, nb: torch.Tensor, k: int, progress: bool
) -> tuple[np.ndarray | None, np.ndarray]:
    n = len(va)
    cost_ab, col_ab, cost_ba, row_ba = _nearest_both(va, na, vb, nb, k, progress)
    # one full matching is always in the graph (latents paired by rank of norm), so a full matching exists;
    # it also covers latents every other latent avoids (norms dominate the MSE of unrelated latents)
    by_a, by_b = torch.argsort(na), torch.argsort(nb)
    band_r, band_c, band_v = [], [], []
    for shift in range(-BAND, BAND + 1):  # a band of neighbours by rank of norm, the pairing itself at 0
        other = by_b.roll(shift)
        band_r.append(by_a.numpy())
        band_c.append(other.numpy())
        band_v.append((va[by_a] - vb[other]).pow(2).mean(1).numpy())
    rows = np.concatenate([np.repeat(np.arange(n), k), row_ba.numpy().ravel(), *band_r])
    cols = np.concatenate([col_ab.numpy().ravel(), np.repeat(np.arange(n), k), *band_c])
    data = np.concatenate([cost_ab.numpy().ravel(), cost_ba.numpy().ravel(), *band_v]).astype(np.float64)
    keys, first = np.unique(rows.astype(np.int64) * n + cols, return_index=True)  # an edge seen from both sides once
    # an exact zero cost is a real edge: shift every weight by one so none is dropped as "no edge"
    graph = csr_matrix((data[first] + 1.0, (keys // n, keys % n)), shape=(n, n))
    try:
        r, c = min_weight_full_bipartite_matching(graph)
    except ValueError:
        return None, np.empty(0)
    perm = np.empty(n, dtype=np.int64)
    perm[r] = c
    error = (va - vb[torch.as_tensor(perm)]).pow(2).mean(1).numpy()
    return perm, error.astype(np.float32)
