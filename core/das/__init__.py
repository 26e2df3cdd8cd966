"""Causal abstraction: distributed alignment search (DAS), a linear-time layer search, the context knob.

The public namespace ``ilab.das``. ``pairs.py`` holds counterfactual pairs (base, source, label);
``intervene.py`` the remote-safe interchange interventions (the subspace is a tensor passed into the
trace, the maths in :mod:`interplab.core.model.trace_ops`); ``fit.py`` training, IIA and :class:`DASResult`
(resumable with ``path=``); ``search.py`` the layer search; ``knob.py`` the context-sensitivity task;
``finetune.py`` a LoRA fine-tune until both of the knob's intents are followed; ``separation.py`` following the
intents against the intents' separation along the knob, across models;
``dictionaries.py`` supervised IOI dictionaries judged by sufficiency, necessity and (``controllability.py``)
sparse controllability beside SAEs; ``alignment.py`` their prompts split by value
(``split_ioi``) and the interpretability measure (single latents against single attribute values).

Example
-------
>>> import interplab as ilab
>>> model = ilab.load_model()
>>> pairs = ilab.patching.ioi(model, n=48)                       # or ilab.das.counterfactual_pairs(...)
>>> das = ilab.das.fit(model, pairs, "blocks.12.hook_resid_post", k=1)
>>> das.iia, ilab.steering.from_probe(das)                       # k = 1: a steering direction
>>> ilab.das.layer_search(model, pairs, top=2).chart()
"""

from __future__ import annotations

from .alignment import LatentAlignment, latent_alignment, split_ioi
from .controls import Control, knob_control, random_baseline, random_das, random_subspaces
from .dictionaries import (
    DictionaryComparison,
    SupervisedDictionary,
    compare_dictionaries,
    ioi_attributes,
    supervised_dictionary,
)
from .finetune import IntentTuning, finetune_intents
from .fit import DASResult, fit
from .knob import INTENTS, KnobSweep, KnobTask, knob_sweep, knob_task
from .pairs import CounterfactualPairs, as_pairs, counterfactual_pairs
from .positions import PositionSearch, position_search
from .search import LayerSearch, layer_search
from .separation import KnobSeparation, fit_knobs, knob_separation

__all__ = [
    "INTENTS",
    "Control",
    "CounterfactualPairs",
    "DASResult",
    "DictionaryComparison",
    "IntentTuning",
    "KnobSeparation",
    "KnobSweep",
    "KnobTask",
    "LatentAlignment",
    "LayerSearch",
    "PositionSearch",
    "SupervisedDictionary",
    "as_pairs",
    "compare_dictionaries",
    "counterfactual_pairs",
    "finetune_intents",
    "fit",
    "fit_knobs",
    "ioi_attributes",
    "knob_control",
    "knob_separation",
    "knob_sweep",
    "knob_task",
    "latent_alignment",
    "layer_search",
    "position_search",
    "random_baseline",
    "random_das",
    "random_subspaces",
    "split_ioi",
    "supervised_dictionary",
]
