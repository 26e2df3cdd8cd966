"""Where a long job's activations come from: a model over a corpus, or an on-disk store, behind one protocol.

An :class:`ActivationSource` says what it is (its model's name, the sites it can give and their widths,
an identity for a job's recorded inputs) and gives activations in the two shapes jobs read: shuffled
training batches (:meth:`~ActivationSource.training_batches`, for SAE training) and rows of documents
(:meth:`~ActivationSource.rows`, for the feature pass). A :class:`ModelSource` runs the model over the
corpus's tokens and feeds them to the job's :class:`~interplab.core.storage.checkpoint.TokenDigest`, so a
resume can check the corpus; a :class:`StoreSource` reads a store, known by its identity. Jobs take either
through :func:`activation_source` and never ask which one they hold.

Example
-------
>>> source = activation_source(model, corpus="default")          # or activation_source("acts/")
>>> source.sites_for(["blocks.6.hook_resid_post"]), source.identity()["model"]
>>> batches = source.training_batches(["blocks.6.hook_resid_post"], 4096, seed=0)
>>> next(batches)["blocks.6.hook_resid_post"].shape              # [4096, 640]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from ..storage.checkpoint import TokenDigest
from .corpus import describe_corpus, iter_texts
from .rows import Batch, store_batches, text_batches
from .store import ActivationStore, Source
from .streams import ModelStream


class TrainingBatches(Protocol):
    """Aligned training batches ``{site: [batch_size, d]}``; ``record(step)`` is what a checkpoint at ``step``
    keeps of the corpus read (None for a store: its identity is in the inputs)."""

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]: ...

    def __next__(self) -> dict[str, torch.Tensor]: ...

    def record(self, step: int) -> dict[str, Any] | None: ...


class Rows:
    """Rows of documents with their activations ``(Batch, x_BLD)``, and what a checkpoint keeps of the
    corpus read so far (:meth:`record`: the digest's record, None for a store)."""

    def __init__(self, batches: Iterator[tuple[Batch, torch.Tensor]], digest: TokenDigest | None) -> None:
        self.batches, self.digest = batches, digest

    def __iter__(self) -> Iterator[tuple[Batch, torch.Tensor]]:
        return self.batches

    def record(self) -> dict[str, Any] | None:
        return None if self.digest is None else self.digest.record()


class ActivationSource(Protocol):
    """Activations for a long job: a model over a corpus (:class:`ModelSource`) or a store (:class:`StoreSource`).

    ``model`` is the model (a store's only when given: for token strings and logits); ``n_tokens`` the tokens
    it holds (None: as many as the corpus gives); ``reads_corpus`` whether it tokenises a corpus and runs the
    model over it (a store holds its tokens). ``device`` is where its consumers compute by default: the model's
    device for a model, the CPU for a store (activations are read onto the CPU; a consumer moves them to its
    own device).
    """

    model_name: str
    model: Any
    n_tokens: int | None
    reads_corpus: bool
    device: torch.device

    def sites_for(self, wanted: Sequence[str]) -> list[str]:
        """The sites it can give a job that names ``wanted``: a store's own, a model's the ones named."""
        ...

    def site_dim(self, site: str) -> int: ...

    def identity(self) -> dict[str, Any]:
        """What a job records to recognise it: a store's identity; the model, its weights, corpus and context."""
        ...

    def corpus_identity(self) -> Any:
        """What a job that records the model itself keeps of the tokens: the corpus's description, or the
        store's identity."""
        ...

    def check_rows(self, site: str, seq_len: int) -> None:
        """Refuse rows of ``seq_len`` tokens at ``site`` it cannot give, before any work."""
        ...

    def training_batches(
        self, sites: list[str], batch_size: int, seed: int, start_step: int = 0, n_steps: int | None = None,
        digest: TokenDigest | None = None, on_tokens: Callable[[int], None] | None = None,
    ) -> TrainingBatches:  # fmt: skip
        """Shuffled batches ``{site: [batch_size, d]}`` from batch ``start_step`` on, the same as from the start."""
        ...

    def rows(
        self, site: str, seq_len: int, batch_size: int, n_tokens: int | None, skip_rows: int = 0,
        digest: TokenDigest | None = None, after_skip: Callable[[], None] | None = None,
    ) -> Rows:  # fmt: skip
        """Rows of at most ``seq_len`` tokens after the first ``skip_rows``, with activations ``x_BLD`` at ``site``."""
        ...


class ModelSource:
    """A model's activations over a corpus (any form :func:`~interplab.core.data.corpus.iter_texts` reads).

    The corpus is opened here (a missing file fails at once) and read once, by the job that uses this source.

    >>> source = ModelSource(model, "default")
    >>> batches = source.training_batches(["blocks.6.hook_resid_post"], 4096, seed=0)
    """

    reads_corpus = True
    n_tokens: int | None = None

    def __init__(self, model: Source, corpus: Any = "default", context_size: int = 128) -> None:
        self.model, self.corpus, self.context_size = model, corpus, context_size
        self.model_name = model.name
        self.docs = iter_texts(corpus)
        self.device = torch.device(getattr(model, "device", "cpu"))

    def __repr__(self) -> str:
        return f"ModelSource({self.model_name!r}, {describe_corpus(self.corpus)})"

    def sites_for(self, wanted: Sequence[str]) -> list[str]:
        if not wanted:
            raise ValueError("Reading activations from a model needs site=, e.g. 'blocks.6.hook_resid_post'.")
        return [p.name for p in self.model.parse_sites(list(wanted))]

    def site_dim(self, site: str) -> int:
        return self.model.site_dim(site)

    def identity(self) -> dict[str, Any]:
        return {"model": self.model.name, "model_sha": self.model.fingerprint(), "corpus": self.corpus_identity(),
                "context_size": self.context_size}  # fmt: skip

    def corpus_identity(self) -> str:
        return describe_corpus(self.corpus)

    def check_rows(self, site: str, seq_len: int) -> None:
        self.model.check_lengths([seq_len], "seq_len")

    def training_batches(
        self, sites: list[str], batch_size: int, seed: int, start_step: int = 0, n_steps: int | None = None,
        digest: TokenDigest | None = None, on_tokens: Callable[[int], None] | None = None,
    ) -> ModelStream:  # fmt: skip
        return ModelStream(self.model, self.docs, sites, batch_size, seed, start_step, self.context_size, n_steps,
                           on_tokens, digest)  # fmt: skip

    def rows(
        self, site: str, seq_len: int, batch_size: int, n_tokens: int | None, skip_rows: int = 0,
        digest: TokenDigest | None = None, after_skip: Callable[[], None] | None = None,
    ) -> Rows:  # fmt: skip
        digest = TokenDigest() if digest is None else digest
        batches = text_batches(self.model, self.docs, seq_len, batch_size, n_tokens, skip_rows, digest, after_skip)
        return Rows(self._run(site, batches), digest)

    def _run(
        self, site: str, batches: Iterator[tuple[Batch, dict[str, torch.Tensor]]]
    ) -> Iterator[tuple[Batch, torch.Tensor]]:
        parsed = self.model.parse_sites(site)
        for batch, inputs in batches:
            with torch.no_grad():
                x_BLD = self.model.run_sites(inputs, parsed)[0]
            yield batch, x_BLD


class StoreSource:
    """The activations of an on-disk store; ``model`` (the one it came from) only for what needs the model.

    >>> source = StoreSource(ActivationStore("acts/"))
    >>> source.sites_for([]), source.n_tokens
    """

    reads_corpus = False

    def __init__(self, store: ActivationStore, model: Any = None) -> None:
        self.store, self.model = store, model
        self.model_name = store.model_name
        self.device = torch.device("cpu")
        self.n_tokens: int | None = store.n_tokens

    def __repr__(self) -> str:
        return f"StoreSource({self.store!r})"

    def sites_for(self, wanted: Sequence[str]) -> list[str]:
        return self.store.sites

    def site_dim(self, site: str) -> int:
        return self.store.d(site)

    def identity(self) -> dict[str, Any]:
        return self.store.identity()

    def corpus_identity(self) -> dict[str, Any]:
        return self.store.identity()

    def check_rows(self, site: str, seq_len: int) -> None:
        if site not in self.store.sites:
            raise ValueError(f"This SAE reads {site!r}, which the store does not hold; it holds {self.store.sites}.")
        if self.store.n_tokens == 0:
            raise ValueError(f"The store at {str(self.store.path)!r} holds no tokens.")

    def training_batches(
        self, sites: list[str], batch_size: int, seed: int, start_step: int = 0, n_steps: int | None = None,
        digest: TokenDigest | None = None, on_tokens: Callable[[int], None] | None = None,
    ) -> StoreBatches:  # fmt: skip
        return StoreBatches(self.store, sites, batch_size, seed, start_step)

    def rows(
        self, site: str, seq_len: int, batch_size: int, n_tokens: int | None, skip_rows: int = 0,
        digest: TokenDigest | None = None, after_skip: Callable[[], None] | None = None,
    ) -> Rows:  # fmt: skip
        return Rows(store_batches(self.store, site, batch_size, n_tokens, skip_rows), None)


class StoreBatches:
    """A store's batches for every site, aligned (the same shuffle), cycling through it as often as needed,
    from batch ``start_step`` on."""

    def __init__(self, store: ActivationStore, sites: list[str], batch_size: int, seed: int, start_step: int = 0):
        self._batches = self._cycle(store, sites, batch_size, seed)
        for _ in range(start_step):
            next(self._batches)

    @staticmethod
    def _cycle(store: ActivationStore, sites: list[str], batch_size: int, seed: int) -> Iterator[dict[str, Any]]:
        epoch = 0
        while True:
            iters = [store.batches(batch_size, site=s, seed=seed + epoch) for s in sites]
            got = False
            for parts in zip(*iters):
                if len(parts[0]) < batch_size:
                    break
                got = True
                yield dict(zip(sites, parts))
            if not got:
                raise ValueError(f"The store holds {store.n_tokens} tokens, fewer than one batch of {batch_size}.")
            epoch += 1

    def __iter__(self) -> StoreBatches:
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        return next(self._batches)

    def record(self, step: int) -> None:
        return None


def activation_source(source: Any, corpus: Any = "default", *, model: Any = None) -> ActivationSource:
    """The :class:`ActivationSource` of a job's ``source`` argument: a store or its path (``model``: the model it
    came from, when the job needs one), or a model over ``corpus``.

    >>> activation_source("acts/").n_tokens
    >>> activation_source(model, ["some text", "more text"]).reads_corpus
    True
    """
    if isinstance(source, (str, os.PathLike)):
        source = ActivationStore(Path(source))
    if isinstance(source, ActivationStore):
        return StoreSource(source, model)
    if callable(getattr(type(source), "run_sites", None)):
        return ModelSource(source, corpus)
    raise TypeError(
        f"source must be an ActivationStore, a store path or a Model, got {type(source).__name__} (activations come "
        "from a Model or an ActivationStore)."
    )
