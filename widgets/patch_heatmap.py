"""PatchHeatmap: an image with a value per patch laid over it (a neuron's activation, a probe's score, an effect).

Hover or focus a patch for its row, column and value; click one to set ``selected`` (its index, row by row).

Example
-------
>>> acts = model.collect(images[:1], sites="blocks.1.mlp.hook_post")
>>> ilab.widgets.PatchHeatmap(images[0], acts["blocks.1.mlp.hook_post"][0, 1:, 17], title="neuron 17")
"""

from __future__ import annotations

from typing import Any

import traitlets
from interplab.core.vision.view import PatchData, patch_data

from ._kit import Widget, array_payload, css, esm


class PatchHeatmap(Widget):
    """An image (``[C, H, W]`` pixels or ``[H, W, C]`` uint8) with one value per patch (``[P]`` or ``[G, G]``), or a
    :class:`~interplab.core.vision.view.PatchData`."""

    _esm = esm("patch_heatmap")
    _css = css("patch_heatmap")

    image = traitlets.Dict().tag(sync=True)  # uint8 [H, W, 3]
    values = traitlets.Dict().tag(sync=True)  # float32 [G, G]
    scale = traitlets.Dict().tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    #: Pixels a side the image is drawn at.
    size = traitlets.Int(256).tag(sync=True)
    #: The clicked patch (row-major index), -1 for none.
    selected = traitlets.Int(-1).tag(sync=True)

    def __init__(self, image: Any, values: Any = None, title: str = "", scale: str = "auto", **kwargs: Any) -> None:
        data = image if isinstance(image, PatchData) else patch_data(image, values, title, scale)
        super().__init__(
            image=array_payload(data.rgb_HW3, "uint8"), values=array_payload(data.values_GG, "float32"),
            scale=data.scale.to_dict(), title=data.title or title, **kwargs,
        )  # fmt: skip
