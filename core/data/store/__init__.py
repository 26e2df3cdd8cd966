"""On-disk activation stores: stream activations to shards, resume after a kill, read back shuffled.

A store is a folder with ``manifest.json`` and ``shard_NNNNN.safetensors`` files.
Each shard holds one [n, d] tensor per site plus the ``tokens`` [n] they came from.
Caching is a :class:`~interplab.core.storage.resumable.ResumableJob` whose state is the manifest: the
folder's leftovers are cleaned first; a shard is written atomically, then the manifest that lists it (the
commit point); the manifest records what the store depends on (model and its weights, sites,
context size, dtype) and a digest of the tokens stored, so resuming with another model or corpus
is refused. Reading follows the validation contract (:mod:`interplab.core.storage.readers`): the manifest's
fields and each shard's header are checked before any tensor is read.

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
