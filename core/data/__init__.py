"""Data: text corpora (the default offline corpus, files, datasets) and on-disk activation stores.

``corpus.py`` turns any corpus into documents and token windows; ``store/`` streams a model's
activations into resumable shards and reads them back as shuffled training batches; ``sources.py`` is
where a long job's activations come from (a model over a corpus or a store, one protocol), read by
``streams.py`` (a model's, resumable at any point) and ``rows.py`` (documents cut into rows).

Example
-------
>>> from interplab.core.data import ActivationStore, default_corpus
>>> store = ActivationStore("acts/")          # a store written by model.cache(...)
"""

from .corpus import default_corpus, iter_texts, prepare_default_corpus, token_windows
from .sources import ActivationSource, ModelSource, StoreSource, activation_source
from .store import ActivationStore, cache_activations

__all__ = [
    "ActivationSource",
    "ActivationStore",
    "ModelSource",
    "StoreSource",
    "activation_source",
    "cache_activations",
    "default_corpus",
    "iter_texts",
    "prepare_default_corpus",
    "token_windows",
]
