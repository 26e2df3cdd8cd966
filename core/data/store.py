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

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors import safe_open

from ..checks import check_int, check_path, check_positive_int
from ..memory.budget import check_memory
from ..storage.atomic import remove, write_json, write_safetensors
from ..storage.readers import (
    Fields,
    FileError,
    expect_arrays,
    expect_values,
    in_folder,
    inside,
    read_json,
    safetensors_header,
)
from ..storage.resumable import ResumableJob
from .corpus import describe_corpus
from .streams import CorpusWindows

logger = logging.getLogger(__name__)

FORMAT = "interplab-activations"
VERSION = 2
MANIFEST = "manifest.json"
#: The job name a store's refusals give.
STORE_JOB = "activation store"
_SHARD_NAME = re.compile(r"^shard_\d{5,}\.safetensors$")
_ST_DTYPES = {"float32": ("F32",), "float16": ("F16",), "bfloat16": ("BF16",)}
#: Every site name a model has (``hook_embed`` and ``blocks.N.<hook>``: see ``model.sites``).
_SITE_NAME = re.compile(r"^(?:hook_embed|blocks\.\d+\.[a-z_]+(?:\.[a-z_]+)*)$")
_FLOAT16_MAX = 65504.0
_STORE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class Source(Protocol):
    """What a store needs from a model (an :class:`interplab.Model` is one): this keeps the data layer below it."""

    name: str
    tokenizer: Any

    def fingerprint(self) -> str: ...

    def check_lengths(self, lengths: Sequence[int], what: str = "text") -> None: ...

    def parse_sites(self, sites: str | Sequence[str]) -> list[Any]: ...  # parsed sites, opaque to the store

    def site_dim(self, site: str) -> int: ...

    def run_sites(self, enc: dict[str, torch.Tensor], sites: Sequence[Any]) -> list[torch.Tensor]: ...


