"""Views: plain data shaped for display (what a widget draws), prepared here so widgets stay thin.

``heatmap.py`` turns tokens and per-token values into :class:`HeatmapData` (documents, a
deduplicated vocabulary, top features per token).

Example
-------
>>> from interplab.core.views import heatmap_data
>>> data = heatmap_data([["The", " cat"]], torch.rand(2, 8))
"""

from .heatmap import HeatmapData, heatmap_data, heatmap_data_from_activations

__all__ = ["HeatmapData", "heatmap_data", "heatmap_data_from_activations"]
