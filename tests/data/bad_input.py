"""Bad inputs of activation stores and corpora: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

import json
from pathlib import Path

from interplab.core.storage.readers import FileError

import interplab as ilab
from tests.contracts.rows import Ctx, Row, V


def _bad_store(c: Ctx) -> Path:
    folder = c.tmp / "badstore"
    folder.mkdir(exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps({"format": "interplab-activations", "version": 2, "sites": ["x"]}))
    return folder


ROWS: list[Row] = [
    Row(
        "ilab.ActivationStore",
        lambda c: ilab.ActivationStore(c.tmp / "nowhere"),
        FileNotFoundError,
        "is not an activation store: no manifest.json",
    ),
    Row(
        "ilab.ActivationStore",
        lambda c: ilab.ActivationStore(_bad_store(c)),
        FileError,
        r"manifest\.json': sites must be a non-empty list of site names",
    ),
    Row(
        "ilab.ActivationStore.batches",
        lambda c: c.store.batches(64, buffer_shards=0),
        V,
        "buffer_shards must be a positive integer, got 0",
    ),
    Row("ilab.ActivationStore.batches", lambda c: c.store.batches(0), V, "batch_size must be a positive integer"),
    Row(
        "ilab.ActivationStore.batches",
        lambda c: c.store.batches(8, site="blocks.0.x"),
        V,
        r"Site 'blocks\.0\.x' is not in this store; it holds",
    ),
    Row("ilab.ActivationStore.d", lambda c: c.store.d("blocks.5.hook_resid_post"), V, "is not in this store"),
    Row("ilab.ActivationStore.read", lambda c: c.store.read("nope"), V, "'nope' is not in this store"),
    Row(
        "ilab.ActivationStore.shard",
        lambda c: c.store.shard(99, "tokens"),
        V,
        r"shard index must be an integer in 0\.\.\d+, got 99",
    ),
    Row("ilab.ActivationStore.shard_file", lambda c: c.store.shard_file(-1), V, "shard index must be an integer in"),
]

EXEMPT: dict[str, str] = {
    "ilab.default_corpus": "takes no arguments",
}
