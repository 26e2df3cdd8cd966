"""Data: text corpora (the default offline corpus, files, datasets) and on-disk activation stores.

``corpus.py`` turns any corpus into documents and token windows; ``store.py`` streams a model's
activations into resumable shards and reads them back as shuffled training batches.

Example
-------
>>> from interplab.core.data import ActivationStore, default_corpus
>>> store = ActivationStore("acts/")          # a store written by model.cache(...)
"""

from .corpus import default_corpus, iter_texts, prepare_default_corpus, token_windows
from .store import ActivationStore, cache_activations

__all__ = [
    "ActivationStore",
    "cache_activations",
    "default_corpus",
    "iter_texts",
    "prepare_default_corpus",
    "token_windows",
]
