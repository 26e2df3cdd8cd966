"""Reading an activation store: a read-only view of a finished or partial store, its shards checked
against the manifest before any tensor is read, shuffled training batches in bounded memory.

Example
-------
>>> store = ActivationStore("acts/")
>>> for batch in store.batches(4096):            # [4096, 640] shuffled training batches
...     ...
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from ...checks import check_int, check_positive_int
from ...memory.budget import check_memory
from ...storage.readers import expect_arrays, expect_values, in_folder, inside, safetensors_header
from .manifest import MANIFEST, SHARD_DTYPES, read_manifest


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
            n, dtypes = entry["n_tokens"], SHARD_DTYPES[self.manifest["dtype"]]
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
