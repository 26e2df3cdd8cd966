"""An activation store's manifest: its format, what it records, and every field checked when it is read.

Example
-------
>>> manifest = read_manifest(Path("acts/"))
>>> manifest["sites"], manifest["n_tokens"]
(['blocks.6.hook_resid_post'], 200000)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from ...storage.readers import Fields, FileError, in_folder, read_json

FORMAT = "interplab-activations"
VERSION = 2
MANIFEST = "manifest.json"
#: The job name a store's refusals give.
STORE_JOB = "activation store"
#: The dtypes a store keeps activations in, by the name its manifest gives.
STORE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: The safetensors spelling of each store dtype, as a shard's header gives it.
SHARD_DTYPES = {"float32": ("F32",), "float16": ("F16",), "bfloat16": ("BF16",)}
_SHARD_NAME = re.compile(r"^shard_\d{5,}\.safetensors$")
#: Every site name a model has (``hook_embed`` and ``blocks.N.<hook>``: see ``model.sites``).
_SITE_NAME = re.compile(r"^(?:hook_embed|blocks\.\d+\.[a-z_]+(?:\.[a-z_]+)*)$")


def read_manifest(root: Path) -> dict[str, Any]:
    """A store's manifest with every field checked (types, sites, widths, shard list adding up)."""
    file = in_folder(root, MANIFEST)
    f = Fields(file, read_json(file))
    if f.raw("format", None) != FORMAT:
        raise FileError(file, "format", f"is {f.raw('format', None)!r}: not an interplab activation manifest")
    f.int("version", minimum=1, maximum=VERSION)
    sites = f.list("sites")
    if not sites or not all(isinstance(x, str) and _SITE_NAME.match(x) for x in sites):
        raise FileError(file, "sites", f"must be a non-empty list of site names, got {sites!r:.100}")
    d = f.obj("d")
    for site in sites:
        d.int(site, minimum=1)
    f.str("model")
    f.str("dtype", choices=sorted(STORE_DTYPES))
    f.int("context_size", minimum=2)
    f.int("skipped_prefix", 0, minimum=0, maximum=1)
    n = f.int("n_tokens", minimum=0)
    f.bool("complete")
    total = 0
    for i, entry in enumerate(f.list("shards")):
        e = Fields(file, entry, f"shards[{i}]")
        if not _SHARD_NAME.match(e.str("file")):
            raise FileError(file, f"shards[{i}].file", f"must be a shard file name (shard_NNNNN.safetensors), "
                                                        f"got {e.raw('file')!r}")  # fmt: skip
        total += e.int("n_tokens", minimum=1)
    if total != n:
        raise FileError(file, "n_tokens", f"is {n} but its shards hold {total}")
    if f.has("tokens_sha256"):
        f.str("tokens_sha256")
    f.int("vocab_size", None, minimum=1)
    return f.data
