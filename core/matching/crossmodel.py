"""Cross-model similarity (universality): which latents of two models respond to the same text.

Both models read the same texts; tokens are aligned by the character where they end (with
different tokenizers only positions where both end a token are compared), and the Pearson
correlation of every latent of SAE A with every latent of SAE B is taken over the aligned tokens,
block by block. A latent's *max pairwise correlation* (MPC) is its best partner's correlation; its
distribution says how universal the two dictionaries are (Wang et al., Transformers vs Mambas).

Example
-------
>>> sim = similarity(model_a, sae_a, model_b, sae_b, texts)
>>> sim.mpc_a.mean(), sim.chart()
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..checks import check_texts
from ..saes import SAE

BLOCK = 2048


@dataclass
class Similarity:
    """Max pairwise correlations both ways, the best partners, and how many tokens were compared."""

    mpc_a: np.ndarray  # [M_a] best |correlation| of each latent of A with a latent of B (nan: never fires)
    partner_a: np.ndarray  # [M_a]
    mpc_b: np.ndarray  # [M_b]
    partner_b: np.ndarray  # [M_b]
    n_tokens: int
    names: tuple[str, str] = ("A", "B")

    def to_frame(self) -> Any:
        import pandas as pd

        a = pd.DataFrame({"side": self.names[0], "latent": np.arange(len(self.mpc_a)), "mpc": self.mpc_a,
                          "partner": self.partner_a})  # fmt: skip
        b = pd.DataFrame({"side": self.names[1], "latent": np.arange(len(self.mpc_b)), "mpc": self.mpc_b,
                          "partner": self.partner_b})  # fmt: skip
        return pd.concat([a, b], ignore_index=True).dropna()

    def chart(self) -> Any:
        """Histograms of the max pairwise correlation of each side's live latents."""
        import altair as alt

        from ..views.charts import offline

        chart = alt.Chart(self.to_frame()).mark_bar(opacity=0.6).encode(
            x=alt.X("mpc:Q", bin=alt.Bin(maxbins=40), title="max pairwise correlation"),
            y=alt.Y("count():Q", stack=None), color="side:N")  # fmt: skip
        return offline(chart.properties(title=f"{self.names[0]} vs {self.names[1]}: {self.n_tokens} tokens",
                                        width=360, height=200))  # fmt: skip


@torch.no_grad()
def correlate(a_TM: torch.Tensor, b_TN: torch.Tensor) -> Similarity:
    """Max pairwise Pearson correlation between the columns of ``a_TM`` and ``b_TN`` (same tokens, rows aligned)."""
    if a_TM.ndim != 2 or b_TN.ndim != 2 or len(a_TM) != len(b_TN) or len(a_TM) < 2:
        raise ValueError(f"a_TM and b_TN must be [tokens, latents] with the same tokens (>= 2), got "
                         f"{list(a_TM.shape)} and {list(b_TN.shape)}.")  # fmt: skip

    def standardise(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.float() - x.float().mean(0)
        sd = x.pow(2).sum(0).sqrt()
        return x / sd.clamp_min(1e-12), sd > 1e-12

    za, live_a = standardise(a_TM)
    zb, live_b = standardise(b_TN)
    best_a = torch.full((za.shape[1],), -1.0)
    arg_a = torch.zeros(za.shape[1], dtype=torch.long)
    best_b = torch.full((zb.shape[1],), -1.0)
    arg_b = torch.zeros(zb.shape[1], dtype=torch.long)
    for i in range(0, za.shape[1], BLOCK):
        c = za[:, i : i + BLOCK].T @ zb  # [block, N]
        c[:, ~live_b] = -1.0
        v, j = c.max(1)
        best_a[i : i + BLOCK], arg_a[i : i + BLOCK] = v, j
        v, j = c.max(0)
        better = v > best_b
        best_b[better], arg_b[better] = v[better], j[better] + i
    mpc_a = torch.where(live_a, best_a, torch.nan).numpy()
    mpc_b = torch.where(live_b, best_b, torch.nan).numpy()
    return Similarity(mpc_a, arg_a.numpy(), mpc_b, arg_b.numpy(), len(a_TM))


def token_ends(tokenizer: Any, text: str, n: int) -> list[int]:
    """The character where each of the ``n`` tokens of ``text`` ends (-1 for special tokens such as BOS)."""
    enc = tokenizer(text, return_offsets_mapping=True)
    offsets = enc["offset_mapping"]
    if len(offsets) != n:
        raise ValueError(f"The tokenizer gives {len(offsets)} tokens for a text the model read as {n}.")
    ids = enc["input_ids"]
    special = set(getattr(tokenizer, "all_special_ids", []))
    return [-1 if (ids[i] in special or end <= start) else int(end) for i, (start, end) in enumerate(offsets)]


def align_ends(ends_a: Sequence[int], ends_b: Sequence[int]) -> list[tuple[int, int]]:
    """Pairs ``(i, j)`` of tokens of A and B that end at the same character (special tokens, -1, skipped).

    >>> align_ends([-1, 3, 7, 9], [-1, 3, 5, 9])
    [(1, 1), (3, 3)]
    """
    where_b = {e: j for j, e in enumerate(ends_b) if e >= 0}
    return [(i, where_b[e]) for i, e in enumerate(ends_a) if e >= 0 and e in where_b]


def aligned_latents(
    model_a: Any, sae_a: SAE, model_b: Any, sae_b: SAE, texts: str | Sequence[str], batch_size: int = 8,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Latent activations of both SAEs on the tokens where both tokenizations end at the same character."""
    texts = check_texts(texts)
    sa, sb = sae_a.check_fits(model_a), sae_b.check_fits(model_b)
    acts_a = model_a.collect(texts, sites=[sa], batch_size=batch_size)
    acts_b = model_b.collect(texts, sites=[sb], batch_size=batch_size)
    rows_a, rows_b = [], []
    for t, text in enumerate(texts):
        na, nb = int(acts_a.mask[t].sum()), int(acts_b.mask[t].sum())
        ends_a, ends_b = token_ends(model_a.tokenizer, text, na), token_ends(model_b.tokenizer, text, nb)
        pairs = align_ends(ends_a, ends_b)
        if pairs:
            ia, ib = (torch.as_tensor(p) for p in zip(*pairs, strict=True))
            rows_a.append(acts_a[sa][t, ia])
            rows_b.append(acts_b[sb][t, ib])
    if not rows_a:
        raise ValueError("No token of these texts ends at the same character for both tokenizers.")
    with torch.no_grad():
        return sae_a.encode(torch.cat(rows_a)).cpu(), sae_b.encode(torch.cat(rows_b)).cpu()  # compared on the CPU


def similarity(
    model_a: Any, sae_a: SAE, model_b: Any, sae_b: SAE, texts: str | Sequence[str], batch_size: int = 8,
    names: tuple[str, str] | None = None,
) -> Similarity:  # fmt: skip
    """Max pairwise correlations between the latents of two SAEs (two models or two sites) on shared text.

    >>> sim = ilab.matching.similarity(gemma, sae6, mamba, mamba_sae, texts)
    """
    lat_a, lat_b = aligned_latents(model_a, sae_a, model_b, sae_b, texts, batch_size)
    sim = correlate(lat_a, lat_b)
    sim.names = names or (f"{model_a.name}:{sae_a.site}", f"{model_b.name}:{sae_b.site}")
    return sim
