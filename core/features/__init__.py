"""Feature data: what each SAE latent responds to and promotes, from one streaming pass; search; labels.

``compute.py`` runs the pass (:func:`feature_data`) over the rows of an activation source
(:mod:`interplab.core.data.sources`), ``stats.py`` keeps the bounded running statistics, ``data.py`` is the
result (:class:`FeatureData`) and its files, ``search.py`` finds latents by text, token or direction,
``labels.py`` keeps labels, ``contrast.py`` ranks latents by how much more they fire on texts with a concept
than without, ``density.py`` says how often latents fire (every top-latents list leaves out dense ones),
``cards.py`` makes what a dashboard card shows beyond the data (the histogram
chart, a text's latents).

Example
-------
>>> data = ilab.feature_data(sae, model, "default", n_tokens=200_000, path="dash/")
>>> ilab.features.latents_for_token(data, model, " afternoon").ids[:5]
>>> ilab.features.search_latents(data, "Sunday")      # what the dashboard's search box finds
>>> ilab.features.set_label(sae, 123, "French city names")
>>> ilab.features.contrast(sae, model, ["Il pleut."], ["It rains."])    # from a concept to its latents
"""

from .compute import feature_data
from .contrast import Contrast, contrast, text_activations
from .data import FeatureData
from .labels import load_labels, set_label, suggest_label
from .search import (
    active_latents,
    latent_activations,
    latents_for_token,
    logit_effects,
    nearest_latents,
    search_latents,
)

__all__ = [
    "Contrast",
    "FeatureData",
    "active_latents",
    "contrast",
    "feature_data",
    "latent_activations",
    "latents_for_token",
    "load_labels",
    "logit_effects",
    "nearest_latents",
    "search_latents",
    "set_label",
    "suggest_label",
    "text_activations",
]
