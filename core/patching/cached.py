"""Exact grids at interactive speed: reuse the base run's keys and values for the positions before a patch.

Patching one cell at position ``p`` of layer ``l`` leaves every earlier position unchanged (attention is
causal), and every earlier layer too. So a cell's forward pass needs only positions ``p..`` from layer
``l`` on: the base (corrupted, when denoising) run's keys and values for positions ``< p`` are handed to
the model as its cache, the blocks before ``l`` are skipped (nnsight's ``Envoy.skip``) with the base
run's residual stream as their output, and the patch is written at layer ``l``. Every prompt pair runs
in the same pass (their prompts align token by token), and neighbouring cells share a pass when that is
cheaper (the later cell's rows start at the earlier position, their first tokens unpatched): a pass has a
fixed cost, so a small model or a late layer runs its cells in a few passes, a large one in many short ones
(:func:`group_positions` chooses under :func:`pass_cost`).

Only tensors, envoys, ``readout`` and a transformers ``DynamicCache`` enter a trace, so this runs with
``remote="local"`` (nnsight's remote serialisation) too; a server must accept a ``DynamicCache`` argument.

Example
-------
>>> out = grid_cached(model, ids_corrupt, ids_clean, True, metric, "resid_pre", positions, batch=64, k=5)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import nnsight
import torch

from ..model.trace_ops import read_site, token_probs, write_site
from ..readout.metrics import BoundMetric
from .prepare import ORDER, site_target

if TYPE_CHECKING:
    from ..model.model import Model

#: The fixed cost of one pass, in token-blocks (one token row through one block): tracing and hooks, and above
#: all the readout, which reads the whole unembedding for the rows that need top tokens (about 50 ms on the
#: embedded model, 10 ms on a GPT-2-small-sized one, against 0.06-0.1 ms per token-block in large batches).
PASS_OVERHEAD = 256
#: The fixed cost of running one block in a pass, in token rows: reading its weights (1.5-3 ms here), which
#: a pass of a few token rows pays as much as a large one.
BLOCK_TOKENS = 24


def supported(model: Model) -> bool:
    """Whether the cached path applies: a transformers model (it takes a ``cache=`` argument) whose cache holds
    keys and values at every layer (see :func:`why_not_cached`)."""
    try:
        from transformers import DynamicCache, PreTrainedModel
    except ImportError:  # pragma: no cover
        return False
    return DynamicCache is not None and isinstance(model.module, PreTrainedModel) and why_not_cached(model) is None


def why_not_cached(model: Model) -> str | None:
    """Why a transformers model's cache cannot be cut at a position (None when it can, or for a model that is not a
    transformers one): a layer that keeps a recurrent state (Mamba's SSM and convolution states, linear attention)
    holds no keys and values per position, so no pass can start from the base run's positions before a patch."""
    from transformers import PreTrainedModel
    from transformers.cache_utils import CacheLayerMixin, LinearAttentionCacheLayerMixin

    if not isinstance(model.module, PreTrainedModel):
        return None  # not a transformers model: full passes, nothing to say
    try:
        layers = new_cache(model).layers
    except (TypeError, ValueError, AttributeError) as err:
        return f"no transformers DynamicCache is built for it ({type(err).__name__}: {str(err)[:100]})"
    kinds = sorted({type(layer).__name__ for layer in layers if isinstance(layer, LinearAttentionCacheLayerMixin)
                    or not isinstance(layer, CacheLayerMixin)})  # fmt: skip
    if kinds:
        return f"its cache has layers without per-position keys and values ({', '.join(kinds)})"
    return None


def new_cache(model: Model) -> Any:
    """An empty transformers ``DynamicCache`` for this model, keeping every position of sliding-window layers."""
    from transformers import DynamicCache, PreTrainedModel
    from transformers.cache_utils import DynamicSlidingWindowLayer, LinearAttentionCacheLayerMixin

    lm = model.module
    if not isinstance(lm, PreTrainedModel):
        raise TypeError(f"A cache needs a transformers model, got {type(lm).__name__}.")
    cache = DynamicCache(config=lm.config)
    for layer in cache.layers:
        sliding = getattr(layer, "is_sliding", False)
        if sliding and isinstance(layer, (DynamicSlidingWindowLayer, LinearAttentionCacheLayerMixin)):
            layer.activate_past_recording()  # a pass may start anywhere: keep all keys, not only the last window
    return cache


def cache_prefix(model: Model, kv: list[tuple[torch.Tensor, torch.Tensor]], p: int, repeat: int) -> Any:
    """A fresh cache holding positions ``< p`` of every layer's keys and values, the batch tiled ``repeat`` times.

    The layers take the tensors as they are (``update`` would copy them once more); the pass's own keys
    are concatenated to them, never written into them.
    """
    cache = new_cache(model)
    for layer, (k, v) in zip(cache.layers, kv, strict=True):
        keys, values = k[:, :, :p], v[:, :, :p]
        if repeat > 1:
            keys, values = keys.repeat(repeat, 1, 1, 1), values.repeat(repeat, 1, 1, 1)
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values
        if hasattr(layer, "cumulative_length"):  # sliding-window layers count the positions they have seen
            layer.cumulative_length = p
    return cache


def full_run(
    model: Model, ids_NP: torch.Tensor, kinds: Sequence[str]
) -> tuple[dict[str, torch.Tensor], torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """One forward: each kind's value at every layer [N, n_layers, P, D], the final-position logits [N, V] and
    every layer's keys and values."""
    targets = sorted((layer, ORDER.index(k), k) for layer in range(model.n_layers) for k in kinds)
    envoys = [site_target(model, k, layer) for layer, _, k in targets]
    root, last, readout = model.nn, model.block(model.n_layers - 1), model.readout  # the body holds no Model
    inputs = {"input_ids": ids_NP.to(model.device), "attention_mask": torch.ones_like(ids_NP).to(model.device)}
    with torch.no_grad(), root.trace(inputs, cache=new_cache(model), use_cache=True, logits_to_keep=1,
                                     **model.trace_kwargs):  # fmt: skip
        saved = nnsight.save([read_site(envoy, io) for envoy, io in envoys])
        logits = nnsight.save(readout(read_site(last, "output")[:, -1]))
        cache = nnsight.save(root.output.cache)
    acts = {k: torch.stack([s.detach().float().cpu() for (_, _, kk), s in zip(targets, saved) if kk == k], 1)
            for k in kinds}  # fmt: skip
    kv = [(layer.keys.detach(), layer.values.detach()) for layer in cache.layers]
    return acts, logits.detach().float().cpu(), kv


class Passes:
    """Runs the patched passes of one grid: the base prompts, their cache and the envoys, fetched once.

    With ``token_ids`` (the only tokens a logit-difference metric reads), rows that need no top tokens
    are unembedded at those tokens only; their other logits stay 0.
    """

    def __init__(self, model: Model, ids_NP: torch.Tensor, kv: list[tuple[torch.Tensor, torch.Tensor]], kind: str,
                 token_ids: torch.Tensor | None = None):  # fmt: skip
        self.model, self.ids, self.kv, self.kind, self.token_ids = model, ids_NP, kv, kind, token_ids
        self.blocks = [model.block(j) for j in range(model.n_layers)]
        self.readout_parts = model.readout_parts

    def run(self, layer: int, start: int, rows_RpD: torch.Tensor, skip_RpD: torch.Tensor | None,
            full_R: torch.Tensor) -> torch.Tensor:  # fmt: skip
        """Final-position logits [R, vocab]: tokens ``start..`` of the tiled base prompts, the blocks before the
        patched one skipped with ``skip_RpD`` (the rows themselves when None) as their output, the site set to
        ``rows_RpD``. Rows where ``full_R`` is False hold logits at ``token_ids`` only (when given)."""
        model, kind = self.model, self.kind
        repeat = len(rows_RpD) // len(self.ids)
        ids = self.ids[:, start:].repeat(repeat, 1).to(model.device)
        inputs = {"input_ids": ids, "attention_mask": torch.ones(len(ids), self.ids.shape[1], dtype=torch.long)}
        past = cache_prefix(model, self.kv, start, repeat)
        first = layer + 1 if kind == "resid_post" else layer  # the first block that runs
        inside = kind in ("heads", "attn_out", "mlp_out") or (kind == "resid_pre" and layer == 0)
        envoy, io = site_target(model, kind, layer) if inside else (None, "")
        blocks, (norm, unembed, cap) = self.blocks, self.readout_parts
        rows = rows_RpD.to(model.device, model.dtype)
        skip = rows if skip_RpD is None else skip_RpD.to(model.device, model.dtype)
        full = full_R if self.token_ids is not None else torch.ones(len(rows), dtype=torch.bool)
        full_idx, part_idx = full.nonzero().flatten().to(model.device), (~full).nonzero().flatten().to(model.device)
        token_ids = None if self.token_ids is None else self.token_ids.to(model.device)
        with torch.no_grad(), model.nn.trace(inputs, cache=past, use_cache=True, **model.trace_kwargs) as tracer:
            for j in range(first):
                blocks[j].skip(skip)
            if envoy is not None:
                write_site(envoy, io, rows)
            h = norm(read_site(blocks[-1], "output")[:, -1])
            parts = [unembed(h[full_idx])]
            if token_ids is not None and len(part_idx):
                few = h[part_idx] @ unembed.weight[token_ids].T
                parts.append(few if unembed.bias is None else few + unembed.bias[token_ids])
            if cap:
                parts = [torch.tanh(x / cap) * cap for x in parts]
            parts = nnsight.save(parts)
            tracer.stop()
        full_logits = parts[0].detach().float().cpu()
        logits = torch.zeros(len(rows), full_logits.shape[-1])
        logits[full_idx.cpu()] = full_logits
        if len(parts) > 1 and self.token_ids is not None:
            logits[part_idx.cpu()[:, None], self.token_ids[None, :]] = parts[1].detach().float().cpu()
        return logits


def grid_cached(
    model: Model,
    base_ids: torch.Tensor,
    src_ids: torch.Tensor,
    src_is_clean: bool,
    metric: BoundMetric,
    kind: str,
    positions: list[int],
    batch: int,
    k: int,
    bar: Any = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The clean and corrupted final logits [N, V], then values [n_layers, n_cols] (the metric's mean over pairs)
    and the top-k next tokens of pair 0 (ids, probs [n_layers, n_cols, k]): the numbers of the batched path in
    :func:`interplab.core.patching.grid.grid`, from passes that start at the patched layer and position. ``bar`` (a
    progress bar) advances once per layer."""
    needs_input = kind in ("attn_out", "mlp_out", "heads")  # the patched block runs from its own input
    base, base_logits, kv = full_run(model, base_ids, [kind, "resid_pre"] if needs_input else [kind])
    src, src_logits, _ = full_run(model, src_ids, [kind])
    clean, corrupt = (src_logits, base_logits) if src_is_clean else (base_logits, src_logits)
    metric.set_clean(clean)
    n = len(base_ids)
    pair = torch.arange(n)
    cols = list(range(model.n_heads)) if kind == "heads" else positions
    base_vals = metric(base_logits, pair)
    base_probs, base_top = token_probs(base_logits[0]).topk(k) if k else (torch.zeros(0), torch.zeros(0))
    values = base_vals.mean().repeat(model.n_layers, len(cols))  # an unchanged cell is the base run
    top_ids = base_top.repeat(model.n_layers, len(cols), 1)
    top_probs = base_probs.repeat(model.n_layers, len(cols), 1)
    passes = Passes(model, base_ids, kv, kind, metric_tokens(metric))
    for layer in range(model.n_layers):
        b_NPD, s_NPD = base[kind][:, layer], src[kind][:, layer]
        n_blocks = model.n_layers - (layer + 1 if kind == "resid_post" else layer)
        plan = plan_passes(kind, b_NPD, s_NPD, positions, cols, model.d_head, max(1, batch // n), n_blocks)
        for group, start in plan:
            rows = torch.cat([patched(b_NPD, s_NPD, kind, cols[c], positions, start, model.d_head) for c in group])
            skip = base["resid_pre"][:, layer, start:].repeat(len(group), 1, 1) if needs_input else None
            full = (pair == 0).repeat(len(group)) if k else torch.zeros(len(group) * n, dtype=torch.bool)
            logits = passes.run(layer, start, rows, skip, full)  # [len(group) * N, V], cell-major
            vals = metric(logits, pair.repeat(len(group))).view(len(group), n)
            values[layer, group] = vals.mean(1)
            if k:
                probs, ids = token_probs(logits.view(len(group), n, -1)[:, 0]).topk(k, dim=-1)
                top_ids[layer, group], top_probs[layer, group] = ids, probs
        if bar is not None:
            bar.update(1)
    return clean, corrupt, values, top_ids, top_probs


def patched(base_NPD: torch.Tensor, src_NPD: torch.Tensor, kind: str, col: int, positions: list[int], start: int,
            d_head: int) -> torch.Tensor:  # fmt: skip
    """One cell's rows of a pass that starts at ``start``: the base values from there, the cell from the source."""
    row = base_NPD[:, start:].clone()
    if kind == "heads":
        sl = slice(col * d_head, (col + 1) * d_head)
        pos = torch.tensor([p for p in positions if p >= start], dtype=torch.long)
        row[:, pos - start, sl] = src_NPD[:, pos, sl]
    else:
        row[:, col - start] = src_NPD[:, col]
    return row


def pass_cost(n_rows: int, n_tokens: int, n_blocks: int) -> float:
    """The modelled cost of one pass, in token-blocks (one token row through one block): :data:`PASS_OVERHEAD`,
    plus ``n_blocks`` times the pass's token rows and :data:`BLOCK_TOKENS` (measured on this CPU, 2026-12-01)."""
    return PASS_OVERHEAD + n_blocks * (BLOCK_TOKENS + n_rows * n_tokens)


def group_positions(cells: list[tuple[int, int]], n_pairs: int, n_pos: int, n_blocks: int,
                    max_cells: int) -> list[tuple[list[int], int]]:  # fmt: skip
    """The cheapest split of (column, position) cells, sorted by position, into passes of neighbouring cells
    (each pass starts at its first cell's position and holds at most ``max_cells`` cells), under
    :func:`pass_cost`: a dynamic programme over the split points."""
    best, cut = [0.0], [0]
    for j in range(1, len(cells) + 1):
        options = []
        for i in range(j - 1, max(0, j - max_cells) - 1, -1):
            tokens = n_pos - cells[i][1]
            options.append((best[i] + pass_cost(n_pairs * (j - i), tokens, n_blocks), i))
            if n_blocks * n_pairs * (cells[j - 1][1] - cells[i][1]) > PASS_OVERHEAD + n_blocks * BLOCK_TOKENS:
                break  # an earlier start reruns more tokens than a pass of its own costs
        cost, i = min(options)
        best.append(cost)
        cut.append(i)
    groups, j = [], len(cells)
    while j:
        i = cut[j]
        groups.append(([c for c, _ in cells[i:j]], cells[i][1]))
        j = i
    return groups[::-1]


def plan_passes(kind: str, base_NPD: torch.Tensor, src_NPD: torch.Tensor, positions: list[int], cols: list[int],
                d_head: int, max_cells: int, n_blocks: int) -> list[tuple[list[int], int]]:  # fmt: skip
    """The passes of one layer: (column indices, start position); ``n_blocks`` blocks run in each. A cell whose
    source equals the base run in every pair needs none. Position cells are split into passes of neighbours by
    :func:`group_positions`; head cells share passes that start at the first position where any of them differs."""
    differs = base_NPD != src_NPD
    if kind == "heads":
        starts = {}
        for c, h in enumerate(cols):
            at = differs[:, :, h * d_head : (h + 1) * d_head].any(-1).any(0)  # [P]
            first = next((p for p in sorted(positions) if at[p]), None)
            if first is not None:
                starts[c] = first
        todo = sorted(starts)
        return [(todo[i : i + max_cells], min(starts[c] for c in todo[i : i + max_cells]))
                for i in range(0, len(todo), max_cells)]  # fmt: skip
    cells = sorted(((c, p) for c, p in enumerate(cols) if differs[:, p].any()), key=lambda cp: cp[1])
    return group_positions(cells, base_NPD.shape[0], base_NPD.shape[1], n_blocks, max_cells)


def metric_tokens(metric: BoundMetric) -> torch.Tensor | None:
    """The token ids a logit-difference metric reads (None when a metric needs every logit: probabilities,
    KL, any function)."""
    if metric.metric.kind != "logit_diff":
        return None
    ids = [ids_PG[mask_PG] for ids_PG, mask_PG in metric.ids.values()]
    return torch.unique(torch.cat(ids))
