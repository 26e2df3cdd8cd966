"""What every patching run shares: checked inputs, the sites a grid patches, collecting and scoring passes.

:func:`prepare` checks prompts, tokenisation, metric and direction before any forward pass and gives a
:class:`Prepared`; :func:`collect` runs prompts once and keeps each site kind's values at every layer;
:func:`score_rows` runs the patched rows of one site and layer in batches and scores them; :func:`layer_grid`
labels a [layers, positions or heads] :class:`PatchingResult`. The exact grid (:mod:`.grid`), its cached
passes (:mod:`.cached`), attribution (:mod:`.gradients`) and SAE-latent patching (:mod:`.sae_latents`) are
built from these. Everything crossing a trace boundary is a tensor, so the passes run with
``remote="local"`` (and NDIF).

Example
-------
>>> prep = prepare(model, pairs.clean, pairs.corrupt, pairs.logit_diff())
>>> acts, logits = collect(model, prep.ids_clean, ["resid_pre"])   # acts["resid_pre"]: [N, n_layers, P, D]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nnsight
import numpy as np
import torch

from ..checks import check_int, check_texts
from ..memory.budget import check_memory
from ..model.remote import REQUEST_BYTES
from ..model.sites import KINDS, site_name
from ..model.trace_ops import read_site, token_probs, write_site
from ..readout.metrics import BoundMetric, Metric, as_metric
from .prompts import PromptPairs, check_aligned
from .result import PatchingResult

if TYPE_CHECKING:
    from ..model.model import Model

#: Site kinds a grid can patch; "heads" patches one attention head's ``attn.hook_z`` slice.
SITES = ("resid_pre", "resid_post", "attn_out", "mlp_out", "heads")
DIRECTIONS = ("denoise", "noise")
#: The grid's name for a site kind where it differs from the site table's (:data:`interplab.core.model.sites.KINDS`).
GRID_KIND = {"hook_z": "heads"}
SITE_KIND = {v: k for k, v in GRID_KIND.items()}
#: Every site kind under its grid name, in forward order (the embedding, then inside a block).
ORDER = tuple(GRID_KIND.get(k, k) for k in KINDS)
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


#: Bytes one top-k slot of a result takes: its id and probability (tensors and arrays), its entry in the flat
#: list of decoded tokens and the Python int it passes through on the way; each distinct token's text is
#: decoded once (:func:`decode_each`), at most ``TOKEN_TEXT_BYTES`` each.
TOP_SLOT_BYTES = 96
TOKEN_TEXT_BYTES = 160


def check_top_k(model: Model, top_k: int, cells: int, what: str) -> int:
    """``top_k`` as the number of top tokens kept per cell (at most the vocabulary), refused before any work
    when the slots of ``cells`` cells would exceed the memory budget.

    >>> check_top_k(model, 5, cells=18 * 15, what="patching.grid")
    5
    """
    check_int("top_k", top_k, minimum=0)
    vocab = int(getattr(model.config, "vocab_size", 0) or 0) or top_k
    k = min(top_k, vocab)
    need = cells * k * TOP_SLOT_BYTES + min(vocab, cells * k) * TOKEN_TEXT_BYTES
    check_memory(f"{what} with top_k={top_k:,} ({k:,} top tokens for each of {cells:,} cells)", need,
                 "Use a smaller top_k (5 by default; 0 keeps none).")  # fmt: skip
    return k


def decode_each(model: Model, ids: torch.Tensor) -> list[str]:
    """The text of every token id in ``ids`` (flattened), each distinct id decoded once."""
    unique, inverse = torch.unique(ids.flatten(), return_inverse=True)
    texts = [model.tokenizer.decode([i]) for i in unique.tolist()]
    return [texts[i] for i in inverse.tolist()]


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
    probs, ids = token_probs(logits_nV).topk(k, dim=-1)
    return vals, ids, probs


def baselines(prep: Prepared, clean_logits: torch.Tensor, corrupt_logits: torch.Tensor) -> tuple[float, float]:
    """Mean metric of the clean and corrupted runs (and give the metric the clean logits)."""
    prep.metric.set_clean(clean_logits)
    pairs = torch.arange(prep.n_pairs)
    return float(prep.metric(clean_logits, pairs).mean()), float(prep.metric(corrupt_logits, pairs).mean())


def sides(prep: Prepared, direction: str, acts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(base ids, base acts, source acts) from activations of [clean; corrupt] stacked on dim 0."""
    n = prep.n_pairs
    clean, corrupt = acts[:n], acts[n:]
    if direction == "denoise":
        return prep.ids_corrupt, corrupt, clean
    return prep.ids_clean, clean, corrupt


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
        corrupt_tokens=prep.corrupt_tokens, n_pairs=prep.n_pairs, **extra,
    )  # fmt: skip


def patched_rows(base_PD: torch.Tensor, src_PD: torch.Tensor, site: str, cols: list[int], positions: list[int],
                 d_head: int) -> torch.Tensor:  # fmt: skip
    """The base activations repeated once per column, each row with its one cell (a position, or a head at
    ``positions``) taken from the source; ``P`` is the positions of a prompt or the tokens of an image."""
    rows = base_PD.unsqueeze(0).repeat(len(cols), 1, 1)
    pos = torch.tensor(positions)
    for r, c in enumerate(cols):
        if site == "heads":
            sl = slice(c * d_head, (c + 1) * d_head)
            rows[r, pos, sl] = src_PD[pos, sl]
        else:
            rows[r, c] = src_PD[c]
    return rows
