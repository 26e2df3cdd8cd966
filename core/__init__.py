"""The interplab engine: models, sites, activations, stores and one subpackage per capability. No widget code here.

The base (``model.py``, ``sites.py``, ``attention.py``, ``loading.py``, ``embedded.py``, ``activations.py``,
``lens.py``, ``metrics.py``) and shared helpers (``checks.py``, ``atomic.py``, ``charts.py``) sit at the top;
``data/``, ``saes/``, ``features/``, ``evals/``, ``views/``, ``patching/``, ``steering/``, ``circuits/`` and
``recipes/`` each hold one capability. ``ARCHITECTURE.md`` at the repository root is the map.
"""

from .activations import Activations
from .data.store import ActivationStore
from .loading import load_model
from .model import Model

__all__ = ["ActivationStore", "Activations", "Model", "load_model"]
