"""Views: plain data shaped for display (what a widget draws), prepared here so widgets stay thin.

``heatmap.py`` turns tokens and per-token values into :class:`HeatmapData` (documents, a
deduplicated vocabulary, top features per token); ``attention.py`` reads one text's attention
patterns into :class:`AttentionData`.

Example
-------
>>> from interplab.core.views import heatmap_data
>>> data = heatmap_data([["The", " cat"]], torch.rand(2, 8))
"""

from .attention import AttentionData, attention_data
from .heatmap import HeatmapData, heatmap_data, heatmap_data_from_activations

__all__ = ["AttentionData", "HeatmapData", "attention_data", "heatmap_data", "heatmap_data_from_activations"]
