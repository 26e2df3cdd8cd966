"""The running statistics behind feature dashboards: one batch of SAE activations at a time, bounded memory.

Per latent it keeps: firing count, sum and max; a fine histogram whose range doubles when a
larger value arrives (exact: bins are powers of two apart, so merging pairs of bins equals
re-binning from scratch); the ``n_top`` highest-activating tokens with their context windows;
and a uniform reservoir of firing tokens (the ``n_reservoir`` largest hash keys of
``(token, latent)``), from which examples across the activation quantiles are picked at the end,
among the sampled tokens *below* the top examples (so they never repeat one: a latent that fired
no more than ``n_top`` times has all its firings shown as top examples and no quantile examples).
Work per batch is proportional to the number of firing (token, latent) pairs, not to
``tokens x d_sae``, apart from one pass to find them.

Example
-------
>>> acc = FeatureAccumulator(d_sae=4096, n_top=20, n_quantile=10, context=24, lead=16, n_bins=32)
>>> acc.update(acts_TM, batch)          # acts of the batch's valid tokens, [n_tok, d_sae]
>>> arrays = acc.finish()               # numpy arrays for FeatureData
"""

from __future__ import annotations

import numpy as np
import torch

from ..data.rows import Batch

_MASK32 = 0xFFFFFFFF
_GID_BITS = 31


def hash_keys(gid: torch.Tensor, latent: torch.Tensor, d_sae: int, seed: int = 0) -> torch.Tensor:
    """Unique pseudo-random int64 keys of (token id, latent) pairs; the same whatever the batching."""
    x = (gid * d_sae + latent + seed * 0x9E3779B1) & _MASK32
    x = x ^ (((gid * d_sae + latent) >> 32) & _MASK32)
    for _ in range(2):
        x = (((x >> 16) ^ x) * 0x45D9F3B) & _MASK32
    x = (x >> 16) ^ x
    return (x << _GID_BITS) | (gid & ((1 << _GID_BITS) - 1))


def fine_bins(n_bins: int) -> int:
    """Internal histogram resolution: a power of two at least 16 x n_bins."""
    return 1 << int(np.ceil(np.log2(16 * n_bins)))


