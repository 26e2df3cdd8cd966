"""Views: plain data shaped for display (what a widget draws), prepared here so widgets stay thin.

``heatmap.py`` turns tokens and per-token values, activations or an SAE's latents on them into
:class:`HeatmapData` (documents, a deduplicated vocabulary, top features per token); ``attention.py``
reads one text's attention patterns into :class:`AttentionData`. ``colors.py`` resolves the colour scale of
every heatmap-like widget (``scale``, ``vmin``, ``vmax``, ``center``; BOS left out), which
``widgets/js/shared/scale.js`` draws (``ilabColor(value, scale)``, ``ilabLegend(scale)``).

Example
-------
>>> from interplab.core.views import heatmap_data
>>> data = heatmap_data([["The", " cat"]], torch.rand(2, 8))
"""

from .attention_pattern import AttentionData, attention_data
from .colors import ColorScale, color_scale
from .heatmap import HeatmapData, as_heatmap_data, heatmap_data, heatmap_data_from_activations, heatmap_data_from_sae

__all__ = [
    "AttentionData",
    "ColorScale",
    "HeatmapData",
    "as_heatmap_data",
    "attention_data",
    "color_scale",
    "heatmap_data",
    "heatmap_data_from_activations",
    "heatmap_data_from_sae",
]
