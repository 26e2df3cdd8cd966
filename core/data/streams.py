"""A model's activations over a corpus, read as a long job reads them: resumable at any point.

:class:`ModelStream` gives shuffled training batches (the same from any step on, so a resumed SAE training
meets the batches an uninterrupted one would); :class:`CorpusWindows` gives the windows an activation store
caches, from its ``n``-th stored token on. Both skip what a resume has already used without running the
model, feeding the skipped tokens to a :class:`~interplab.core.storage.checkpoint.TokenDigest` so the
job can check that the corpus starts with the tokens the interrupted run used.

Example
-------
>>> stream = ModelStream(model, "default", ["blocks.6.hook_resid_post"], batch_size=4096, seed=0, start_step=10)
>>> next(stream)["blocks.6.hook_resid_post"].shape      # [4096, 640]: batch 10 of the uninterrupted run
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from typing import Any

import torch

from ..storage.checkpoint import TokenDigest
from .corpus import CorpusCount, token_windows

#: A model stream shuffles tokens within buffers of at most this many batches.
BUFFER_BATCHES = 8


def buffer_sizes(n_steps: int | None = None) -> Iterator[int]:
    """Batches per shuffle buffer of a model stream: 1, 2, 4, then ``BUFFER_BATCHES``, never past ``n_steps``.

    The first buffer is one batch, so training starts after one batch of forward passes (not eight);
    the schedule depends only on ``n_steps``, so a resumed run meets the same buffers.

    >>> list(buffer_sizes(20))
    [1, 2, 4, 8, 5]
    """
    index, done = 0, 0
    while n_steps is None or done < n_steps:
        size = min(2**index, BUFFER_BATCHES)
        if n_steps is not None:
            size = min(size, n_steps - done)
        yield size
        index, done = index + 1, done + size


class ModelStream:
    """Batches straight from the model, shuffled within buffers sized by :func:`buffer_sizes`.

    The corpus's windows (BOS dropped) make one stream of tokens; each buffer takes the next
    ``size * batch_size`` of them, running only the windows they lie in (a window split between two
    buffers runs twice), and is shuffled by its own seed. So the stream from ``start_step`` on is the
    same as an uninterrupted one: the windows of earlier buffers are skipped (tokenised, not run, when
    the stream is built) and the batches already used from the current buffer are dropped.
    ``on_tokens(n)`` is called after each forward pass with the tokens it gave (for a progress bar).
    ``digest`` (a new one unless given) is fed the windows read; :meth:`record` says what it held at the
    start of the buffer that holds a step, which is what a resume there skips and checks.
    """

    def __init__(
        self, model: Any, corpus: Any, sites: list[str], batch_size: int, seed: int, start_step: int = 0,
        context_size: int = 128, n_steps: int | None = None, on_tokens: Callable[[int], None] | None = None,
        digest: TokenDigest | None = None,
    ) -> None:  # fmt: skip
        self.model, self.sites, self.batch_size, self.seed = model, sites, batch_size, seed
        self.parsed = model.parse_sites(sites)
        self.skip = 1 if model.tokenizer.bos_token_id is not None else 0
        self.body = context_size - self.skip
        self.context_size, self.on_tokens, self.start_step = context_size, on_tokens, start_step
        self.count = CorpusCount()
        self.windows = token_windows(model.tokenizer, corpus, context_size, self.count)
        self.digest = TokenDigest() if digest is None else digest
        self.last: list[int] = []  # the last window read: the next buffer may start inside it
        self.n_read = 0  # windows read so far
        self.buffers = enumerate(buffer_sizes(n_steps))
        self.sizes: dict[int, int] = {}  # buffer index -> its batches
        self.starts: dict[int, int] = {}  # buffer index -> its first step
        self.prefix: dict[int, dict[str, Any]] = {}  # buffer index -> digest of the windows read before it
        self.current = self._next_buffer()
        while self.current is not None and self.current[1] + self.current[2] <= start_step:
            self._read(*self.current[1:], keep=False)  # used before the resume: skipped without running it
            self.current = self._next_buffer()
        self._batches = self._generate()

    def _next_buffer(self) -> tuple[int, int, int] | None:
        """(index, first step, size) of the next buffer, recording where it starts and what was read before it."""
        step = sum(self.sizes.values())
        nxt = next(self.buffers, None)
        if nxt is None:
            return None
        index, size = nxt
        self.sizes[index] = size
        self.starts[index] = step
        self.prefix = {i: d for i, d in self.prefix.items() if i >= index - 1}
        self.prefix[index] = self.digest.record()
        return index, step, size

    def _read(self, step: int, size: int, keep: bool) -> tuple[list[list[int]], int, int, int]:
        """Read the windows of the buffer covering steps ``step .. step + size`` (kept only when ``keep``)."""
        first, end = step * self.batch_size, (step + size) * self.batch_size  # its range of the token stream
        w0, w1 = first // self.body, -(-end // self.body)  # the windows it lies in; w0 is n_read or n_read - 1
        chunk = [self.last] if keep and w0 < self.n_read else []
        for window in islice(self.windows, w1 - self.n_read):
            self.n_read, self.last = self.n_read + 1, window
            self.digest.update(window)
            if keep:
                chunk.append(window)
        if self.n_read < w1:
            raise ValueError(
                f"The corpus ran out: it holds {self.count.describe(self.context_size)}; training used {first:,} "
                f"tokens before this buffer, which needs {end - first:,} more. Give a larger corpus or fewer n_tokens."
            )
        return chunk, first, end, w0

    def record(self, step: int) -> dict[str, Any]:
        """The digest of the windows read before the buffer that holds batch ``step`` (what a resume there skips)."""
        index = max(i for i, start in self.starts.items() if start <= step)
        if step >= self.starts[index] + self.sizes[index]:  # it starts the next buffer: all read so far precedes it
            return self.digest.record()
        return self.prefix[index]

    def __iter__(self) -> ModelStream:
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        return next(self._batches)

    def _generate(self) -> Iterator[dict[str, torch.Tensor]]:
        while self.current is not None:
            index, step, size = self.current
            chunk, first, end, w0 = self._read(step, size, keep=True)
            parts: dict[str, list[torch.Tensor]] = {s: [] for s in self.sites}
            for start in range(0, len(chunk), 8):
                ids = torch.tensor(chunk[start : start + 8])
                values = self.model.run_sites({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, self.parsed)
                for s, v in zip(self.sites, values, strict=True):
                    parts[s].append(v[:, self.skip :].reshape(-1, v.shape[-1]).float())
                if self.on_tokens is not None:
                    self.on_tokens(len(ids) * self.body)
            offset = first - w0 * self.body
            pool = {s: torch.cat(v)[offset : offset + end - first] for s, v in parts.items()}
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
            perm = torch.randperm(end - first, generator=gen)
            for j in range(max(0, self.start_step - step), size):
                idx = perm[j * self.batch_size : (j + 1) * self.batch_size]
                yield {s: p[idx] for s, p in pool.items()}
            self.current = self._next_buffer()


class CorpusWindows:
    """A corpus's windows of ``context_size`` tokens for a model, from the ``start``-th stored token on.

    Every window stores its tokens after BOS (``body`` of them), so the stored tokens are a prefix of the
    stream: building this skips the whole windows already stored, feeding their stored tokens to
    ``digest``; the next window's first ``start % body`` are stored too (dropped from it when it runs).
    :attr:`empty` says whether any window is left; :meth:`batches` runs the rest, ``batch_size`` windows
    at a time, and gives the token ids and activations they store.
    """

    def __init__(self, model: Any, corpus: Any, context_size: int, start: int, digest: TokenDigest) -> None:
        self.model = model
        self.skip = 1 if model.tokenizer.bos_token_id is not None else 0
        self.body = context_size - self.skip
        self.count = CorpusCount()
        windows = token_windows(model.tokenizer, corpus, context_size, self.count)
        for window in itertools.islice(windows, start // self.body):
            digest.update(window[self.skip :])
        self.drop = start % self.body
        first = next(windows, None)
        if first is not None and self.drop:
            digest.update(first[self.skip : self.skip + self.drop])
        self.empty = first is None
        self.windows = itertools.chain([] if first is None else [first], windows)

    def batches(self, parsed: Sequence[Any], batch_size: int) -> Iterator[tuple[int, torch.Tensor, list[torch.Tensor]]]:
        """``batch_size`` windows at a time: how many, the token ids [T] they store and the activations [T, d] of
        each parsed site."""
        drop = self.drop
        while batch := list(itertools.islice(self.windows, batch_size)):
            ids = torch.tensor(batch)
            values = self.model.run_sites({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, parsed)
            stored = [v[:, self.skip :].reshape(-1, v.shape[-1])[drop:] for v in values]
            yield len(batch), ids[:, self.skip :].reshape(-1)[drop:], stored
            drop = 0
