"""Activation patching over image patches: a layers x image-tokens grid for a CLIP or ViT image tower.

:func:`interplab.core.patching.grid.grid` sends a :class:`~interplab.core.model.vision.VisionModel` here. A clean
and a corrupted image batch (one corrupted image per clean one, same shape) take the place of prompt pairs; a
column is one image token (``CLS``, then the patches row by row) or one head. Each cell's pass runs the base image
(the corrupted one when denoising) with the site at one layer replaced by the base activations with that cell taken
from the source image; a layer's cells are one batch written into a batch-1 trace, the rest broadcasts.

The metric scores the image embedding ([n, E], CLIP's projected class token or ViT's final-normed one):
:func:`embedding_cosine` (the default) is ``cos(e, clean) - cos(e, corrupted)`` of the pair's own embeddings, so the
normalised grid reads 1 at the clean run and 0 at the corrupted one; :func:`zero_shot` is CLIP's zero-shot logit
difference of two classes given text embeddings. Trace bodies hold only envoys, tensors and
:mod:`interplab.core.model.trace_ops` functions, so they also run with ``remote="local"`` (and NDIF).

Example
-------
>>> r = ilab.patching.grid(model, clean_images, corrupt_images, site="resid_pre")   # model: a VisionModel
>>> r.normalized.shape          # [n_layers, 1 + patches]
>>> ilab.widgets.PatchHeatmap(ilab.vision.patching_row(r, clean_images[0], layer=1))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import nnsight
import torch

from ..checks import check_int
from ..model.trace_ops import read_site, write_site
from ..model.vision import VisionModel
from ..storage.progress import progress_bar
from .prepare import DIRECTIONS, SITES, check_positions, patched_rows, site_target
from .result import PatchingResult

#: Patched rows per forward pass when ``batch_size`` is not given.
DEFAULT_BATCH = 64


@dataclass(frozen=True)
class EmbeddingMetric:
    """A score per patched image embedding: ``fn(emb_NE, clean_E, corrupt_E) -> [N]``, the pair's clean and
    corrupted embeddings given.

    >>> EmbeddingMetric("norm", lambda e, c, x: e.norm(dim=-1))
    """

    name: str
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    #: The embedding width the metric reads (checked against the model's before any pass), None for any.
    dim: int | None = None

    def __call__(self, emb_NE: torch.Tensor, clean_E: torch.Tensor, corrupt_E: torch.Tensor) -> torch.Tensor:
        out = torch.as_tensor(self.fn(emb_NE, clean_E, corrupt_E)).float()
        if out.shape != (emb_NE.shape[0],):
            raise ValueError(f"The metric {self.name!r} gives one number per image embedding ([{emb_NE.shape[0]}]); "
                             f"got shape {list(out.shape)}.")  # fmt: skip
        return out


def embedding_cosine() -> EmbeddingMetric:
    """``cos(e, clean) - cos(e, corrupted)``: ``1 - cos(clean, corrupted)`` at the clean run, its negative at the
    corrupted one (the grid's ``normalized`` puts them at 1 and 0).

    >>> ilab.patching.grid(model, clean, corrupt, ilab.patching.embedding_cosine())
    """

    def fn(emb_NE: torch.Tensor, clean_E: torch.Tensor, corrupt_E: torch.Tensor) -> torch.Tensor:
        cos = torch.nn.functional.cosine_similarity
        return cos(emb_NE, clean_E[None], dim=-1) - cos(emb_NE, corrupt_E[None], dim=-1)

    return EmbeddingMetric("embedding cosine (clean - corrupted)", fn)


def zero_shot(text_embeddings: Any, clean_class: int, corrupt_class: int | None = None,
              scale: float = 100.0) -> EmbeddingMetric:  # fmt: skip
    """CLIP's zero-shot logit difference: ``scale * (cos(e, t[clean_class]) - cos(e, t[corrupt_class]))`` over the
    rows of ``text_embeddings`` ``[K, E]`` (``model.text_embeddings(captions)``); the clean class's logit alone when
    ``corrupt_class`` is None.

    >>> ilab.patching.zero_shot(model.text_embeddings(["a red circle", "a blue circle"]), 0, 1)
    """
    text_KE = torch.as_tensor(text_embeddings).detach().float().cpu()
    if text_KE.dim() != 2 or text_KE.shape[0] == 0 or not torch.isfinite(text_KE).all():
        raise ValueError(f"text_embeddings is a finite [classes, embedding] matrix; got shape {list(text_KE.shape)}.")
    k = text_KE.shape[0]
    clean_class = check_int("clean_class", clean_class, 0, k - 1)
    if corrupt_class is not None:
        corrupt_class = check_int("corrupt_class", corrupt_class, 0, k - 1)
    unit_KE = torch.nn.functional.normalize(text_KE, dim=-1)

    def fn(emb_NE: torch.Tensor, clean_E: torch.Tensor, corrupt_E: torch.Tensor) -> torch.Tensor:
        logits_NK = scale * torch.nn.functional.normalize(emb_NE, dim=-1) @ unit_KE.T
        other = logits_NK[:, corrupt_class] if corrupt_class is not None else 0.0
        return logits_NK[:, clean_class] - other

    name = f"zero-shot logit {clean_class}" + (f" - {corrupt_class}" if corrupt_class is not None else "")
    return EmbeddingMetric(name, fn, dim=int(text_KE.shape[1]))


def embedding_dim(model: VisionModel) -> int:
    """The width of ``model``'s image embeddings: CLIP's projection, or the tower's hidden size."""
    return int(model.hf.visual_projection.out_features) if model.parts.projection else int(model.d_model)


def as_embedding_metric(metric: Any) -> EmbeddingMetric:
    """An :class:`EmbeddingMetric` from None (:func:`embedding_cosine`), one, or a callable ``f(emb_NE) -> [N]``."""
    if metric is None:
        return embedding_cosine()
    if isinstance(metric, EmbeddingMetric):
        return metric
    if callable(metric) and not hasattr(metric, "bind"):
        return EmbeddingMetric(getattr(metric, "__name__", "metric"), lambda e, c, x: metric(e))
    raise TypeError(f"A vision model's grid scores image embeddings: metric is None (embedding_cosine), "
                    f"ilab.patching.embedding_cosine(), ilab.patching.zero_shot(...) or a function of the "
                    f"embeddings [n, E] -> [n]; got {type(metric).__name__}.")  # fmt: skip


def check_images(model: VisionModel, clean: Any, corrupt: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Both batches as pixel tensors of one shape (one corrupted image per clean one), checked before any pass."""
    if corrupt is None:
        raise TypeError(f"{model.name} patches between two image batches: give clean and corrupted images.")
    shapes = [list(x.shape) if isinstance(x, torch.Tensor) else None for x in (clean, corrupt)]
    if None not in shapes and shapes[0] != shapes[1]:
        each = [model.channels, model.image_size, model.image_size]
        raise ValueError(f"clean images {shapes[0]} and corrupted images {shapes[1]} differ in shape; give one "
                         f"corrupted image per clean one, each {each}.")  # fmt: skip
    pixels_clean, pixels_corrupt = model.check_inputs(clean), model.check_inputs(corrupt)
    if pixels_clean.shape != pixels_corrupt.shape:
        raise ValueError(f"Got {len(pixels_clean)} clean images and {len(pixels_corrupt)} corrupted ones; give one "
                         "corrupted image per clean one.")  # fmt: skip
    return pixels_clean, pixels_corrupt


def image_grid(
    model: VisionModel,
    clean: Any,
    corrupt: Any,
    metric: Any = None,
    site: str = "resid_pre",
    positions: int | Sequence[int] | None = None,
    direction: str = "denoise",
    batch_size: int | None = None,
    progress: Any = True,
) -> PatchingResult:
    """Exact patching of every layer x image token (or head) of a vision tower (see the module doc).

    >>> r = image_grid(model, clean_images, corrupt_images, site="attn_out")
    >>> r.values.shape            # [n_layers, 1 + patches]
    """
    if site not in SITES:
        raise ValueError(f"site={site!r} is not a site a vision tower's grid patches; choose one of {SITES}.")
    if direction not in DIRECTIONS:
        raise ValueError(f"direction={direction!r} is not one of {DIRECTIONS}.")
    bound = as_embedding_metric(metric)
    if bound.dim is not None and bound.dim != embedding_dim(model):
        raise ValueError(f"The metric {bound.name!r} reads {bound.dim}-dimensional embeddings; {model.name}'s image "
                         f"embeddings have {embedding_dim(model)}: give text embeddings of the same CLIP.")  # fmt: skip
    batch = DEFAULT_BATCH if batch_size is None else check_int("batch_size (or None)", batch_size, minimum=1)
    pixels_clean, pixels_corrupt = check_images(model, clean, corrupt)
    names = model.to_str_tokens(None)
    positions_ = check_positions(positions, len(names))
    clean_acts, clean_emb = collect_images(model, pixels_clean, site, batch)
    corrupt_acts, corrupt_emb = collect_images(model, pixels_corrupt, site, batch)
    n = len(pixels_clean)
    bases = [float(torch.stack([bound(e[i : i + 1], clean_emb[i], corrupt_emb[i])[0] for i in range(n)]).mean())
             for e in (clean_emb, corrupt_emb)]  # fmt: skip
    denoise = direction == "denoise"
    base_pixels, base_acts, src_acts = (pixels_corrupt, corrupt_acts, clean_acts) if denoise else (
        pixels_clean, clean_acts, corrupt_acts)  # fmt: skip
    base_emb = corrupt_emb if denoise else clean_emb
    cols = list(range(model.n_heads)) if site == "heads" else positions_
    values = torch.zeros(model.n_layers, len(cols))
    with progress_bar(n * model.n_layers, desc=f"patching images {site}", show=progress, leave=False) as bar:
        for i in range(n):
            for layer in range(model.n_layers):
                rows = patched_rows(base_acts[i, layer], src_acts[i, layer], site, cols, positions_, model.d_head)
                emb = patched_embeddings(model, base_pixels[i : i + 1], site, layer, rows, base_acts[i, layer],
                                         base_emb[i], batch)  # fmt: skip
                values[layer] += bound(emb, clean_emb[i], corrupt_emb[i]) / n
                bar.update(1)
    return PatchingResult(
        values=values.numpy(), clean_baseline=bases[0], corrupt_baseline=bases[1], site=site, method="exact",
        direction=direction, metric=bound.name, col_name="head" if site == "heads" else "position",
        rows=list(range(model.n_layers)), positions=positions_, tokens=names, corrupt_tokens=names, n_pairs=n,
    )  # fmt: skip


def collect_images(model: VisionModel, pixels: torch.Tensor, kind: str,
                   batch: int) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The site of ``kind`` at every layer ``[N, n_layers, T, D]`` and the image embeddings ``[N, E]``."""
    targets = [site_target(model, kind, layer) for layer in range(model.n_layers)]
    root = model.nn
    acts, embs = [], []
    for start in range(0, len(pixels), batch):
        inputs = {k: v.to(model.device) for k, v in model.to_tokens(pixels[start : start + batch]).items()}
        with torch.no_grad(), model.nn.trace(inputs, **model.trace_kwargs):
            saved = nnsight.save([read_site(envoy, io) for envoy, io in targets])
            emb = nnsight.save(root.output)
        acts.append(torch.stack([s.detach().float().cpu() for s in saved], 1))
        embs.append(emb.detach().float().cpu())
    return torch.cat(acts), torch.cat(embs)


def patched_embeddings(model: VisionModel, pixels_1: torch.Tensor, kind: str, layer: int, rows_nTD: torch.Tensor,
                       base_TD: torch.Tensor, base_E: torch.Tensor, batch: int) -> torch.Tensor:  # fmt: skip
    """Image embeddings ``[n, E]`` of the image with the site at ``layer`` replaced by each row; rows equal to the
    base activations give the base embedding without a pass."""
    envoy, io = site_target(model, kind, layer)
    root = model.nn
    inputs = {k: v.to(model.device) for k, v in model.to_tokens(pixels_1).items()}
    out_nE = base_E.unsqueeze(0).repeat(len(rows_nTD), 1)
    todo = (rows_nTD != base_TD.unsqueeze(0)).flatten(1).any(1).nonzero().flatten()
    for start in range(0, len(todo), batch):
        idx = todo[start : start + batch]
        rows = rows_nTD[idx].to(model.device, model.dtype)
        with torch.no_grad(), model.nn.trace(inputs, **model.trace_kwargs):
            write_site(envoy, io, rows)
            emb = nnsight.save(root.output)
        out_nE[idx] = emb.detach().float().cpu()
    return out_nE