def histogram_from_fine(
    fine_MF: np.ndarray, max_M: np.ndarray, exp_M: np.ndarray, n_bins: int
) -> tuple[np.ndarray, np.ndarray]:
    """Coarse per-latent histograms [M, n_bins] and edges [M, n_bins+1] from the fine ones.

    The fine histogram covers [0, 2**exp) in F bins; coarse bins join g fine bins each, with g the
    smallest integer such that n_bins coarse bins cover max_act. Dead latents get edges 0..1.
    """
    M, F = fine_MF.shape
    alive = max_M > 0
    scale = np.ldexp(float(F), -exp_M.astype(np.int64))  # F / hi, a power of two
    fine_max = np.where(alive, np.floor(max_M.astype(np.float64) * scale), 0).astype(np.int64)
    g = np.maximum(1, -(-(fine_max + 1) // n_bins))
    coarse_idx = np.minimum(np.arange(F)[None, :] // g[:, None], n_bins - 1)
    flat = (np.arange(M)[:, None] * n_bins + coarse_idx).ravel()
    counts = np.bincount(flat, weights=fine_MF.ravel(), minlength=M * n_bins).astype(np.int64).reshape(M, n_bins)
    width = np.where(alive, g / scale, 1.0 / n_bins).astype(np.float64)
    edges = (np.arange(n_bins + 1)[None, :] * width[:, None]).astype(np.float32)
    return counts, edges


class _Slots:
    """Per-latent ranked slots with example context windows, merged batch by batch."""

    def __init__(self, d_sae: int, n: int, context: int):
        self.val = torch.zeros(d_sae, n)  # activation at the example's token; 0 = empty
        self.key = torch.full((d_sae, n), -1, dtype=torch.int64)  # rank key (reservoir) or gid (top)
        self.where = torch.full((d_sae, n, 2), -1, dtype=torch.int64)
        self.tokens = torch.full((d_sae, n, context), -1, dtype=torch.int32)
        self.acts = torch.zeros(d_sae, n, context)

    def tensors(self, prefix: str) -> dict[str, torch.Tensor]:
        return {f"{prefix}_{k}": getattr(self, k) for k in ("val", "key", "where", "tokens", "acts")}


class FeatureAccumulator:
    """Running dashboard statistics for every latent of one SAE (see the module docstring)."""

    def __init__(
        self, d_sae: int, n_top: int, n_quantile: int, context: int, lead: int, n_bins: int, n_reservoir: int = 0
    ):
        self.d_sae, self.n_top, self.n_quantile = d_sae, n_top, n_quantile
        self.context, self.lead, self.n_bins = context, lead, n_bins
        self.n_reservoir = n_reservoir or 4 * n_quantile
        self.n_fine = fine_bins(n_bins)
        self.n_tokens = 0
        self.count = torch.zeros(d_sae, dtype=torch.int64)
        self.sum = torch.zeros(d_sae, dtype=torch.float64)
        self.max = torch.zeros(d_sae)
        self.exp = torch.zeros(d_sae, dtype=torch.int64)  # fine histogram covers [0, 2**exp)
        self.fine = torch.zeros(d_sae, self.n_fine, dtype=torch.int64)
        self.top = _Slots(d_sae, n_top, context)
        self.res = _Slots(d_sae, self.n_reservoir, context)

    # ------------------------------------------------------------------ state
    def state(self) -> dict[str, torch.Tensor]:
        out = {k: getattr(self, k) for k in ("count", "sum", "max", "exp", "fine")}
        out["n_tokens"] = torch.tensor(self.n_tokens)
        return {**out, **self.top.tensors("top"), **self.res.tensors("res")}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        """Take the arrays of :meth:`state`: every one there, with its shape (a ValueError names one that is not)."""
        expected = self.state()
        missing = sorted(set(expected) - set(state))
        extra = sorted(set(state) - set(expected))
        if missing or extra:
            raise ValueError(f"checkpoint arrays missing {missing}, unknown {extra}")
        for name, value in state.items():
            current = expected[name]
            if not isinstance(value, torch.Tensor) or value.shape != current.shape:
                shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise ValueError(f"checkpoint array {name} is {shape}, not {tuple(current.shape)}")
            value = value.to(current.dtype)
            if name == "n_tokens":
                self.n_tokens = int(value)
            elif name.startswith(("top_", "res_")):
                setattr(self.top if name.startswith("top_") else self.res, name[4:], value.clone())
            else:
                setattr(self, name, value.clone())

    # ----------------------------------------------------------------- update
    def update(self, acts_TM: torch.Tensor, batch: Batch) -> None:
        """Fold in one batch: ``acts_TM`` are the activations of ``batch.valid_BL``'s tokens, in row order.

        Runs on one thread: these are many small tensor operations, and on a busy machine
        several threads spend far longer synchronising than computing (30x measured on 2 shared cores).
        """
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            self._update(acts_TM, batch)
        finally:
            torch.set_num_threads(threads)

    @torch.no_grad()
    def _update(self, acts_TM: torch.Tensor, batch: Batch) -> None:
        pos_T2 = batch.valid_BL.nonzero()  # (row, col) of each valid token
        self.n_tokens += int(acts_TM.shape[0])
        tok_E, lat_E = (acts_TM > 0).nonzero(as_tuple=True)  # sorted by token, then latent
        val_E = acts_TM[tok_E, lat_E].float()
        if tok_E.numel() == 0:
            return
        gid_T = batch.gid_base_B[pos_T2[:, 0]] + pos_T2[:, 1]
        gid_E = gid_T[tok_E]
        counts_M = torch.bincount(lat_E, minlength=self.d_sae)
        self.count += counts_M
        self.sum += torch.bincount(lat_E, weights=val_E.double(), minlength=self.d_sae)
        batch_max = torch.zeros(self.d_sae).scatter_reduce_(0, lat_E, val_E, "amax")
        self._histogram(lat_E, val_E, torch.maximum(self.max, batch_max))
        tmap_BL = torch.full(batch.ids_BL.shape, -1, dtype=torch.int64)
        tmap_BL[pos_T2[:, 0], pos_T2[:, 1]] = torch.arange(pos_T2.shape[0])
        ctx = (acts_TM, pos_T2, tmap_BL, batch)
        # Only entries that beat a latent's current last slot can enter (after warm-up, few do).
        # top: by value desc, earlier token first on ties (entries come in token order; sorts are stable)
        cand = (val_E > self.top.val[:, -1][lat_E]).nonzero().flatten()
        self._merge(self.top, cand, lat_E, val_E, gid_E, tok_E, val_E, ctx)
        # reservoir: the largest hash keys, a uniform sample of firing tokens
        key_E = hash_keys(gid_E, lat_E, self.d_sae)
        cand = (key_E > self.res.key[:, -1][lat_E]).nonzero().flatten()
        self._merge(self.res, cand, lat_E, val_E, gid_E, tok_E, key_E, ctx)

    def _histogram(self, lat_E: torch.Tensor, val_E: torch.Tensor, new_max: torch.Tensor) -> None:
        new_exp = torch.frexp(new_max).exponent.long()  # new_max < 2**new_exp
        grow = (new_exp > self.exp) & (self.max > 0)
        if bool(grow.any()):
            rows = grow.nonzero().flatten()
            shift = (new_exp[rows] - self.exp[rows]).clamp(max=62)
            idx = torch.arange(self.n_fine)[None, :] >> shift[:, None]
            self.fine[rows] = torch.zeros_like(self.fine[rows]).scatter_add_(1, idx, self.fine[rows])
        fresh = self.max == 0
        self.exp = torch.where(fresh | grow, new_exp, self.exp)
        self.max = new_max
        scale = torch.ldexp(torch.full((self.d_sae,), float(self.n_fine)), -self.exp)  # exact powers of two
        bins = (val_E * scale[lat_E]).floor().long().clamp_(0, self.n_fine - 1)
        self.fine.view(-1).index_add_(0, lat_E * self.n_fine + bins, torch.ones_like(bins))

    def _merge(
        self,
        slots: _Slots,
        cand: torch.Tensor,
        lat_E: torch.Tensor,
        val_E: torch.Tensor,
        gid_E: torch.Tensor,
        tok_E: torch.Tensor,
        rank_E: torch.Tensor,
        ctx: tuple[torch.Tensor, torch.Tensor, torch.Tensor, Batch],
    ) -> None:
        """Merge candidate entries into the slots of the latents they belong to (rank desc, stable)."""
        if cand.numel() == 0:
            return
        n = slots.val.shape[1]
        order = torch.sort(rank_E[cand], descending=True, stable=True).indices
        e = cand[order]
        e = e[torch.sort(lat_E[e], stable=True).indices]  # grouped by latent, rank desc inside
        rows, counts = torch.unique_consecutive(lat_E[e], return_counts=True)
        row_of = torch.repeat_interleave(torch.arange(rows.numel()), counts)
        slot = torch.arange(e.numel()) - (torch.cumsum(counts, 0) - counts)[row_of]
        keep = slot < n
        e, row_of, slot = e[keep], row_of[keep], slot[keep]
        is_top = slots is self.top
        R = rows.numel()
        cand_rank = torch.full((R, n), -1, dtype=rank_E.dtype)
        cand_rank[row_of, slot] = rank_E[e]
        cand_e = torch.full((R, n), -1, dtype=torch.int64)
        cand_e[row_of, slot] = e
        old_rank = (slots.val if is_top else slots.key)[rows]
        sel = torch.sort(torch.cat([old_rank, cand_rank], 1), dim=1, descending=True, stable=True).indices[:, :n]
        new = sel >= n
        old_pick = sel.clamp(max=n - 1)
        for name in ("val", "key", "where", "tokens", "acts"):
            arr = getattr(slots, name)
            part = arr.index_select(0, rows)
            idx = old_pick.view(*old_pick.shape, *([1] * (part.dim() - 2))).expand(-1, -1, *part.shape[2:])
            arr.index_copy_(0, rows, part.gather(1, idx))
        r_new, s_new = new.nonzero(as_tuple=True)
        e_n = cand_e[r_new, sel[r_new, s_new] - n]
        self._fill(slots, rows[r_new], s_new, e_n, val_E, gid_E, tok_E, rank_E, ctx, is_top)

    def _fill(
        self,
        slots: _Slots,
        lat_n: torch.Tensor,
        slot_n: torch.Tensor,
        e_n: torch.Tensor,
        val_E: torch.Tensor,
        gid_E: torch.Tensor,
        tok_E: torch.Tensor,
        rank_E: torch.Tensor,
        ctx: tuple[torch.Tensor, torch.Tensor, torch.Tensor, Batch],
        is_top: bool,
    ) -> None:
        """Write newly selected examples: value, key, where, and the context window of tokens and acts."""
        acts_TM, pos_T2, tmap_BL, batch = ctx
        t = tok_E[e_n]
        row, col = pos_T2[t, 0], pos_T2[t, 1]
        flat = lat_n * slots.val.shape[1] + slot_n  # index into the slots flattened over (latent, slot)
        slots.val.view(-1).index_copy_(0, flat, val_E[e_n])
        slots.key.view(-1).index_copy_(0, flat, gid_E[e_n] if is_top else rank_E[e_n])
        slots.where.view(-1, 2).index_copy_(0, flat, torch.stack([batch.doc_B[row], batch.offset_B[row] + col], 1))
        L = batch.ids_BL.shape[1]
        cols = col[:, None] + torch.arange(self.context) - self.lead
        inside = (cols >= 0) & (cols < L)
        cols_c = cols.clamp(0, L - 1)
        rows_c = row[:, None].expand_as(cols_c)
        shown = inside & batch.shown_BL[rows_c, cols_c]
        slots.tokens.view(-1, self.context).index_copy_(
            0, flat, torch.where(shown, batch.ids_BL[rows_c, cols_c], -1).int()
        )
        tt = torch.where(inside, tmap_BL[rows_c, cols_c], -1)
        lat_c = lat_n[:, None].expand_as(tt)
        slots.acts.view(-1, self.context).index_copy_(
            0, flat, torch.where(tt >= 0, acts_TM[tt.clamp(min=0), lat_c].float(), 0.0)
        )

    # ------------------------------------------------------------------ finish
    def finish(self) -> dict[str, np.ndarray]:
        """Plain numpy arrays named as :class:`FeatureData` fields."""
        n = max(self.n_tokens, 1)
        count = self.count.numpy()
        out: dict[str, np.ndarray] = {
            "density": (count / n).astype(np.float32),
            "max_act": self.max.numpy().astype(np.float32),
            "mean_act": np.where(count > 0, self.sum.numpy() / np.maximum(count, 1), 0).astype(np.float32),
        }
        out["hist_counts"], out["hist_edges"] = histogram_from_fine(
            self.fine.numpy(), out["max_act"], self.exp.numpy(), self.n_bins
        )
        out.update(_slot_arrays("top", self.top, torch.arange(self.n_top).expand(self.d_sae, -1)))
        out.update(_slot_arrays("quantile", self.res, self._quantile_picks()))
        return out

    def _quantile_picks(self) -> torch.Tensor:
        """Reservoir slot of each quantile example [M, n_quantile] (-1 = none): spread over the sorted sample
        of firing tokens below the top examples (activation under the smallest top one, with the top slots full)."""
        res = self.res
        floor = self.top.val[:, -1:]  # the smallest top example; 0 while the top slots are not full
        below = (res.val > 0) & (res.val < floor)
        key = torch.where(below, res.val, torch.tensor(-float("inf")))
        order = torch.sort(key, dim=1, descending=True, stable=True).indices  # ties: larger key first
        filled = below.sum(1, keepdim=True)
        j = torch.arange(self.n_quantile)[None, :]
        spread = ((2 * j + 1) * filled) // (2 * self.n_quantile)
        rank = torch.where(filled >= self.n_quantile, spread, torch.where(j < filled, j, -1))
        return torch.where(rank >= 0, order.gather(1, rank.clamp(min=0)), -1)


def _slot_arrays(prefix: str, slots: _Slots, pick_MK: torch.Tensor) -> dict[str, np.ndarray]:
    """Gather chosen slots into the FeatureData layout; ``pick_MK`` = -1 leaves an empty example."""
    empty = pick_MK < 0
    p = pick_MK.clamp(min=0)
    val = slots.val.gather(1, p).masked_fill(empty, 0.0)
    where = slots.where.gather(1, p[..., None].expand(-1, -1, 2)).masked_fill(empty[..., None], -1)
    C = slots.tokens.shape[2]
    tokens = slots.tokens.gather(1, p[..., None].expand(-1, -1, C)).masked_fill(empty[..., None], -1)
    acts = slots.acts.gather(1, p[..., None].expand(-1, -1, C)).masked_fill(empty[..., None], 0.0)
    return {
        f"{prefix}_max": val.numpy().astype(np.float32),
        f"{prefix}_where": where.numpy().astype(np.int64),
        f"{prefix}_tokens": tokens.numpy().astype(np.int32),
        f"{prefix}_acts": acts.numpy().astype(np.float32),
    }
