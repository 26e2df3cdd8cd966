"""Exact activation patching: every layer x position (or layer x head) cell, batched.

How it is fast: the cells of one layer are patched together in one forward pass. The trace
runs the single corrupted prompt (batch 1) up to the patched layer, then the site is replaced
by a ``[n_cells, P, d]`` batch (the corrupted activations with one cell taken from the clean
run in each row); everything after broadcasts to the batch. The layers before the patch run
once instead of once per cell, and only the last position is unembedded. With a transformers
model each cell's pass instead starts at the patched layer and position (:mod:`.cached`).
Everything crossing the trace boundary is a tensor, so it also runs with ``remote="local"`` (and NDIF).

Example
-------
>>> pairs = ilab.patching.ioi(model, n=4)
>>> r = ilab.patching.grid(model, pairs.clean, pairs.corrupt, pairs.logit_diff(), site="resid_pre")
>>> r.normalized.shape        # [n_layers, n_positions]
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..model.vision import VisionModel
from ..readout.metrics import Metric
from ..storage.progress import check_progress, progress_bar
from . import cached, images
from .prepare import (
    SITES,
    Prepared,
    auto_batch_size,
    baselines,
    check_batch,
    check_positions,
    check_top_k,
    collect,
    decode_each,
    layer_grid,
    patched_rows,
    prepare,
    score_rows,
)
from .prompts import PromptPairs
from .result import PatchingResult

if TYPE_CHECKING:
    from ..model.model import Model

#: What a run over every cell gives: the clean and corrupted baselines, values [n_layers, n_cols] and
#: pair 0's top next tokens (ids, probs [n_layers, n_cols, k]).
Cells = tuple[tuple[float, float], torch.Tensor, torch.Tensor, torch.Tensor]


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
    progress: Any = True,
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
    remote serialisation). ``progress``: a bar over the layers (cached path) or the pairs x layers (full passes);
    False for none.

    A vision model (:class:`~interplab.core.model.vision.VisionModel`) takes a clean and a corrupted image batch
    and a metric of the image embedding instead (:mod:`.images`; ``top_k`` and ``reuse_cache`` do not apply).

    >>> r = ilab.patching.grid(model, "When Mary and John went to the store, John gave a drink to",
    ...                        "When Mary and John went to the store, Mary gave a drink to",
    ...                        ilab.patching.logit_diff(" Mary", " John"))
    """
    check_progress(progress)
    if isinstance(model, VisionModel):
        return images.image_grid(model, clean, corrupt, metric, site, positions, direction, batch_size, progress)
    if isinstance(clean, torch.Tensor) or isinstance(corrupt, torch.Tensor):
        raise TypeError(f"{model.name} is a text model: patching.grid takes images only for a vision model (a CLIP "
                        "or ViT loaded with ilab.load_model); give it prompts.")  # fmt: skip
    check_site(site)
    check_batch(batch_size)
    prep = prepare(model, clean, corrupt, metric, direction)
    positions_ = check_positions(positions, prep.n_pos)
    cells = model.n_layers * (model.n_heads if site == "heads" else len(positions_))
    k = check_top_k(model, top_k, cells, "patching.grid")
    batch = batch_size or auto_batch_size(model, prep.n_pos)
    if reuse_cache is None:
        reuse_cache = model.remote in (False, "local")
    why = cached.why_not_cached(model) if reuse_cache else None
    if why:
        warnings.warn(f"{model.name}: the grid runs full passes (the values are the same), not the cached path: "
                      f"{why}. reuse_cache=False asks for full passes without this warning.", stacklevel=2)  # fmt: skip
    reuse = reuse_cache and cached.supported(model)
    steps = model.n_layers * (1 if reuse else prep.n_pairs)
    with progress_bar(steps, desc=f"patching {site}", show=progress, leave=False) as bar:
        run_cells = cached_cells if reuse else full_cells
        bases, values, top_ids, top_probs = run_cells(model, prep, site, direction, positions_, batch, k, bar)
    return layer_grid(
        model, prep, site, "exact", direction, values.numpy(), bases, positions_,
        top_ids=top_ids.numpy() if k else None, top_probs=top_probs.numpy() if k else None,
        top_tokens=decode_each(model, top_ids) if k else [],
    )  # fmt: skip


def check_site(site: str) -> str:
    """``site`` is one of :data:`SITES`."""
    if site not in SITES:
        raise ValueError(f"site={site!r} is not one of {SITES}.")
    return site


def cached_cells(
    model: Model, prep: Prepared, site: str, direction: str, positions: list[int], batch: int, k: int, bar: Any
) -> Cells:
    """Every cell of the grid from passes that start at the patched layer and position (:mod:`.cached`); ``bar``
    advances once per layer."""
    denoise = direction == "denoise"
    base_ids, src_ids = (prep.ids_corrupt, prep.ids_clean) if denoise else (prep.ids_clean, prep.ids_corrupt)
    clean_logits, corrupt_logits, values, top_ids, top_probs = cached.grid_cached(
        model, base_ids, src_ids, denoise, prep.metric, site, positions, batch, k, bar
    )
    return baselines(prep, clean_logits, corrupt_logits), values, top_ids, top_probs


def full_cells(
    model: Model, prep: Prepared, site: str, direction: str, positions: list[int], batch: int, k: int, bar: Any
) -> Cells:
    """Every cell of the grid from passes that run each prompt from its first token, a layer's cells batched;
    ``bar`` advances once per pair and layer."""
    clean_acts, clean_logits = collect(model, prep.ids_clean, [site])
    corrupt_acts, corrupt_logits = collect(model, prep.ids_corrupt, [site])
    bases = baselines(prep, clean_logits, corrupt_logits)
    base_ids, base_acts, src_acts, base_logits = (
        (prep.ids_corrupt, corrupt_acts[site], clean_acts[site], corrupt_logits)
        if direction == "denoise"
        else (prep.ids_clean, clean_acts[site], corrupt_acts[site], clean_logits)
    )
    cols = list(range(model.n_heads)) if site == "heads" else positions
    values = torch.zeros(model.n_layers, len(cols))
    top_ids = torch.zeros(model.n_layers, len(cols), k, dtype=torch.long)
    top_probs = torch.zeros(model.n_layers, len(cols), k)
    steps = [(i, layer) for i in range(prep.n_pairs) for layer in range(model.n_layers)]
    for i, layer in steps:
        rows = patched_rows(base_acts[i, layer], src_acts[i, layer], site, cols, positions, model.d_head)
        vals, ids, probs = score_rows(model, prep.metric, base_ids[i : i + 1], site, layer, rows, i, batch, k,
                                      base_acts[i, layer], base_logits[i])  # fmt: skip
        values[layer] += vals / prep.n_pairs
        if i == 0:
            top_ids[layer], top_probs[layer] = ids, probs
        bar.update(1)
    return bases, values, top_ids, top_probs
