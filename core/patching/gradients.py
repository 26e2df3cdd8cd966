"""Attribution patching: first-order estimates of every patching grid.

For a site with corrupted activation ``a`` and clean activation ``a'``, patching changes the
metric by about ``(a' - a) . dM/da`` (denoising). One forward of the clean and corrupted
prompts together, then one corrupted forward with a backward, give that product for every
layer, position and head of every site kind at once. The gradient is taken with
``torch.autograd.grad`` inside the trace, so only tensors cross the trace boundary (remote-safe).

With ``steps=n > 1`` the gradient is instead averaged over ``n`` runs on the straight path from
the base run to the source run, made by interpolating the input embeddings (the first block's
input: ``base + k/n (source - base)``, ``k = 0 .. n-1``), as in EAP-IG (Hanna et al. 2024). This
is integrated gradients: at the embeddings the attributions of all positions sum to the total
effect as ``n`` grows. ``steps=1`` is plain attribution patching (``k = 0``: the base run).

Example
-------
>>> approx = ilab.patching.attribution(model, pairs)             # dict: site -> PatchingResult
>>> ig = ilab.patching.attribution(model, pairs, steps=8)        # integrated gradients
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import nnsight
import torch

from ..checks import check_int
from ..model.trace_ops import read_site, write_site
from ..readout.metrics import Metric
from ..storage.progress import check_progress, progress_bar
from .prepare import (
    ORDER,
    SITES,
    Prepared,
    auto_batch_size,
    baselines,
    check_positions,
    collect,
    layer_grid,
    prepare,
    sides,
    site_target,
)
from .prompts import PromptPairs
from .result import PatchingResult

if TYPE_CHECKING:
    from ..model.model import Model


def _metric_grad(prep: Prepared, base_logits: torch.Tensor) -> torch.Tensor:
    """d(mean metric)/d(final logits) of the base run, [n_pairs, vocab] (computed here, not in the trace)."""
    logits = base_logits.detach().clone().requires_grad_(True)
    value = prep.metric(logits, torch.arange(prep.n_pairs)).mean()
    (grad,) = torch.autograd.grad(value, logits, allow_unused=True)
    return torch.zeros_like(logits) if grad is None else grad


def _gradients(
    model: Model,
    ids: torch.Tensor,
    kinds: Sequence[str],
    layers: Sequence[int],
    grad_logits: torch.Tensor,
    embeds_NPD: torch.Tensor | None = None,
) -> dict[tuple[str, int], torch.Tensor]:
    """One forward + backward of ``ids``: d metric / d activation at each (kind, layer), [N, P, D].

    With ``embeds_NPD`` the first block's input is replaced by it (the points of an integrated-gradients path).
    """
    order = sorted(kinds, key=ORDER.index)
    targets = [(k, layer, *site_target(model, k, layer)) for layer in sorted(layers) for k in order]
    first, last, readout = model.block(0), model.block(model.n_layers - 1), model.readout
    inputs = {"input_ids": ids.to(model.device), "attention_mask": torch.ones_like(ids).to(model.device)}
    g = grad_logits.to(model.device)
    with torch.enable_grad(), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
        # A leaf that needs grad at the first block: gradients flow even when the weights are frozen.
        first.input = (first.input if embeds_NPD is None else embeds_NPD).detach().requires_grad_(True)
        acts = [read_site(envoy, io) for _, _, envoy, io in targets]
        logits = readout(read_site(last, "output")[:, -1]).float()
        grads = torch.autograd.grad(logits, acts, grad_outputs=g.to(logits.dtype), allow_unused=True,
                                    materialize_grads=True)  # fmt: skip
        grads = nnsight.save([x.detach() for x in grads])
        tracer.stop()
    return {(k, layer): gr.float().cpu() for (k, layer, _, _), gr in zip(targets, grads, strict=True)}


def _embed_logits(model: Model, ids: torch.Tensor, embeds_NPD: torch.Tensor) -> torch.Tensor:
    """Final-position logits [N, vocab] with the first block's input replaced by ``embeds_NPD`` (no grad)."""
    first, last, readout = model.block(0), model.block(model.n_layers - 1), model.readout
    inputs = {"input_ids": ids.to(model.device), "attention_mask": torch.ones_like(ids).to(model.device)}
    with torch.no_grad(), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
        first.input = embeds_NPD
        logits = nnsight.save(readout(read_site(last, "output")[:, -1]))
        tracer.stop()
    return logits.detach().float().cpu()


PATHS = ("embeddings", "site")
#: The most integrated-gradient steps (each a forward and backward pass); 8-32 is usual.
MAX_STEPS = 1024


def check_steps(steps: int, path: str) -> None:
    """``steps`` a positive integer (1: plain attribution patching) and ``path`` one of :data:`PATHS`."""
    check_int("steps", steps, 1, MAX_STEPS)
    if path not in PATHS:
        raise ValueError(f"path={path!r} is not one of {PATHS}.")