class ActivationStore:
    """A finished or partial activation store on disk (read-only view)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        manifest = in_folder(self.path, MANIFEST)
        if not manifest.exists():
            raise FileNotFoundError(f"{str(self.path)!r} is not an activation store: no {MANIFEST}.")
        self.manifest: dict[str, Any] = read_manifest(self.path)
        self._checked: set[int] = set()

    @property
    def sites(self) -> list[str]:
        return list(self.manifest["sites"])

    @property
    def n_tokens(self) -> int:
        """Tokens stored (BOS positions are not)."""
        return int(self.manifest["n_tokens"])

    @property
    def complete(self) -> bool:
        """Whether the caching run finished (a partial store resumes when the same call runs again)."""
        return bool(self.manifest["complete"])

    @property
    def model_name(self) -> str:
        """The name of the model the activations came from."""
        return str(self.manifest["model"])

    def d(self, site: str | None = None) -> int:
        """Width of a site's activations (the only site when there is one)."""
        return int(self.manifest["d"][self._site(site)])

    def __len__(self) -> int:
        return self.n_tokens

    def __repr__(self) -> str:
        state = "complete" if self.complete else "partial"
        return f"ActivationStore({str(self.path)!r}, {self.n_tokens} tokens, sites={self.sites}, {state})"

    def _site(self, site: str | None) -> str:
        if site is None:
            if len(self.sites) != 1:
                raise ValueError(f"This store holds several sites; name one of {self.sites}.")
            return self.sites[0]
        if site not in self.sites:
            raise ValueError(f"Site {site!r} is not in this store; it holds {self.sites}.")
        return site

    @property
    def n_shards(self) -> int:
        """Shard files, read in store order by :meth:`shard`."""
        return len(self.manifest["shards"])

    @property
    def context_size(self) -> int:
        """Tokens per window when cached (BOS included); ``skipped_prefix`` of them are not stored."""
        return int(self.manifest["context_size"])

    @property
    def skipped_prefix(self) -> int:
        """Leading tokens of each window not stored (1 when the windows start with BOS)."""
        return int(self.manifest.get("skipped_prefix", 0))

    @property
    def tokens_digest(self) -> str | None:
        """sha256 of the stored token ids in order (stores written before version 2 have none)."""
        return self.manifest.get("tokens_sha256")

    def identity(self) -> dict[str, Any]:
        """What a job reading this store records to recognise it (its path does not count: it may move)."""
        keys = ("model", "model_sha", "sites", "d", "dtype", "context_size", "n_tokens", "tokens_sha256")
        ident = {k: self.manifest.get(k) for k in keys}
        if not ident["tokens_sha256"]:  # an older store: known by its place and size only
            ident["path"] = str(self.path.resolve())
        return ident

    def shard_file(self, index: int) -> Path:
        """The file of shard ``index``, its header checked against the manifest (once per shard)."""
        index = check_int("shard index", index, 0, self.n_shards - 1)
        entry = self.manifest["shards"][index]
        file = inside(self.path, entry["file"], self.path / MANIFEST, f"shards[{index}].file")
        if index not in self._checked:
            header = safetensors_header(file)
            n, dtypes = entry["n_tokens"], _ST_DTYPES[self.manifest["dtype"]]
            wanted: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {
                s: ((n, self.d(s)), dtypes) for s in self.sites
            }
            wanted["tokens"] = ((n,), ("I64", "I32"))
            expect_arrays(file, header.tensors, wanted)
            self._checked.add(index)
        return file

    def shard(self, index: int, key: str) -> torch.Tensor:
        """One shard's tensor: a site's activations [n, d] or ``"tokens"`` [n] (shards in store order)."""
        file = self.shard_file(index)
        if key != "tokens":
            key = self._site(key)
        n = self.manifest["shards"][index]["n_tokens"]
        check_memory(f"Reading shard {index} of {str(self.path)!r}", n * (8 if key == "tokens" else 4 * self.d(key)))
        with safe_open(str(file), framework="pt") as f:
            tensor = f.get_tensor(key)
        if key == "tokens":  # token ids inside the vocabulary of the model that made them
            expect_values(file, "tokens", tensor, 0, self.manifest.get("vocab_size"), "vocab_size")
        return tensor

    def tokens(self) -> torch.Tensor:
        """All token ids [n_tokens], in store order."""
        return torch.cat([self.shard(i, "tokens") for i in range(self.n_shards)])

    def read(self, site: str | None = None) -> torch.Tensor:
        """All activations of one site as [n_tokens, d] (loads everything into memory)."""
        key = self._site(site)
        return torch.cat([self.shard(i, key) for i in range(self.n_shards)])

    def batches(
        self,
        batch_size: int,
        site: str | None = None,
        shuffle: bool = True,
        seed: int = 0,
        buffer_shards: int = 2,
        dtype: torch.dtype = torch.float32,
    ) -> Iterator[torch.Tensor]:
        """Yield [batch_size, d] training batches; the last partial batch is dropped.

        With ``shuffle`` the shard order is permuted and tokens are mixed across
        ``buffer_shards`` shards at a time, so memory stays bounded. Arguments are checked
        when called, before the first batch is asked for.
        """
        check_positive_int("batch_size", batch_size)
        check_positive_int("buffer_shards", buffer_shards)
        check_int("seed", seed)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch dtype such as torch.float32, got {dtype!r}.")
        key = self._site(site)
        largest = max((e["n_tokens"] for e in self.manifest["shards"]), default=0)
        check_memory(f"store.batches with buffer_shards={buffer_shards}",
                     (buffer_shards + 1) * largest * self.d(key) * 4, "Use fewer buffer_shards.")  # fmt: skip
        return self._batches(batch_size, key, shuffle, seed, buffer_shards, dtype)

    def _batches(
        self, batch_size: int, key: str, shuffle: bool, seed: int, buffer_shards: int, dtype: torch.dtype
    ) -> Iterator[torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        n = self.n_shards
        order = torch.randperm(n, generator=gen).tolist() if shuffle else list(range(n))
        leftover = torch.empty(0, self.d(key), dtype=dtype)
        for start in range(0, n, buffer_shards):
            chunk = [self.shard(i, key).to(dtype) for i in order[start : start + buffer_shards]]
            pool = torch.cat([leftover, *chunk])
            if shuffle:
                pool = pool[torch.randperm(len(pool), generator=gen)]
            full = len(pool) // batch_size * batch_size
            if full:
                yield from pool[:full].split(batch_size)
            leftover = pool[full:]


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
    if dtype not in _STORE_DTYPES:
        raise ValueError(f"dtype={dtype!r} is not valid; choose one of {sorted(_STORE_DTYPES)}.")
    check_positive_int("batch_size", batch_size)
    check_positive_int("shard_tokens", shard_tokens)
    width = sum(model.site_dim(s.name) for s in parsed)
    check_memory(f"cache with shard_tokens={shard_tokens:,} at {len(parsed)} site(s)",
                 2 * (shard_tokens + batch_size * context_size) * width * _STORE_DTYPES[dtype].itemsize,
                 "Use a smaller shard_tokens.")  # fmt: skip
    return parsed


def _cache(
    job: ResumableJob, manifest: dict[str, Any], batches: Iterator[tuple[int, torch.Tensor, list[torch.Tensor]]],
    n_tokens: int, shard_tokens: int, dtype: str, bar: Any,
) -> bool:  # fmt: skip
    """Run the model over the windows left and commit a shard every ``shard_tokens``; whether the corpus ran out."""
    store_dtype = _STORE_DTYPES[dtype]
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
    f.str("dtype", choices=sorted(_STORE_DTYPES))
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
