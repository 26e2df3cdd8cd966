"""interplab widgets: anywidgets that render engine results inline (no engine logic here)."""

from .heatmap import FeatureHeatmap, TokenHeatmap

__all__ = ["FeatureHeatmap", "TokenHeatmap"]
