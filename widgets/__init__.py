"""interplab widgets: anywidgets that render engine results inline (no engine logic here)."""

from .attention import AttentionPattern
from .dashboard import FeatureDashboard
from .flow import FeatureFlow
from .heatmap import FeatureHeatmap, TokenHeatmap
from .lens import LogitLens
from .patching import PatchingGrid
from .steering import SteeringPanel

__all__ = [
    "AttentionPattern",
    "FeatureDashboard",
    "FeatureFlow",
    "FeatureHeatmap",
    "LogitLens",
    "PatchingGrid",
    "SteeringPanel",
    "TokenHeatmap",
]
