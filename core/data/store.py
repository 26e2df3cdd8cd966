"""On-disk activation stores: stream activations to shards, resume after a kill, read back shuffled.

A store is a folder with ``manifest.json`` and ``shard_NNNNN.safetensors`` files.
Each shard holds one [n, d] tensor per site plus the ``tokens`` [n] they came from.
A shard is written to a temporary name and renamed, then the manifest is rewritten
the same way, so a killed run never leaves a shard that a reader would see.

Example
-------
>>> store = model.cache("default", "blocks.6.hook_resid_post", "acts/", n_tokens=200_000)
>>> for batch in store.batches(4096):            # [4096, 640] shuffled training batches
...     ...
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm.auto import tqdm

from ..atomic import atomic_path, write_json
from ..checks import check_int, check_positive_int
from .corpus import token_windows

if TYPE_CHECKING:
    from ..sites import Site

logger = logging.getLogger(__name__)

FORMAT = "interplab-activations"
MANIFEST = "manifest.json"
_FLOAT16_MAX = 65504.0
_STORE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class Source(Protocol):
    """What a store needs from a model (an :class:`interplab.Model` is one): this keeps the data layer below it."""

    name: str
    tokenizer: Any

    def parse_sites(self, sites: str | Sequence[str]) -> list[Site]: ...

    def site_dim(self, site: str) -> int: ...

    def run_sites(self, enc: dict[str, torch.Tensor], sites: Sequence[Site]) -> list[torch.Tensor]: ...


class ActivationStore:
    """A finished or partial activation store on disk (read-only view)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        manifest = self.path / MANIFEST
        if not manifest.exists():
            raise FileNotFoundError(f"{str(self.path)!r} is not an activation store: no {MANIFEST}.")
        self.manifest: dict[str, Any] = json.loads(manifest.read_text())
        if self.manifest.get("format") != FORMAT:
            raise ValueError(f"{str(manifest)!r} is not an interplab activation manifest.")

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

    def shard(self, index: int, key: str) -> torch.Tensor:
        """One shard's tensor: a site's activations [n, d] or ``"tokens"`` [n] (shards in store order)."""
        index = check_int("shard index", index, 0, self.n_shards - 1)
        entry = self.manifest["shards"][index]
        with safe_open(str(self.path / entry["file"]), framework="pt") as f:
            return f.get_tensor(key)

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
        ``buffer_shards`` shards at a time, so memory stays bounded.
        """
        check_positive_int("batch_size", batch_size)
        check_positive_int("buffer_shards", buffer_shards)
        key = self._site(site)
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
    interruption continues where it stopped; a store holding other sites, another
    model or another context size is refused. BOS positions are not stored. ``progress``: show a
    bar (True), none (False), or update this tqdm bar (a job's, shown where the job started).
    """
    parsed = model.parse_sites(sites)
    names = [s.name for s in parsed]
    check_positive_int("n_tokens", n_tokens)
    check_int("context_size", context_size, minimum=2)
    if dtype not in _STORE_DTYPES:
        raise ValueError(f"dtype={dtype!r} is not valid; choose one of {sorted(_STORE_DTYPES)}.")
    check_positive_int("batch_size", batch_size)
    check_positive_int("shard_tokens", shard_tokens)
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    skip = 1 if model.tokenizer.bos_token_id is not None else 0
    wanted = {
        "format": FORMAT, "version": 1, "model": model.name, "sites": names,
        "d": {n: model.site_dim(n) for n in names}, "dtype": dtype, "context_size": context_size,
        "skipped_prefix": skip,
    }
    manifest = _open_or_start(root, wanted)
    manifest["n_tokens_target"] = n_tokens
    for stray in root.glob("*.tmp"):
        stray.unlink()
    if manifest["n_tokens"] >= n_tokens or manifest.get("exhausted"):
        manifest["complete"] = True
        write_json(root / MANIFEST, manifest)
        return ActivationStore(root)
    manifest["complete"] = False
    write_json(root / MANIFEST, manifest)

    store_dtype = _STORE_DTYPES[dtype]
    windows = token_windows(model.tokenizer, corpus, context_size)
    # Every window stores exactly `body` tokens, so the stored tokens are a prefix of the stream:
    # skip the whole windows already stored, then the stored part of the next one.
    body = context_size - skip
    for _ in range(manifest["n_tokens"] // body):
        next(windows, None)
    drop = manifest["n_tokens"] % body
    pending: dict[str, list[torch.Tensor]] = {n: [] for n in [*names, "tokens"]}
    pending_count, pending_windows = 0, 0
    own_bar = not hasattr(progress, "update")
    bar = tqdm(total=n_tokens, initial=manifest["n_tokens"], desc="cache", unit="tok", unit_scale=True,
               disable=not progress) if own_bar else progress  # fmt: skip
    if not own_bar:
        bar.reset(total=n_tokens)
        bar.update(manifest["n_tokens"])
    exhausted = False
    try:
        while manifest["n_tokens"] + pending_count < n_tokens:
            batch = [w for _, w in zip(range(batch_size), windows)]
            if not batch:
                exhausted = True
                break
            ids = torch.tensor(batch)
            values = model.run_sites({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, parsed)
            take = min(n_tokens - manifest["n_tokens"] - pending_count, len(batch) * body - drop)
            pending["tokens"].append(ids[:, skip:].reshape(-1)[drop : drop + take])
            for name, value in zip(names, values, strict=True):
                flat = value[:, skip:].reshape(-1, value.shape[-1])
                kept = flat[drop : drop + take]
                if store_dtype == torch.float16 and bool((kept.abs() > _FLOAT16_MAX).any()):
                    raise ValueError(
                        f"Activations at {name} reach {float(kept.abs().max()):.0f}, beyond float16's range "
                        f"(±{_FLOAT16_MAX:.0f}); they would be stored as inf. Use dtype='bfloat16' or 'float32'."
                    )
                pending[name].append(kept.to(store_dtype))
            drop = 0
            pending_count += take
            pending_windows += len(batch)
            bar.update(take)
            if pending_count >= shard_tokens:
                _flush(root, manifest, pending, pending_count, pending_windows)
                pending = {k: [] for k in pending}
                pending_count = pending_windows = 0
        if pending_count:
            _flush(root, manifest, pending, pending_count, pending_windows)
    finally:
        if own_bar:
            bar.close()
    if exhausted:
        logger.warning("The corpus ran out after %d tokens (asked for %d).", manifest["n_tokens"], n_tokens)
    manifest["exhausted"] = exhausted
    manifest["complete"] = True
    write_json(root / MANIFEST, manifest)
    return ActivationStore(root)


def _open_or_start(root: Path, wanted: dict[str, Any]) -> dict[str, Any]:
    path = root / MANIFEST
    if not path.exists():
        if any(root.glob("shard_*.safetensors")):
            raise ValueError(f"{str(root)!r} holds shards but no manifest; refusing to mix data. Use a new folder.")
        return {**wanted, "n_tokens": 0, "windows_done": 0, "shards": [], "complete": False}
    manifest = json.loads(path.read_text())
    for key, value in wanted.items():
        if manifest.get(key) != value:
            raise ValueError(
                f"{str(root)!r} already holds a store with {key}={manifest.get(key)!r}, but this call "
                f"asks for {key}={value!r}. Use another path, or delete the folder to start over."
            )
    return manifest


def _flush(
    root: Path, manifest: dict[str, Any], pending: dict[str, list[torch.Tensor]], count: int, windows: int
) -> None:
    index = len(manifest["shards"])
    name = f"shard_{index:05d}.safetensors"
    tensors = {k: torch.cat(v).contiguous() for k, v in pending.items()}
    with atomic_path(root / name) as tmp:
        save_file(tensors, str(tmp))
    manifest["shards"].append({"file": name, "n_tokens": count})
    manifest["n_tokens"] += count
    manifest["windows_done"] += windows
    write_json(root / MANIFEST, manifest)
