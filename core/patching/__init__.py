"""Activation patching: where in the model does a behaviour live?

Patch activations from a clean prompt into a corrupted one (or the reverse) at every layer
and position, per attention head, or per SAE latent, and measure how much of the clean
behaviour each patch restores. Exact grids batch the cells of a layer into one forward pass;
attribution grids estimate every cell of every site from two forwards and one backward.

``grid.py`` exact grids (``cached.py`` their passes that reuse the base run's keys and values),
``gradients.py`` attribution estimates (plain and integrated gradients), ``sae_latents.py`` SAE latents,
``images.py`` grids over image patches of a vision model (metrics of the image embedding),
``prepare.py`` what they share (checked inputs, collecting and scoring passes), ``prompts.py`` IOI and
other prompt pairs, ``result.py`` the result.
Metrics (``logit_diff``, ``prob``, ``kl_to_clean``) are :mod:`interplab.core.readout.metrics`'s, shared with steering.

Example
-------
>>> import interplab as ilab
>>> model = ilab.load_model()
>>> pairs = ilab.patching.ioi(model, n=4)
>>> exact = ilab.patching.grid(model, pairs, site="resid_pre")
>>> approx = ilab.patching.attribution(model, pairs, sites="resid_pre")
>>> ilab.widgets.PatchingGrid({"exact": exact, "attribution": approx})
"""

from __future__ import annotations

from ..readout.metrics import Metric, kl_to_clean, logit_diff, prob
from .gradients import PATHS, attribution
from .grid import grid
from .images import EmbeddingMetric, embedding_cosine, zero_shot
from .prepare import DIRECTIONS, SITES
from .prompts import IOI_TEMPLATES, NAMES, PromptPairs, ioi, ioi_balanced, prompt_pairs, single_token_names
from .result import PatchingResult
from .sae_latents import latents

__all__ = [
    "DIRECTIONS",
    "IOI_TEMPLATES",
    "NAMES",
    "PATHS",
    "SITES",
    "EmbeddingMetric",
    "Metric",
    "PatchingResult",
    "PromptPairs",
    "attribution",
    "embedding_cosine",
    "grid",
    "ioi",
    "ioi_balanced",
    "kl_to_clean",
    "latents",
    "logit_diff",
    "prob",
    "prompt_pairs",
    "single_token_names",
    "zero_shot",
]
