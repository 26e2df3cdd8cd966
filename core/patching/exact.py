"""Exact activation patching: every layer x position (or layer x head) cell, batched.

How it is fast: the cells of one layer are patched together in one forward pass. The trace
runs the single corrupted prompt (batch 1) up to the patched layer, then the site is replaced
by a ``[n_cells, P, d]`` batch (the corrupted activations with one cell taken from the clean
run in each row); everything after broadcasts to the batch. The layers before the patch run
once instead of once per cell, and only the last position is unembedded. Everything crossing
the trace boundary is a tensor, so it also runs with ``remote="local"`` (and NDIF).

Example
-------
>>> pairs = ilab.patching.ioi(model, n=4)
>>> r = ilab.patching.grid(model, pairs.clean, pairs.corrupt, pairs.logit_diff(), site="resid_pre")
>>> r.normalized.shape        # [n_layers, n_positions]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nnsight
import numpy as np
import torch
from tqdm.auto import tqdm

from ..checks import check_int, check_texts
from ..model.remote import REQUEST_BYTES
from ..model.sites import KINDS, site_name
from ..model.trace_ops import read_site, write_site
from ..readout.metrics import BoundMetric, Metric, as_metric
from . import cached
from .prompts import PromptPairs, check_aligned
from .result import PatchingResult

if TYPE_CHECKING:
    from ..model.model import Model

logger = logging.getLogger(__name__)

#: Site kinds a grid can patch; "heads" patches one attention head's ``attn.hook_z`` slice.
SITES = ("resid_pre", "resid_post", "attn_out", "mlp_out", "heads")
DIRECTIONS = ("denoise", "noise")
#: The grid's name for a site kind where it differs from the site table's (:data:`interplab.core.model.sites.KINDS`).
GRID_KIND = {"hook_z": "heads"}
SITE_KIND = {v: k for k, v in GRID_KIND.items()}
#: Memory budget for one patched batch when batch_size is not given.
MEMORY_BUDGET_BYTES = 2 * 1024**3


@dataclass
class Prepared:
    """Checked inputs of a patching run."""

    ids_clean: torch.Tensor  # [n_pairs, P]
    ids_corrupt: torch.Tensor  # [n_pairs, P]
    metric: BoundMetric
    tokens: list[str]
    corrupt_tokens: list[str]

    @property
    def n_pairs(self) -> int:
        """Prompt pairs."""
        return int(self.ids_clean.shape[0])

    @property
    def n_pos(self) -> int:
        """Tokens per prompt (every prompt has the same number)."""
        return int(self.ids_clean.shape[1])


def prepare(
    model: Model, clean: Any, corrupt: Any, metric: Metric | Callable[..., Any] | None, direction: str = "denoise"
) -> Prepared:
    """Check prompts, tokenisation, metric and direction before any forward pass."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction={direction!r} is not one of {DIRECTIONS}.")
    if isinstance(clean, PromptPairs):
        if corrupt is not None and not isinstance(corrupt, (Metric, BoundMetric)) and not callable(corrupt):
            raise TypeError("With PromptPairs, do not pass corrupt prompts separately.")
        metric = metric or (corrupt if corrupt is not None else None) or clean.logit_diff()
        clean, corrupt = clean.clean, clean.corrupt
    if metric is None:
        raise TypeError("Give a metric, e.g. ilab.patching.logit_diff(' Mary', ' John').")
    clean, corrupt = check_texts(clean), check_texts(corrupt if corrupt is not None else [])
    if len(clean) != len(corrupt):
        raise ValueError(f"Got {len(clean)} clean prompts and {len(corrupt)} corrupted ones; give one per pair.")
    model.check_mapped()
    tok = model.tokenizer
    check_aligned(tok, clean, corrupt)
    bound = as_metric(metric).bind(tok, len(clean))
    enc_c, enc_x = model.to_tokens(clean), model.to_tokens(corrupt)
    return Prepared(
        ids_clean=enc_c["input_ids"],
        ids_corrupt=enc_x["input_ids"],
        metric=bound,
        tokens=model.to_str_tokens(enc_c["input_ids"][0]),
        corrupt_tokens=model.to_str_tokens(enc_x["input_ids"][0]),
    )


