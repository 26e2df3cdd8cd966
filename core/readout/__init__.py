"""Reading a model's outputs: the logit lens (tensor and view data), patchscopes and metrics over logits.

Example
-------
>>> from interplab.core.readout import logit_diff
>>> metric = logit_diff(" Mary", " John")
"""

from . import metrics
from .lens import LensView, LogitLensResult, logit_lens
from .metrics import Metric, kl_to_clean, logit_diff, prob
from .patchscope import PatchscopeResult, patchscope

__all__ = [
    "LensView", "LogitLensResult", "Metric", "PatchscopeResult", "kl_to_clean", "logit_diff", "logit_lens", "metrics",
    "patchscope", "prob",
]  # fmt: skip
