"""interplab widgets: anywidgets that render engine results inline (no engine logic here)."""

from .attention_pattern import AttentionPattern
from .circuit import CircuitGraph
from .dashboard import FeatureDashboard
from .flow import FeatureFlow
from .heatmap import FeatureHeatmap, TokenHeatmap
from .lens import LogitLens
from .patch_heatmap import PatchHeatmap
from .patching import PatchingGrid
from .routing import Routing
from .steering import SteeringPanel

__all__ = [
    "AttentionPattern",
    "CircuitGraph",
    "FeatureDashboard",
    "FeatureFlow",
    "FeatureHeatmap",
    "LogitLens",
    "PatchHeatmap",
    "PatchingGrid",
    "Routing",
    "SteeringPanel",
    "TokenHeatmap",
]
