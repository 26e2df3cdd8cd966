"""Steering: control vectors and SAE-latent clamps, applied in traces and generation, measured by sweeps.

The public namespace ``ilab.steering``; the pieces live in ``vectors.py`` (making and saving
vectors), ``plans.py`` (checking what to apply, and the one function that applies it), ``traces.py``
(inside nnsight traces), ``hooks.py`` (torch hooks, for streaming), ``sweeps.py`` (scale and layer
sweeps), ``live.py`` (live generation in a background thread, the newest request winning) and ``ranges.py``
(slider ranges scaled to a site's typical activation norm) and ``refine.py`` (SAE-refined vectors,
their random-span control, linearity compared across vectors).
Metrics are :mod:`interplab.core.readout.metrics`'s, shared with patching.

Example
-------
>>> import interplab as ilab
>>> model = ilab.load_model()
>>> vec = ilab.steering.diff_of_means(model, "blocks.6.hook_resid_post", ["I love it."], ["I hate it."])
>>> ilab.steering.generate(model, "The movie was", vec * 4.0, max_new_tokens=10)
>>> result = ilab.steering.sweep(model, vec, scales=[-4, 0, 4], metric=ilab.metrics.logit_diff(" good", " bad"),
...                              prompts=["The movie was"], neutral_texts=["The cat sat on the mat."])
>>> result.r2, result.chart()
"""

from __future__ import annotations

from ..readout.metrics import logit_diff, prob
from .hooks import apply, stream
from .plans import Clamp, SitePlan, Steering, clamp, plan
from .ranges import scaled_range, typical_norm
from .refine import Comparison, compare, random_span, refine
from .sweeps import LayerSweep, SweepResult, layer_sweep, sweep
from .traces import generate, generate_local, logits
from .vectors import SteeringVector, contrast, diff_of_means, from_probe, from_sae, pca_direction

__all__ = [
    "Clamp",
    "Comparison",
    "LayerSweep",
    "SitePlan",
    "Steering",
    "SteeringVector",
    "SweepResult",
    "apply",
    "clamp",
    "compare",
    "contrast",
    "diff_of_means",
    "from_probe",
    "from_sae",
    "generate",
    "generate_local",
    "layer_sweep",
    "logit_diff",
    "logits",
    "pca_direction",
    "plan",
    "prob",
    "random_span",
    "refine",
    "scaled_range",
    "stream",
    "sweep",
    "typical_norm",
]
