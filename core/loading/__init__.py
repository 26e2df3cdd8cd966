"""Getting a model: :func:`load_model` (the embedded Gemma 3 270M, a Hugging Face id or folder, or NDIF),
the embedded model's one-time preparation and its GGUF conversion.

Example
-------
>>> from interplab.core.loading import load_model
>>> model = load_model()   # the embedded Gemma 3 270M, offline
"""

from .embedded import embedded_model_dir, is_prepared, prepare_embedded_model
from .load import load_model

__all__ = ["embedded_model_dir", "is_prepared", "load_model", "prepare_embedded_model"]