def _path_gradients(
    model: Model,
    prep: Prepared,
    base_ids: torch.Tensor,
    base_emb: torch.Tensor,
    src_emb: torch.Tensor,
    kinds: Sequence[str],
    layers: Sequence[int],
    steps: int,
    bar: Any = None,
) -> dict[tuple[str, int], torch.Tensor]:
    """Integrated gradients: d mean metric / d activation averaged over ``steps`` points ``k/steps`` (k < steps)
    of the straight path from the base embeddings to the source ones, [N, P, D] per (kind, layer).

    Each point needs the metric's gradient at its own logits (any metric), so a no-grad forward of the
    points comes first; points run ``chunk`` at a time as one batch.
    """
    n = prep.n_pairs
    dtype = model.dtype
    # A backward keeps every layer's activations: budget rows as about n_layers / 2 forward rows each.
    rows = auto_batch_size(model, prep.n_pos) // max(1, model.n_layers // 2)
    chunk = max(1, min(steps, rows // n))
    total: dict[tuple[str, int], torch.Tensor] = {}
    alphas = torch.arange(steps, dtype=torch.float32) / steps
    for start in range(0, steps, chunk):
        a = alphas[start : start + chunk]
        emb = (base_emb.unsqueeze(0) + a[:, None, None, None] * (src_emb - base_emb).unsqueeze(0)).flatten(0, 1)
        emb = emb.to(model.device, dtype)  # [len(a) * N, P, D], point-major
        ids = base_ids.repeat(len(a), 1)
        logits = _embed_logits(model, ids, emb).detach().requires_grad_(True)
        value = prep.metric(logits, torch.arange(n).repeat(len(a))).sum() / (n * steps)
        (g,) = torch.autograd.grad(value, logits, allow_unused=True)
        g = torch.zeros_like(logits) if g is None else g
        for key, gr in _gradients(model, ids, kinds, layers, g, embeds_NPD=emb).items():
            part = gr.reshape(len(a), n, *gr.shape[1:]).sum(0)
            total[key] = part if key not in total else total[key] + part
        if bar is not None:
            bar.update(len(a))
    return total


def _site_run(
    model: Model, ids: torch.Tensor, kind: str, layer: int, x_NPD: torch.Tensor, grad_logits: torch.Tensor | None
) -> torch.Tensor:
    """With the site replaced by ``x_NPD``: final logits (no grad), or d metric / d site given d metric / d logits."""
    envoy, io = site_target(model, kind, layer)
    last, readout = model.block(model.n_layers - 1), model.readout
    inputs = {"input_ids": ids.to(model.device), "attention_mask": torch.ones_like(ids).to(model.device)}
    grad_logits = None if grad_logits is None else grad_logits.to(model.device)  # the body holds no Model
    with torch.set_grad_enabled(grad_logits is not None), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
        leaf = x_NPD.detach().requires_grad_(grad_logits is not None)
        write_site(envoy, io, leaf)
        logits = readout(read_site(last, "output")[:, -1]).float()
        if grad_logits is None:
            out = nnsight.save(logits.detach())
        else:
            (grad,) = torch.autograd.grad(logits, [leaf], grad_outputs=grad_logits.to(logits.dtype))
            out = nnsight.save(grad.detach())
        tracer.stop()
    return out.float().cpu()


def _site_path_gradients(
    model: Model,
    prep: Prepared,
    base_ids: torch.Tensor,
    site_acts: Callable[[str, int], tuple[torch.Tensor, ...]],
    kinds: Sequence[str],
    layers: Sequence[int],
    steps: int,
    bar: Any = None,
) -> dict[tuple[str, int], torch.Tensor]:
    """Integrated gradients per site: for each (kind, layer) alone, the site's own value interpolated from base to
    source (everything upstream left at the base run), the gradient there averaged over ``steps`` points."""
    n = prep.n_pairs
    dtype = model.dtype
    rows = auto_batch_size(model, prep.n_pos) // max(1, model.n_layers // 2)
    chunk = max(1, min(steps, rows // n))
    alphas = torch.arange(steps, dtype=torch.float32) / steps
    out = {}
    todo = [(k, layer) for layer in layers for k in kinds]
    for kind, layer in todo:
        base, src = site_acts(kind, layer)
        total = torch.zeros_like(base)
        for start in range(0, steps, chunk):
            a = alphas[start : start + chunk]
            x = (base.unsqueeze(0) + a[:, None, None, None] * (src - base).unsqueeze(0)).flatten(0, 1)
            x = x.to(model.device, dtype)
            ids = base_ids.repeat(len(a), 1)
            logits = _site_run(model, ids, kind, layer, x, None).requires_grad_(True)
            value = prep.metric(logits, torch.arange(n).repeat(len(a))).sum() / (n * steps)
            (g,) = torch.autograd.grad(value, logits, allow_unused=True)
            g = torch.zeros_like(logits) if g is None else g
            total += _site_run(model, ids, kind, layer, x, g).reshape(len(a), *base.shape).sum(0)
            if bar is not None:
                bar.update(len(a))
        out[(kind, layer)] = total
    return out


def grads_for(
    model: Model,
    prep: Prepared,
    direction: str,
    base_logits: torch.Tensor,
    kinds: Sequence[str],
    layers: Sequence[int],
    steps: int,
    path: str,
    acts: Callable[[str, int], torch.Tensor],
    resid0: torch.Tensor | None = None,
    bar: Any = None,
) -> dict[tuple[str, int], torch.Tensor]:
    """Plain gradients at the base run (``steps=1``) or integrated ones along the embedding or per-site path.

    ``acts(kind, layer)`` gives a site's [clean; corrupt] values; ``resid0`` the first block's input of
    [clean; corrupt] when already collected. ``bar`` (a progress bar) advances by one per point of a path that
    is run (:func:`gradient_passes` in all).
    """
    base_ids = prep.ids_corrupt if direction == "denoise" else prep.ids_clean
    if steps == 1:
        grads = _gradients(model, base_ids, kinds, layers, _metric_grad(prep, base_logits))
        if bar is not None:
            bar.update(1)
        return grads
    if path == "site":

        def site_sides(kind: str, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
            return sides(prep, direction, acts(kind, layer))[1:]

        return _site_path_gradients(model, prep, base_ids, site_sides, kinds, layers, steps, bar)
    if resid0 is None:
        first = collect(model, torch.cat([prep.ids_clean, prep.ids_corrupt]), ["resid_pre"], layers=[0])[0]
        resid0 = first["resid_pre"][:, 0]
    _, base_emb, src_emb = sides(prep, direction, resid0)
    return _path_gradients(model, prep, base_ids, base_emb, src_emb, kinds, layers, steps, bar)


def gradient_passes(n_sites: int, steps: int, path: str) -> int:
    """How many points :func:`grads_for` runs: one plain gradient, ``steps`` on the embedding path, ``steps`` per
    site (kind and layer) on the site path."""
    return 1 if steps == 1 else steps * n_sites if path == "site" else steps


def attribution(
    model: Model,
    clean: str | Sequence[str] | PromptPairs,
    corrupt: str | Sequence[str] | None = None,
    metric: Metric | Callable[..., Any] | None = None,
    sites: str | Sequence[str] = SITES,
    positions: int | Sequence[int] | None = None,
    direction: str = "denoise",
    steps: int = 1,
    path: str = "embeddings",
    progress: Any = True,
) -> PatchingResult | dict[str, PatchingResult]:
    """Attribution-patching grids: the first-order estimate of :func:`grid` for every site at once.

    Returns one :class:`PatchingResult` (``method="attribution"``) for a single site name, or a
    dict site -> result for several. Values are ``baseline + gradient x activation difference``,
    so they compare directly with exact grids. ``steps > 1`` averages the gradient over that many
    points between the base and source runs (integrated gradients on the input embeddings, as in
    EAP-IG): ``steps`` forward + backward passes instead of one, and much closer to exact patching
    where a whole token changes. ``path="site"`` interpolates each site's own value instead (one
    layer and site kind at a time, the rest left at the base run): closer still, ``n_layers x
    n_sites`` times the cost. ``progress``: a bar over the gradient points run (False for none).

    >>> approx = ilab.patching.attribution(model, pairs, sites=["resid_pre", "heads"])
    >>> ig = ilab.patching.attribution(model, pairs, sites="resid_pre", steps=8)
    """
    single = isinstance(sites, str)
    names = [sites] if isinstance(sites, str) else list(sites)
    bad = [s for s in names if s not in SITES]
    if bad or not names:
        raise ValueError(f"sites {bad or names} must be among {SITES}.")
    check_steps(steps, path)
    check_progress(progress)
    prep = prepare(model, clean, corrupt, metric, direction)
    positions_ = check_positions(positions, prep.n_pos)
    both = torch.cat([prep.ids_clean, prep.ids_corrupt])
    acts, logits = collect(model, both, names)
    n = prep.n_pairs
    clean_base, corrupt_base = baselines(prep, logits[:n], logits[n:])
    base_logits = logits[n:] if direction == "denoise" else logits[:n]
    base_value = corrupt_base if direction == "denoise" else clean_base
    resid0 = acts["resid_pre"][:, 0] if "resid_pre" in acts else None
    passes = gradient_passes(len(names) * model.n_layers, steps, path)
    with progress_bar(passes, desc="attribution", show=progress, leave=False) as bar:
        grads = grads_for(model, prep, direction, base_logits, names, range(model.n_layers), steps, path,
                          lambda kind, layer: acts[kind][:, layer], resid0, bar)  # fmt: skip
    pos = torch.tensor(positions_)
    out: dict[str, PatchingResult] = {}
    for site in names:
        _, base_acts, src_acts = sides(prep, direction, acts[site])
        rows = []
        for layer in range(model.n_layers):
            prod = (src_acts[:, layer] - base_acts[:, layer]) * grads[(site, layer)]  # [N, P, D]
            if site == "heads":
                prod = prod[:, pos].reshape(n, len(positions_), model.n_heads, -1)
                rows.append(prod.sum(dim=(0, 1, 3)))
            else:
                rows.append(prod.sum(dim=(0, 2))[pos])
        values = (base_value + torch.stack(rows)).numpy()
        out[site] = layer_grid(model, prep, site, "attribution", direction, values, (clean_base, corrupt_base),
                               positions_)  # fmt: skip
    return out[names[0]] if single else out
