"""On-disk activation stores: stream activations to shards, resume after a kill, read back shuffled.

A store is a folder of ``manifest.json`` (:mod:`.manifest`: what the store holds and depends on, checked field by
field when read) and ``shard_NNNNN.safetensors`` files, one [n, d] tensor per site plus the ``tokens`` [n] they
came from. :func:`cache_activations` (:mod:`.caching`) writes one as a resumable job;
:class:`ActivationStore` (:mod:`.activation_store`) reads it back, each shard's header checked first.

Example
-------
>>> store = model.cache("default", "blocks.6.hook_resid_post", "acts/", n_tokens=200_000)
>>> for batch in store.batches(4096):            # [4096, 640] shuffled training batches
...     ...
"""

from .activation_store import ActivationStore
from .caching import Source, cache_activations
from .manifest import FORMAT, MANIFEST, STORE_JOB, VERSION, read_manifest

__all__ = [
    "FORMAT",
    "MANIFEST",
    "STORE_JOB",
    "VERSION",
    "ActivationStore",
    "Source",
    "cache_activations",
    "read_manifest",
]
