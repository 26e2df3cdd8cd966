"""Which SAE latents carry a patching effect: attribution over every latent, then exact patches of the top ones.

The SAE is spliced in with its error term, so the unpatched run is unchanged:
``x' = decode(f') + (x - decode(f)) = x + (f' - f) W_dec``. Patching latent ``i`` at position
``p`` adds ``(f'_i - f_i) W_dec[i]`` there; attribution estimates every latent at once from the
site's gradient (see :mod:`.gradients`).

Example
-------
>>> sae = ilab.load_sae("embedded", layer=12)
>>> lat = ilab.patching.latents(model, sae, pairs, top=8)     # {"attribution": ..., "exact": ...}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..checks import check_positive_int
from ..features.labels import load_labels
from ..readout.metrics import Metric
from . import prepare as shared
from .gradients import check_steps, grads_for
from .prompts import PromptPairs
from .result import PatchingResult

if TYPE_CHECKING:
    from ..model.model import Model
    from ..saes.base import SAE


def latents(
    model: Model,
    sae: SAE,
    clean: str | Sequence[str] | PromptPairs,
    corrupt: str | Sequence[str] | None = None,
    metric: Metric | Callable[..., Any] | None = None,
    positions: int | Sequence[int] | None = None,
    top: int = 16,
    exact: bool = True,
    direction: str = "denoise",
    batch_size: int | None = None,
    top_k: int = 5,
    steps: int = 1,
    path: str = "embeddings",
) -> dict[str, PatchingResult]:
    """Which SAE latents at which positions carry the effect.

    Attribution over every latent picks the ``top`` latents (largest |estimate| at any of
    ``positions``); with ``exact=True`` those latent x position cells are also patched exactly
    (the SAE spliced in with its error term). Returns ``{"attribution": ..., "exact": ...}``,
    each a [top latents, positions] :class:`PatchingResult` with ``site="latents"``. ``steps > 1``
    uses integrated gradients for the attribution, along ``path`` (see :func:`attribution`).

    >>> sae = ilab.load_sae("embedded", layer=12)
    >>> lat = ilab.patching.latents(model, sae, pairs, top=8)
    """
    check_positive_int("top", top)
    shared.check_batch(batch_size)
    check_steps(steps, path)
    site_name = sae.check_fits(model)
    parsed = model.parse_site(site_name)
    kind, layer = shared.GRID_KIND.get(parsed.kind, parsed.kind), parsed.layer
    prep = shared.prepare(model, clean, corrupt, metric, direction)
    positions_ = shared.check_positions(positions, prep.n_pos)
    k = shared.check_top_k(model, top_k, min(top, sae.d_sae) * len(positions_), "patching.latents") if exact else 0
    acts, logits = shared.collect(model, torch.cat([prep.ids_clean, prep.ids_corrupt]), [kind], layers=[layer])
    n = prep.n_pairs
    clean_base, corrupt_base = shared.baselines(prep, logits[:n], logits[n:])
    base_ids, base_x, src_x = shared.sides(prep, direction, acts[kind][:, 0])
    base_logits = logits[n:] if direction == "denoise" else logits[:n]
    base_value = corrupt_base if direction == "denoise" else clean_base
    grad_x = grads_for(model, prep, direction, base_logits, [kind], [layer], steps, path,
                        lambda k, _: acts[k][:, 0])[(kind, layer)]  # fmt: skip
    W_dec = sae.W_dec.detach().float().cpu()  # [d_sae, d_in]
    delta = latent_deltas(sae, base_x, src_x)
    attr = (delta * (grad_x @ W_dec.T)).sum(0)[positions_]  # [n_pos, S]
    n_top = min(top, attr.shape[1])
    chosen = attr.abs().max(0).values.topk(n_top).indices.tolist()
    saved = load_labels(sae)  # latent labels show wherever latent ids do
    common: dict[str, Any] = dict(
        clean_baseline=clean_base, corrupt_baseline=corrupt_base, site="latents", direction=direction,
        metric=prep.metric.name, row_name="latent", col_name="position", rows=chosen, positions=positions_,
        tokens=prep.tokens, corrupt_tokens=prep.corrupt_tokens, layer=layer,
        row_text=[saved.get(i, "") for i in chosen], n_pairs=prep.n_pairs,
    )  # fmt: skip
    out = {"attribution": PatchingResult(values=(base_value + attr[:, chosen].T).numpy(), method="attribution",
                                         **common)}  # fmt: skip
    if not exact:
        return out
    batch = batch_size or shared.auto_batch_size(model, prep.n_pos)
    cells = [(lat, p) for lat in chosen for p in positions_]
    values, top_ids, top_probs = patch_latents(model, prep, (kind, layer), (base_ids, base_x, base_logits),
                                               delta, W_dec, cells, batch, k)  # fmt: skip
    shape = (len(chosen), len(positions_))
    out["exact"] = PatchingResult(
        values=values.reshape(shape).numpy(), method="exact", **common,
        top_ids=top_ids.reshape(*shape, k).numpy(), top_probs=top_probs.reshape(*shape, k).numpy(),
        top_tokens=shared.decode_each(model, top_ids),
    )  # fmt: skip
    return out


def latent_deltas(sae: SAE, base_x: torch.Tensor, src_x: torch.Tensor) -> torch.Tensor:
    """The change of every latent from the base run to the source run, [N, P, d_sae]."""
    with torch.no_grad():
        f_base = sae.encode(base_x.to(torch.float32)).float()  # [N, P, S]
        f_src = sae.encode(src_x.to(torch.float32)).float()
    return (f_src - f_base).cpu()  # encoded on the SAE's device; patching combines them on the CPU


def patch_latents(
    model: Model,
    prep: shared.Prepared,
    site: tuple[str, int],
    base: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    delta: torch.Tensor,
    W_dec: torch.Tensor,
    cells: list[tuple[int, int]],
    batch: int,
    k: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact patches of (latent, position) cells: the metric's mean over pairs [n_cells] and pair 0's top next
    tokens (ids, probs [n_cells, k]). ``site`` is (grid kind, layer); ``base`` the base run's ids, site values
    and final logits; each cell adds ``delta[pair, position, latent] * W_dec[latent]`` at its position."""
    kind, layer = site
    base_ids, base_x, base_logits = base
    n = prep.n_pairs
    values = torch.zeros(len(cells))
    top_ids, top_probs = torch.zeros(len(cells), k, dtype=torch.long), torch.zeros(len(cells), k)
    for i in range(n):
        rows = base_x[i].unsqueeze(0).repeat(len(cells), 1, 1)
        for r, (lat, p) in enumerate(cells):
            rows[r, p] += delta[i, p, lat] * W_dec[lat]
        vals, ids, probs = shared.score_rows(model, prep.metric, base_ids[i : i + 1], kind, layer, rows, i, batch, k,
                                      base_x[i], base_logits[i])  # fmt: skip
        values += vals / n
        if i == 0:
            top_ids, top_probs = ids, probs
    return values, top_ids, top_probs
