"""Caching a model's activations into a store: streamed to shards, resumed after a kill.

A store is a folder with ``manifest.json`` and ``shard_NNNNN.safetensors`` files.
Each shard holds one [n, d] tensor per site plus the ``tokens`` [n] they came from.
Caching is a :class:`~interplab.core.storage.resumable.ResumableJob` whose state is the manifest: the
folder's leftovers are cleaned first; a shard is written atomically, then the manifest that lists it (the
commit point); the manifest records what the store depends on (model and its weights, sites,
context size, dtype) and a digest of the tokens stored, so resuming with another model or corpus
is refused.

Example
-------
>>> store = cache_activations(model, "default", "blocks.6.hook_resid_post", "acts/", n_tokens=200_000)
>>> store.n_tokens
200000
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from ...checks import check_int, check_path, check_positive_int
from ...memory.budget import check_memory
from ...storage.atomic import remove, write_json, write_safetensors
from ...storage.resumable import ResumableJob
from ..corpus import describe_corpus
from ..streams import CorpusWindows
from .activation_store import ActivationStore
from .manifest import FORMAT, MANIFEST, STORE_DTYPES, STORE_JOB, VERSION, read_manifest

logger = logging.getLogger(__name__)

_FLOAT16_MAX = 65504.0


class Source(Protocol):
    """What a store needs from a model (an :class:`interplab.Model` is one): this keeps the data layer below it."""

    name: str
    tokenizer: Any

    def fingerprint(self) -> str: ...

    def check_lengths(self, lengths: Sequence[int], what: str = "text") -> None: ...

    def parse_sites(self, sites: str | Sequence[str]) -> list[Any]: ...  # parsed sites, opaque to the store

    def site_dim(self, site: str) -> int: ...

    def run_sites(self, enc: dict[str, torch.Tensor], sites: Sequence[Any]) -> list[torch.Tensor]: ...


def cache_activations(
    model: Source,
    corpus: Any,
    sites: str | Sequence[str],
    path: str | Path,
    n_tokens: int = 1_000_000,
    context_size: int = 128,
    batch_size: int = 8,
    shard_tokens: int = 65_536,
    dtype: str = "float32",
    progress: Any = True,
) -> ActivationStore:
    """Stream a model's activations at one or more sites into an on-disk store.

    Memory stays bounded by one shard per site. Re-running the same call after an
    interruption continues where it stopped; a store holding other sites, another model
    (or other weights), another context size or dtype, or made from another corpus is refused.
    BOS positions are not stored. ``progress``: show a bar (True), none (False), or update this
    tqdm bar (a job's, shown where the job started).

    >>> store = cache_activations(model, "default", "blocks.6.hook_resid_post", "acts/", n_tokens=200_000)
    """
    parsed = _check_cache(model, sites, n_tokens, context_size, dtype, batch_size, shard_tokens)
    root = check_path("path", path)
    wanted = {
        "format": FORMAT,
        "version": VERSION,
        "model": model.name,
        "model_sha": model.fingerprint(),
        "sites": [s.name for s in parsed],
        "d": {s.name: model.site_dim(s.name) for s in parsed},
        "dtype": dtype,
        "context_size": context_size,
        "skipped_prefix": 1 if model.tokenizer.bos_token_id is not None else 0,
    }
    job = ResumableJob(STORE_JOB, root, wanted, state_file=MANIFEST, where=root,
                       read=lambda file: _recorded(file, wanted), write=_write_manifest)  # fmt: skip
    manifest = _open_or_start(job)
    windows = CorpusWindows(model, corpus, context_size, manifest["n_tokens"], job.digest)
    _check_stored(job, manifest)
    if windows.empty and manifest["n_tokens"] == 0:
        raise ValueError(
            f"The corpus ({describe_corpus(corpus)}) gives no window of {context_size} tokens: it holds no text, or "
            "too little. Give a larger corpus or a smaller context_size."
        )
    job.begin()
    _drop_unlisted_shards(root, manifest)
    manifest["n_tokens_target"] = n_tokens
    manifest.setdefault("corpus", describe_corpus(corpus))
    manifest.setdefault("vocab_size", len(model.tokenizer))
    done = manifest["n_tokens"] >= n_tokens or (manifest.get("exhausted") and windows.empty)
    manifest["complete"] = bool(done)
    job.commit(manifest)
    if done:
        return ActivationStore(root)
    with job.progress(n_tokens, manifest["n_tokens"], "cache", progress, unit="tok", unit_scale=True) as bar:
        exhausted = _cache(job, manifest, windows.batches(parsed, batch_size), n_tokens, shard_tokens, dtype, bar)
    if exhausted:
        logger.warning(
            "The corpus ran out: it holds %s; %s tokens were stored (BOS positions are not), %s asked for. "
            "Give a larger corpus for more.",
            windows.count.describe(context_size),
            f"{manifest['n_tokens']:,}",
            f"{n_tokens:,}",
        )
    manifest["exhausted"] = exhausted
    manifest["complete"] = True
    job.commit(manifest)
    return ActivationStore(root)


def _check_cache(
    model: Source, sites: str | Sequence[str], n_tokens: int, context_size: int, dtype: str, batch_size: int,
    shard_tokens: int,
) -> list[Any]:  # fmt: skip
    """Every check of :func:`cache_activations` that needs no forward pass; the parsed sites."""
    parsed = model.parse_sites(sites)
    check_positive_int("n_tokens", n_tokens)
    check_int("context_size", context_size, minimum=2)
    model.check_lengths([context_size], "context_size")
    if dtype not in STORE_DTYPES:
        raise ValueError(f"dtype={dtype!r} is not valid; choose one of {sorted(STORE_DTYPES)}.")
    check_positive_int("batch_size", batch_size)
    check_positive_int("shard_tokens", shard_tokens)
    width = sum(model.site_dim(s.name) for s in parsed)
    check_memory(f"cache with shard_tokens={shard_tokens:,} at {len(parsed)} site(s)",
                 2 * (shard_tokens + batch_size * context_size) * width * STORE_DTYPES[dtype].itemsize,
                 "Use a smaller shard_tokens.")  # fmt: skip
    return parsed


def _cache(
    job: ResumableJob, manifest: dict[str, Any], batches: Iterator[tuple[int, torch.Tensor, list[torch.Tensor]]],
    n_tokens: int, shard_tokens: int, dtype: str, bar: Any,
) -> bool:  # fmt: skip
    """Run the model over the windows left and commit a shard every ``shard_tokens``; whether the corpus ran out."""
    store_dtype = STORE_DTYPES[dtype]
    names = manifest["sites"]
    pending: dict[str, list[torch.Tensor]] = {n: [] for n in [*names, "tokens"]}
    pending_count, pending_windows, exhausted = 0, 0, False
    while manifest["n_tokens"] + pending_count < n_tokens:
        batch = next(batches, None)
        if batch is None:
            exhausted = True
            break
        n_windows, ids_T, values = batch
        take = min(n_tokens - manifest["n_tokens"] - pending_count, len(ids_T))
        pending["tokens"].append(ids_T[:take])
        job.digest.update(ids_T[:take])
        for name, value_TD in zip(names, values, strict=True):
            pending[name].append(_stored(name, value_TD[:take], store_dtype))
        pending_count += take
        pending_windows += n_windows
        bar.update(take)
        if pending_count >= shard_tokens:
            _flush(job, manifest, pending, pending_count, pending_windows)
            pending = {k: [] for k in pending}
            pending_count = pending_windows = 0
    if pending_count:
        _flush(job, manifest, pending, pending_count, pending_windows)
    return exhausted


def _stored(name: str, kept: torch.Tensor, store_dtype: torch.dtype) -> torch.Tensor:
    """Activations as stored; float16 refuses values beyond its range (they would be stored as inf)."""
    if store_dtype == torch.float16 and bool((kept.abs() > _FLOAT16_MAX).any()):
        raise ValueError(
            f"Activations at {name} reach {float(kept.abs().max()):.0f}, beyond float16's range "
            f"(±{_FLOAT16_MAX:.0f}); they would be stored as inf. Use dtype='bfloat16' or 'float32'."
        )
    return kept.to(store_dtype)


def _check_stored(job: ResumableJob, manifest: dict[str, Any]) -> None:
    """Refuse a corpus whose first tokens are not the ones stored (stores written before version 2 cannot say)."""
    if not manifest["n_tokens"]:
        return
    if manifest.get("tokens_sha256"):
        job.check_corpus({"n_tokens": manifest["n_tokens"], "sha256": manifest["tokens_sha256"]})
    else:
        logger.warning("%s was written before stores recorded their tokens: its corpus cannot be checked.", job.folder)


def _open_or_start(job: ResumableJob) -> dict[str, Any]:
    """The store's manifest when it exists and was made with the same inputs, else a new one (not yet written)."""
    root = job.folder
    assert root is not None
    manifest = job.load()
    if manifest is None:
        if root.is_dir() and any(root.glob("shard_*.safetensors")):
            raise ValueError(f"{str(root)!r} holds shards but no manifest; refusing to mix data. Use a new folder.")
        return {**job.inputs, "n_tokens": 0, "windows_done": 0, "shards": [], "complete": False}
    manifest.update(job.inputs)
    return manifest


def _recorded(file: Path, wanted: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A manifest's recorded inputs (the fields of ``wanted``) and the manifest itself."""
    manifest = read_manifest(file.parent)
    recorded = {k: manifest.get(k) for k in wanted}
    if manifest.get("version") == 1:  # older stores recorded neither the weights nor the version as now
        recorded["version"], recorded["model_sha"] = VERSION, wanted["model_sha"]
        logger.warning("%s is a version-1 store: the weights it came from cannot be checked.", file.parent)
    return recorded, manifest


def _write_manifest(file: Path, inputs: Any, manifest: dict[str, Any]) -> None:
    write_json(file, manifest)


def _drop_unlisted_shards(root: Path, manifest: dict[str, Any]) -> None:
    """Remove shard files the manifest does not list (written just before a kill, never committed)."""
    listed = {e["file"] for e in manifest["shards"]}
    for shard in root.glob("shard_*.safetensors"):
        if shard.name not in listed:
            remove(shard)


def _flush(
    job: ResumableJob, manifest: dict[str, Any], pending: dict[str, list[torch.Tensor]], count: int, windows: int
) -> None:
    """Write one shard (atomically), then the manifest that lists it: the commit point."""
    assert job.folder is not None
    file = job.folder / f"shard_{len(manifest['shards']):05d}.safetensors"
    tensors = {k: torch.cat(v).contiguous() for k, v in pending.items()}
    manifest["tokens_sha256"] = job.digest.hexdigest()
    manifest["shards"].append({"file": file.name, "n_tokens": count})
    manifest["n_tokens"] += count
    manifest["windows_done"] += windows
    job.commit(manifest, lambda: _write_shard(file, tensors))


def _write_shard(file: Path, tensors: dict[str, torch.Tensor]) -> None:
    write_safetensors(file, tensors)
