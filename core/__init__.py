"""The interplab engine: models, sites, activations and stores. No widget code here."""

from .activations import Activations
from .loading import load_model
from .model import Model
from .store import ActivationStore

__all__ = ["ActivationStore", "Activations", "Model", "load_model"]
