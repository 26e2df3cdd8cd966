"""What the patch heatmap shows: an image as RGB bytes and one value per patch, with the colour scale.

Example
-------
>>> acts = model.collect(images[:1], sites="blocks.1.mlp.hook_post")
>>> data = patch_data(images[0], acts["blocks.1.mlp.hook_post"][0, 1:, 17])   # neuron 17 on each patch
>>> ilab.widgets.PatchHeatmap(data)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..views.colors import ColorScale, color_scale


@dataclass
class PatchData:
    """An image (``rgb_HW3`` uint8) and a value per patch (``values_GG`` float32, row by row), their colour scale."""

    rgb_HW3: np.ndarray
    values_GG: np.ndarray
    scale: ColorScale
    title: str = ""


def patch_data(image: Any, values: Any, title: str = "", scale: str = "auto") -> PatchData:
    """A ``[C, H, W]`` (or ``[H, W, C]`` uint8) image and one value per patch (``[P]`` or ``[G, G]``, ``P = G * G``
    patches row by row; the class token left out) for :class:`interplab.widgets.PatchHeatmap`.

    >>> patch_data(torch.rand(3, 16, 16), torch.arange(16.0)).values_GG.shape
    (4, 4)
    """
    img = torch.as_tensor(np.asarray(image) if not isinstance(image, torch.Tensor) else image).detach().cpu()
    if img.dim() == 3 and img.shape[0] in (1, 3):
        img = img.permute(1, 2, 0)
    if img.dim() != 3 or img.shape[-1] not in (1, 3):
        raise ValueError(f"image is [channels, height, width] with 1 or 3 channels (or [height, width, channels]); "
                         f"got shape {list(img.shape)}.")  # fmt: skip
    if img.dtype != torch.uint8:  # pixel values of any range, stretched per image for display
        img = img.float()
        low, high = img.min(), img.max()
        img = ((img - low) / (high - low).clamp_min(1e-12) * 255).round().to(torch.uint8)
    rgb = img.expand(-1, -1, 3) if img.shape[-1] == 1 else img
    vals = torch.as_tensor(values).detach().cpu().float()
    side = math.isqrt(vals.numel())
    if vals.dim() not in (1, 2) or side * side != vals.numel() or vals.numel() == 0:
        raise ValueError(f"values are one per patch of a square grid ([P] or [G, G]); got shape {list(vals.shape)}.")
    if not torch.isfinite(vals).all():
        raise ValueError("values hold NaN or infinite entries.")
    values_GG = vals.reshape(side, side).numpy()
    return PatchData(rgb.contiguous().numpy(), values_GG, color_scale(values_GG, scale=scale), title)


def patching_row(result: Any, image: Any, layer: int, normalized: bool = True, scale: str = "auto") -> PatchData:
    """One layer's row of a patching grid over image tokens (``ilab.patching.grid`` of a vision model) as a
    heatmap over ``image``: one value per patch (normalised: 1 = clean, 0 = corrupted), the class token's in the
    title. The grid's columns must hold every patch.

    >>> r = ilab.patching.grid(model, clean_images, corrupt_images)
    >>> ilab.widgets.PatchHeatmap(patching_row(r, clean_images[0], layer=1))
    """
    if getattr(result, "col_name", None) != "position" or not hasattr(result, "values"):
        what = " over heads" if getattr(result, "col_name", "") == "head" else ""
        raise TypeError(f"patching_row reads a patching grid over image tokens (site other than 'heads'); got "
                        f"{type(result).__name__}{what}.")  # fmt: skip
    rows = list(result.rows)
    if isinstance(layer, bool) or layer not in rows:
        raise ValueError(f"layer={layer!r} is not a row of the grid (layers {rows[0]}..{rows[-1]}).")
    grid = np.asarray(result.normalized if normalized else result.values)[rows.index(layer)]
    tokens = list(result.tokens)
    column = {int(p): j for j, p in enumerate(result.positions)}
    missing = [p for p in range(1, len(tokens)) if p not in column]
    if missing or len(tokens) < 2:
        raise ValueError(f"The grid leaves out patch positions {missing[:5]}{'...' if len(missing) > 5 else ''}: "
                         "patch every position (positions=None) to show a layer over the image.")  # fmt: skip
    cls = f"; CLS {grid[column[0]]:.2f}" if 0 in column else ""
    kind = "normalised" if normalized else result.metric
    title = f"patching {result.site}, layer {layer} ({kind}{cls})"
    return patch_data(image, grid[[column[p] for p in range(1, len(tokens))]], title, scale)