def check_positions(positions: int | Sequence[int] | None, n_pos: int) -> list[int]:
    """Positions as non-negative indices (negative count from the end); all of them for None."""
    if positions is None:
        return list(range(n_pos))
    items = [positions] if isinstance(positions, int) else list(positions)
    out = []
    for p in items:
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not -n_pos <= p < n_pos:
            raise ValueError(f"Position {p!r} is outside the prompts' {n_pos} tokens (valid: {-n_pos}..{n_pos - 1}).")
        out.append(int(p) % n_pos)
    if not out:
        raise ValueError("positions is empty; give at least one position or None for all.")
    return out


def site_target(model: Model, kind: str, layer: int) -> tuple[Any, str]:
    """The nnsight envoy and "input"/"output" of a grid site kind at one layer."""
    return model.envoy(site_name(layer, SITE_KIND.get(kind, kind)))


ORDER = tuple(GRID_KIND.get(k, k) for k in KINDS)  # grid kinds in forward order inside a block


def collect(
    model: Model, ids: torch.Tensor, kinds: Sequence[str], layers: Sequence[int] | None = None
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """One no-grad trace: each kind's value at each layer ([N, n_layers, P, D]) and the last-position logits."""
    order = sorted(kinds, key=ORDER.index)
    layers = range(model.n_layers) if layers is None else sorted(layers)
    targets = [(k, layer, *site_target(model, k, layer)) for layer in layers for k in order]
    last, readout = model.block(model.n_layers - 1), model.readout
    inputs = {"input_ids": ids.to(model.device), "attention_mask": torch.ones_like(ids).to(model.device)}
    with torch.no_grad(), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
        saved = [read_site(envoy, io) for _, _, envoy, io in targets]
        logits = readout(read_site(last, "output")[:, -1])
        saved = nnsight.save(saved)
        logits = nnsight.save(logits)
        tracer.stop()
    out = {k: torch.stack([s.detach().float().cpu() for (kk, _, _, _), s in zip(targets, saved) if kk == k], 1)
           for k in kinds}  # fmt: skip
    return out, logits.detach().float().cpu()


def run_rows(model: Model, ids_1P: torch.Tensor, kind: str, layer: int, rows_nPD: torch.Tensor) -> torch.Tensor:
    """Final-position logits [n, vocab] of the prompt with the site at ``layer`` replaced by each row."""
    envoy, io = site_target(model, kind, layer)
    last, readout = model.block(model.n_layers - 1), model.readout
    inputs = {"input_ids": ids_1P.to(model.device), "attention_mask": torch.ones_like(ids_1P).to(model.device)}
    rows = rows_nPD.to(model.device, model.dtype)
    with torch.no_grad(), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
        write_site(envoy, io, rows)
        logits = nnsight.save(readout(read_site(last, "output")[:, -1]))
        tracer.stop()
    return logits.detach().float().cpu()


def auto_batch_size(model: Model, n_pos: int) -> int:
    """How many patched rows fit one forward pass in :data:`MEMORY_BUDGET_BYTES`."""
    cfg = model.config
    d_ff = int(getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None) or 4 * model.d_model)
    vocab = int(getattr(cfg, "vocab_size", 50_000))
    per_row = 4 * (n_pos * (8 * model.d_model + 2 * d_ff + 3 * model.n_heads * model.d_head + 2 * model.n_heads * n_pos)
                   + 3 * vocab)  # fmt: skip
    return max(1, MEMORY_BUDGET_BYTES // per_row)


def _check_site(site: str) -> str:
    if site not in SITES:
        raise ValueError(f"site={site!r} is not one of {SITES}.")
    return site


def check_batch(batch_size: int | None) -> None:
    """``batch_size`` is None (automatic) or a positive integer."""
    if batch_size is not None:
        check_int("batch_size (or None for automatic)", batch_size, minimum=1)


def score_rows(
    model: Model,
    metric: BoundMetric,
    ids_1P: torch.Tensor,
    kind: str,
    layer: int,
    rows_nPD: torch.Tensor,
    pair: int,
    batch: int,
    k: int,
    base_PD: torch.Tensor,
    base_logits_V: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Metric [n] and top-k next tokens (ids, probs [n, k]) of each patched row, ``batch`` rows per forward.

    Rows equal to the unpatched activations (e.g. positions before the first token where the prompts differ)
    give the unpatched run exactly, so they are not run again.
    """
    n = len(rows_nPD)
    if model.server is not None:  # an NDIF request carries its rows: keep each under the server's body limit
        batch = max(1, min(batch, REQUEST_BYTES // max(1, rows_nPD[0].numel() * rows_nPD.element_size())))
    changed = (rows_nPD != base_PD.unsqueeze(0)).flatten(1).any(1)
    logits_nV = base_logits_V.unsqueeze(0).expand(n, -1).clone()
    todo = changed.nonzero().flatten()
    for start in range(0, len(todo), batch):
        idx = todo[start : start + batch]
        logits_nV[idx] = run_rows(model, ids_1P, kind, layer, rows_nPD[idx])
    vals = metric(logits_nV, torch.full((n,), pair, dtype=torch.long))
    probs, ids = torch.softmax(logits_nV, -1).topk(k, dim=-1)
    return vals, ids, probs


def baselines(prep: Prepared, clean_logits: torch.Tensor, corrupt_logits: torch.Tensor) -> tuple[float, float]:
    """Mean metric of the clean and corrupted runs (and give the metric the clean logits)."""
    prep.metric.set_clean(clean_logits)
    pairs = torch.arange(prep.n_pairs)
    return float(prep.metric(clean_logits, pairs).mean()), float(prep.metric(corrupt_logits, pairs).mean())


def patched_rows(base_PD: torch.Tensor, src_PD: torch.Tensor, site: str, cols: list[int], positions: list[int],
                 d_head: int) -> torch.Tensor:  # fmt: skip
    """The base activations repeated once per column, each row with its one cell taken from the source."""
    rows = base_PD.unsqueeze(0).repeat(len(cols), 1, 1)
    pos = torch.tensor(positions)
    for r, c in enumerate(cols):
        if site == "heads":
            sl = slice(c * d_head, (c + 1) * d_head)
            rows[r, pos, sl] = src_PD[pos, sl]
        else:
            rows[r, c] = src_PD[c]
    return rows


def grid(
    model: Model,
    clean: str | Sequence[str] | PromptPairs,
    corrupt: str | Sequence[str] | None = None,
    metric: Metric | Callable[..., Any] | None = None,
    site: str = "resid_pre",
    positions: int | Sequence[int] | None = None,
    direction: str = "denoise",
    batch_size: int | None = None,
    top_k: int = 5,
    reuse_cache: bool | None = None,
) -> PatchingResult:
    """Exact activation patching over every layer and position (or head).

    ``denoise`` patches clean activations into the corrupted run (how much of the clean
    behaviour one cell restores); ``noise`` patches corrupted activations into the clean run.
    With several pairs the metric is averaged over them. ``site="heads"`` patches one head's
    ``attn.hook_z`` at ``positions`` (all by default) and gives a [layers, heads] grid.

    With ``reuse_cache`` each cell's pass runs only from the patched layer and position on, reusing the
    base run's keys and values before it (:mod:`.cached`; a transformers ``DynamicCache`` travels with the
    request); ``False`` runs every cell's prompt from its first token (the same values, several times the
    work). ``None`` (default): reuse it, except on a real NDIF server (``remote=True`` or a URL), where
    full passes are the path known to work (``remote="local"`` runs the cached path through nnsight's
    remote serialisation).

    >>> r = ilab.patching.grid(model, "When Mary and John went to the store, John gave a drink to",
    ...                        "When Mary and John went to the store, Mary gave a drink to",
    ...                        ilab.patching.logit_diff(" Mary", " John"))
    """
    _check_site(site)
    check_batch(batch_size)
    prep = prepare(model, clean, corrupt, metric, direction)
    positions_ = check_positions(positions, prep.n_pos)
    check_int("top_k", top_k, minimum=0)
    kind = site
    batch = batch_size or auto_batch_size(model, prep.n_pos)
    k = min(top_k, int(model.module.config.vocab_size) if hasattr(model.module, "config") else top_k)
    if reuse_cache is None:
        reuse_cache = model.remote in (False, "local")
    if reuse_cache and cached.supported(model):
        denoise = direction == "denoise"
        base_ids, src_ids = (prep.ids_corrupt, prep.ids_clean) if denoise else (prep.ids_clean, prep.ids_corrupt)
        clean_logits, corrupt_logits, values, top_ids, top_probs = cached.grid_cached(
            model, base_ids, src_ids, denoise, prep.metric, kind, positions_, batch, k
        )
        return layer_grid(
            model, prep, site, "exact", direction, values.numpy(), baselines(prep, clean_logits, corrupt_logits),
            positions_, top_ids=top_ids.numpy() if k else None, top_probs=top_probs.numpy() if k else None,
            top_tokens=[model.tokenizer.decode([int(t)]) for t in top_ids.flatten()] if k else [],
        )  # fmt: skip
    clean_acts, clean_logits = collect(model, prep.ids_clean, [kind])
    corrupt_acts, corrupt_logits = collect(model, prep.ids_corrupt, [kind])
    clean_base, corrupt_base = baselines(prep, clean_logits, corrupt_logits)
    base_ids, base_acts, src_acts, base_logits = (
        (prep.ids_corrupt, corrupt_acts[kind], clean_acts[kind], corrupt_logits)
        if direction == "denoise"
        else (prep.ids_clean, clean_acts[kind], corrupt_acts[kind], clean_logits)
    )
    cols = list(range(model.n_heads)) if site == "heads" else positions_
    values = torch.zeros(model.n_layers, len(cols))
    top_ids = torch.zeros(model.n_layers, len(cols), k, dtype=torch.long)
    top_probs = torch.zeros(model.n_layers, len(cols), k)
    steps = [(i, layer) for i in range(prep.n_pairs) for layer in range(model.n_layers)]
    for i, layer in tqdm(steps, desc=f"patching {site}", leave=False, disable=len(steps) < 8):
        rows = patched_rows(base_acts[i, layer], src_acts[i, layer], site, cols, positions_, model.d_head)
        vals, ids, probs = score_rows(model, prep.metric, base_ids[i : i + 1], kind, layer, rows, i, batch, k,
                                      base_acts[i, layer], base_logits[i])  # fmt: skip
        values[layer] += vals / prep.n_pairs
        if i == 0:
            top_ids[layer], top_probs[layer] = ids, probs
    return layer_grid(
        model, prep, site, "exact", direction, values.numpy(), (clean_base, corrupt_base), positions_,
        top_ids=top_ids.numpy() if k else None, top_probs=top_probs.numpy() if k else None,
        top_tokens=[model.tokenizer.decode([int(t)]) for t in top_ids.flatten()] if k else [],
    )  # fmt: skip


def layer_grid(
    model: Model,
    prep: Prepared,
    site: str,
    method: str,
    direction: str,
    values: Any,
    bases: tuple[float, float],
    positions: list[int],
    **extra: Any,
) -> PatchingResult:
    """A [layers, positions or heads] :class:`PatchingResult` with the labels every layer grid carries."""
    return PatchingResult(
        values=values, clean_baseline=bases[0], corrupt_baseline=bases[1], site=site, method=method,
        direction=direction, metric=prep.metric.name, col_name="head" if site == "heads" else "position",
        rows=list(range(model.n_layers)), positions=positions, tokens=prep.tokens,
        corrupt_tokens=prep.corrupt_tokens, **extra,
    )  # fmt: skip
