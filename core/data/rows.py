"""Rows for the feature pass: texts or an activation store cut into batches of [BOS] + token pieces.

A row is at most ``seq_len`` tokens of one document; a token's position counts BOS as 0. Both
yield :class:`Batch` objects (which tokens count, where each row came from) with the model inputs
or the stored activations; :mod:`interplab.core.data.sources` turns both into activations.

Example
-------
>>> for batch, inputs in text_batches(model, docs, seq_len=128, batch_size=16, n_tokens=10_000): ...
>>> for batch, x_BLD in store_batches(store, site, batch_size=16, n_tokens=None): ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ..storage.checkpoint import TokenDigest
from .store import ActivationStore


@dataclass
class Batch:
    """One batch of rows: token ids, which positions count, and where each row came from."""

    ids_BL: torch.Tensor  # int64 token ids (pad anywhere valid is False)
    valid_BL: torch.Tensor  # bool: real token, not BOS, not padding
    shown_BL: torch.Tensor  # bool: token shown in example contexts (real, not BOS)
    doc_B: torch.Tensor  # int64 document (text or window) index of each row
    offset_B: torch.Tensor  # int64 position of column 0 within its document
    gid_base_B: torch.Tensor  # int64 unique id of column 0 (row number * row length)


def text_batches(
    model: Any,
    docs: Iterable[str],
    seq_len: int,
    batch_size: int,
    n_tokens: int | None,
    skip_rows: int = 0,
    digest: TokenDigest | None = None,
    after_skip: Callable[[], None] | None = None,
) -> Iterator[tuple[Batch, dict[str, torch.Tensor]]]:
    """Rows of at most ``seq_len`` tokens ([BOS] + a piece of one text), batched and right-padded.

    A token's position is its index in [BOS] + the text's tokens. ``n_tokens`` caps the non-BOS
    tokens over all rows, the first ``skip_rows`` rows are skipped (resume). ``digest`` is updated
    with every row's tokens (skipped or not), and ``after_skip()`` runs once the skipped rows are
    read (or the texts end first): a resume checks there that they are the rows it scanned before.
    """
    skipped = False

    def skip_done() -> None:
        nonlocal skipped
        if not skipped:
            skipped = True
            if after_skip is not None:
                after_skip()

    tok = model.tokenizer
    prefix = [tok.bos_token_id] if tok.bos_token_id is not None else []
    body = seq_len - len(prefix)
    left = n_tokens if n_tokens is not None else float("inf")
    pending: list[tuple[list[int], int, int, int]] = []
    row_index = 0

    def emit() -> tuple[Batch, dict[str, torch.Tensor]]:
        L = max(len(r[0]) for r in pending)
        ids = torch.full((len(pending), L), tok.pad_token_id or 0, dtype=torch.int64)
        real = torch.zeros(len(pending), L, dtype=torch.bool)
        for b, (row, *_rest) in enumerate(pending):
            ids[b, : len(row)] = torch.tensor(row)
            real[b, : len(row)] = True
        shown = real.clone()
        shown[:, : len(prefix)] = False
        meta = torch.tensor([r[1:] for r in pending], dtype=torch.int64)
        batch = Batch(ids, shown, shown, meta[:, 0], meta[:, 1], meta[:, 2] * seq_len)
        return batch, {"input_ids": ids, "attention_mask": real.long()}

    for doc, text in enumerate(docs):
        if left <= 0:
            break
        ids = tok(text, add_special_tokens=False)["input_ids"]
        for start in range(0, len(ids), body):
            if left <= 0:
                break
            piece = ids[start : start + min(body, left)]
            left -= len(piece)
            if row_index == skip_rows:
                skip_done()
            if digest is not None:
                digest.update(piece)
            if row_index >= skip_rows:
                pending.append((prefix + piece, doc, start, row_index))
            row_index += 1
            if len(pending) == batch_size:
                yield emit()
                pending = []
    skip_done()
    if pending:
        yield emit()


def store_batches(
    store: ActivationStore, site: str, batch_size: int, n_tokens: int | None, skip_rows: int = 0
) -> Iterator[tuple[Batch, torch.Tensor]]:
    """Windows of an activation store as rows (no BOS stored); yields batches and activations [B, L, d]."""
    skip = store.skipped_prefix
    body = store.context_size - skip
    total = store.n_tokens if n_tokens is None else min(n_tokens, store.n_tokens)
    carry_ids, carry_x = torch.empty(0, dtype=torch.int64), torch.empty(0, store.d(site))
    done, row_index = 0, 0
    rows: list[tuple[torch.Tensor, torch.Tensor, int]] = []
    for shard in range(store.n_shards):
        if done >= total:
            break
        ids = torch.cat([carry_ids, store.shard(shard, "tokens").long()])
        x = torch.cat([carry_x, store.shard(shard, site).float()])
        last = shard == store.n_shards - 1
        start = 0
        while done < total and (len(ids) - start >= body or (last and start < len(ids))):
            n = min(body, len(ids) - start, total - done)
            if row_index >= skip_rows:
                rows.append((ids[start : start + n], x[start : start + n], row_index))
            start, done, row_index = start + body, done + n, row_index + 1
            if len(rows) == batch_size:
                yield _store_batch(rows, body, skip)
                rows = []
        carry_ids, carry_x = ids[start:], x[start:]
    if rows:
        yield _store_batch(rows, body, skip)


def _store_batch(
    rows: list[tuple[torch.Tensor, torch.Tensor, int]], body: int, skip: int
) -> tuple[Batch, torch.Tensor]:
    L = max(len(r[0]) for r in rows)
    ids = torch.zeros(len(rows), L, dtype=torch.int64)
    x = torch.zeros(len(rows), L, rows[0][1].shape[1])
    valid = torch.zeros(len(rows), L, dtype=torch.bool)
    for b, (i, a, _) in enumerate(rows):
        ids[b, : len(i)], x[b, : len(i)], valid[b, : len(i)] = i, a, True
    index = torch.tensor([r[2] for r in rows], dtype=torch.int64)
    batch = Batch(ids, valid, valid, index, torch.full_like(index, skip), index * body)
    return batch, x
