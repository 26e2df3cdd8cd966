"""The interplab engine: the base in five wings and one subpackage per capability. No widget code here.

The base: ``model/`` (the Model, sites, activations, trace ops, the NDIF client), ``loading/`` (load_model,
the embedded model), ``memory/`` (the budget, giving memory back, the paged unembedding), ``storage/``
(atomic writes, checkpoints, validated readers, the cache folder), ``readout/`` (logit lens, metrics) and
``checks.py`` (argument checks). The capabilities: ``data/``, ``saes/``, ``features/``, ``views/``,
``evals/``, ``patching/``, ``steering/``, ``matching/``, ``circuits/``, ``probes/``, ``das/``, ``train/``,
``vision/`` and ``jobs/``.
``ARCHITECTURE.md`` at the repository root is the map.

Example
-------
>>> from interplab.core import load_model
>>> model = load_model()
"""

from .data.store import ActivationStore
from .loading.load import load_model
from .model.activations import Activations
from .model.model import Model

__all__ = ["ActivationStore", "Activations", "Model", "load_model"]
