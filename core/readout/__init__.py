"""Reading a model's outputs: the logit lens (tensor and view data) and metrics over logits.

Example
-------
>>> from interplab.core.readout import logit_diff
>>> metric = logit_diff(" Mary", " John")
"""

from . import metrics
from .lens import LensView, LogitLensResult, logit_lens
from .metrics import Metric, kl_to_clean, logit_diff, prob

__all__ = ["LensView", "LogitLensResult", "Metric", "kl_to_clean", "logit_diff", "logit_lens", "metrics", "prob"]
