"""A tiny byte-level language model trained on the corpus with planted sequences, each seen exactly once.

The memorization suite (``memorization.py``) needs a model whose whole training it controls: which
sequences it saw, when and how often. :func:`tiny_lm` builds a small ``transformers`` GPT-2 over bytes
(vocabulary 256), :func:`byte_stream` turns documents into one stream of UTF-8 bytes,
:func:`plant` draws random ("complex") byte sequences, and :func:`train_planted` trains on random
windows of the stream, putting each planted sequence into exactly one batch (at a step spread over
the first half of training), and records every sequence's cross-entropy at each checkpoint.

Training is a :class:`~interplab.core.storage.resumable.ResumableJob`: given a ``folder``, the weights, the
optimizer, the history and the step are saved at each checkpoint; a kill loses at
most the steps since the last one, and a resume gives the same result as an uninterrupted run
(batches are drawn from a generator seeded by ``(seed, step)``, not from a running state).

Example
-------
>>> lm = tiny_lm()
>>> stream = byte_stream(ilab.default_corpus()[:500])
>>> planted, controls = plant(64, 24, seed=0), plant(64, 24, seed=1)
>>> run = train_planted(lm, stream, planted, controls, steps=400, every=50)
>>> run.history.pivot_table(index="step", columns="planted", values="ce")
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from ..checks import check_int, check_number, check_positive_int
from ..storage.checkpoint import TokenDigest
from ..storage.resumable import ResumableJob

log = logging.getLogger(__name__)
JOB = "train_planted"
VOCAB = 256
#: Planted bytes are drawn from these: control bytes and bytes that never occur in UTF-8 text, so what
#: the model knows of them it learned from the sequences it was shown (:func:`byte_stream` drops them).
ALPHABET = bytes([*range(1, 9), *range(14, 32), 0xC0, 0xC1, *range(0xF5, 0x100)])


def tiny_lm(n_layer: int = 2, d_model: int = 128, n_head: int = 4, n_ctx: int = 64, seed: int = 0) -> torch.nn.Module:
    """A small GPT-2 over bytes (vocabulary 256), float32, freshly initialised with ``seed``.

    >>> lm = tiny_lm(n_layer=2, d_model=64)
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    for name, value in (("n_layer", n_layer), ("d_model", d_model), ("n_head", n_head), ("n_ctx", n_ctx)):
        check_positive_int(name, value)
    if d_model % n_head:
        raise ValueError(f"d_model ({d_model}) must be a multiple of n_head ({n_head}).")
    config = GPT2Config(vocab_size=VOCAB, n_positions=n_ctx, n_embd=d_model, n_layer=n_layer, n_head=n_head,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return GPT2LMHeadModel(config).float().eval()


def byte_stream(texts: Sequence[str], max_bytes: int = 2_000_000) -> torch.Tensor:
    """Documents joined by newlines as one int64 tensor of UTF-8 bytes (at most ``max_bytes``), without
    the bytes of :data:`ALPHABET` (the planted sequences' own).

    >>> byte_stream(["ab", "c"]).tolist()
    [97, 98, 10, 99]
    """
    check_positive_int("max_bytes", max_bytes)
    if isinstance(texts, str) or not texts:
        raise ValueError("texts must be a non-empty list of documents.")
    data = "\n".join(texts).encode("utf-8").translate(None, ALPHABET)[:max_bytes]
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def plant(n_sequences: int, length: int, seed: int = 0) -> torch.Tensor:
    """``n_sequences`` random byte sequences of ``length`` from :data:`ALPHABET` ([N, L], int64).

    >>> plant(3, 8, seed=0).shape
    torch.Size([3, 8])
    """
    check_positive_int("n_sequences", n_sequences)
    check_int("length", length, minimum=2)
    gen = torch.Generator().manual_seed(seed)
    alphabet = torch.tensor(list(ALPHABET))
    return alphabet[torch.randint(len(alphabet), (n_sequences, length), generator=gen)]


def check_sequences(lm: torch.nn.Module, seqs: torch.Tensor, name: str = "sequences", empty_ok: bool = False) -> None:
    """``seqs`` is an int [N, L] tensor of token ids the model can read (L within its context); else a clear error."""
    if not isinstance(seqs, torch.Tensor) or seqs.dim() != 2 or seqs.dtype not in (torch.int64, torch.int32):
        shape = tuple(seqs.shape) if isinstance(seqs, torch.Tensor) else type(seqs).__name__
        raise ValueError(f"{name} must be an integer tensor [n_sequences, length], got {shape}.")
    if seqs.shape[0] == 0 and not empty_ok:
        raise ValueError(f"{name} is empty: give at least one sequence.")
    config: Any = lm.config  # a transformers config (GPT-2 names: n_positions, vocab_size)
    n_ctx = config.n_positions
    if seqs.shape[1] < 2 or seqs.shape[1] > n_ctx:
        raise ValueError(f"{name} have length {seqs.shape[1]}; the model reads 2..{n_ctx} tokens (its context).")
    vocab = config.vocab_size
    if seqs.numel() and (int(seqs.min()) < 0 or int(seqs.max()) >= vocab):
        raise ValueError(f"{name} hold ids outside the vocabulary 0..{vocab - 1}.")


def sequence_losses(
    lm: torch.nn.Module, seqs_NL: torch.Tensor, prefix: int = 8, batch_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Per-sequence mean cross-entropy (nats) of the tokens after ``prefix``, and their greedy recall.

    Recall is the fraction of those tokens that are the model's top prediction given the true tokens
    before them (teacher forcing); a sequence is recalled verbatim by greedy decoding from its prefix
    exactly when its recall is 1.

    >>> ce_N, recall_N = sequence_losses(lm, planted, prefix=8)
    """
    check_sequences(lm, seqs_NL)
    check_int("prefix", prefix, minimum=1, maximum=seqs_NL.shape[1] - 1)
    check_positive_int("batch_size", batch_size)
    ces, recalls = [], []
    with torch.inference_mode():
        for start in range(0, seqs_NL.shape[0], batch_size):
            ids_BL = seqs_NL[start : start + batch_size].long()
            logits_BLV = lm(ids_BL).logits[:, prefix - 1 : -1].float()
            target_BL = ids_BL[:, prefix:]
            ce_BL = torch.nn.functional.cross_entropy(logits_BLV.transpose(1, 2), target_BL, reduction="none")
            ces.append(ce_BL.mean(1))
            recalls.append((logits_BLV.argmax(-1) == target_BL).float().mean(1))
    return torch.cat(ces), torch.cat(recalls)


@dataclass(repr=False)
class PlantedRun:
    """A training run with planted sequences: the model, what it saw, and every checkpoint's losses.

    ``history`` has one row per sequence and checkpoint: ``step, sequence, planted, seen_at, ce, recall``
    (``seen_at`` is the step whose batch held the sequence, -1 for controls).
    """

    lm: torch.nn.Module
    planted: torch.Tensor
    controls: torch.Tensor
    seen_at: list[int]
    history: pd.DataFrame
    prefix: int

    def __repr__(self) -> str:
        steps = sorted(self.history.step.unique())
        return (f"PlantedRun({len(self.planted)} planted, {len(self.controls)} controls, "
                f"checkpoints {steps[0]}..{steps[-1]})")  # fmt: skip


def _batch(stream: torch.Tensor, seed: int, step: int, batch_size: int, n_ctx: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(len(stream) - n_ctx, (batch_size,), generator=gen)
    return torch.stack([stream[s : s + n_ctx] for s in starts.tolist()])


def _record(lm, planted, controls, seen_at, step, prefix) -> list[dict]:
    rows = []
    for is_planted, seqs in ((True, planted), (False, controls)):
        ce_N, recall_N = sequence_losses(lm, seqs, prefix=prefix)
        for i, (ce, rec) in enumerate(zip(ce_N.tolist(), recall_N.tolist(), strict=True)):
            rows.append({"step": step, "sequence": i, "planted": is_planted,
                         "seen_at": seen_at[i] if is_planted else -1, "ce": ce, "recall": rec})  # fmt: skip
    return rows


def train_planted(
    lm: torch.nn.Module, stream: torch.Tensor, planted: torch.Tensor, controls: torch.Tensor, *,
    steps: int = 600, every: int = 50, batch_size: int = 32, lr: float = 3e-3, prefix: int = 8, seed: int = 0,
    folder: str | os.PathLike[str] | None = None, progress: bool = True,
) -> PlantedRun:  # fmt: skip
    """Train ``lm`` on random windows of ``stream``, each planted sequence in exactly one batch.

    Planted sequence ``i`` replaces the first row of the batch at step ``seen_at[i]`` (spread evenly
    over the first half of training, one sequence a step). Every ``every`` steps (and at step 0 and the
    last) the cross-entropy and recall of every planted and control sequence are recorded. With
    ``folder``, the run is resumable (see the module's docstring). Bad input fails before any step.

    >>> run = train_planted(tiny_lm(), byte_stream(docs), plant(32, 24), plant(32, 24, seed=1), steps=300)
    """
    steps, every = _check_planted(lm, stream, planted, controls, steps, every, batch_size, lr, prefix)
    config: Any = lm.config
    n_ctx = config.n_positions
    seen_at = [1 + (i * max(steps // 2, 1)) // len(planted) for i in range(len(planted))]
    where = {s: i for i, s in enumerate(seen_at)}
    opt = torch.optim.AdamW(lm.parameters(), lr=lr, weight_decay=0.0)
    stream_digest = TokenDigest()
    stream_digest.update(stream)  # the stream is known whole: its digest is an input, another stream is refused
    inputs = {"job": JOB, "config": config.to_dict().__repr__(), "stream": stream_digest.record(),
              "planted": planted.tolist(), "controls": controls.tolist(), "steps": steps, "every": every,
              "batch_size": batch_size, "lr": lr, "prefix": prefix, "seed": seed}  # fmt: skip
    job = ResumableJob(JOB, folder, inputs)
    state = job.start()
    if state is not None:
        lm.load_state_dict(state["weights"], strict=False)
        opt.load_state_dict(state["optimizer"])
        rows, done = list(state["history"]), int(state["step"])
        log.info("train_planted: resuming at step %d of %d", done, steps)
    else:
        rows, done = _record(lm.eval(), planted, controls, seen_at, 0, prefix), 0
    with job.progress(steps, done, "train_planted", progress) as bar:
        for step in range(done + 1, steps + 1):
            lm.train()
            batch_BL = _batch(stream, seed, step, batch_size, n_ctx)
            if step in where:
                seq = planted[where[step]]
                batch_BL[0, : len(seq)] = seq
                batch_BL[0, len(seq) :] = batch_BL[1, : n_ctx - len(seq)]
            loss = lm(batch_BL, labels=batch_BL).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            bar.update(1)
            if step % every == 0 or step == steps:
                rows += _record(lm.eval(), planted, controls, seen_at, step, prefix)
                if job.keeps_state:
                    weights = {n: p.detach().clone() for n, p in lm.named_parameters()}
                    job.commit({"weights": weights, "optimizer": opt.state_dict(), "history": rows, "step": step})
    lm.eval()
    return PlantedRun(lm=lm, planted=planted, controls=controls, seen_at=seen_at,
                      history=pd.DataFrame(rows), prefix=prefix)  # fmt: skip


def _check_planted(
    lm: torch.nn.Module, stream: torch.Tensor, planted: torch.Tensor, controls: torch.Tensor, steps: int, every: int,
    batch_size: int, lr: float, prefix: int,
) -> tuple[int, int]:  # fmt: skip
    """Every argument of :func:`train_planted`, checked before any step; ``steps`` and ``every`` as ints."""
    check_sequences(lm, planted, "planted")
    check_sequences(lm, controls, "controls")
    if planted.shape[1] != controls.shape[1]:
        raise ValueError(f"planted and controls must have one length, got {planted.shape[1]} and {controls.shape[1]}.")
    steps, every = check_positive_int("steps", steps), check_positive_int("every", every)
    check_positive_int("batch_size", batch_size)
    check_int("prefix", prefix, minimum=1, maximum=planted.shape[1] - 1)
    if check_number(lr, "lr") <= 0:
        raise ValueError(f"lr must be positive, got {lr!r}.")
    config: Any = lm.config
    n_ctx = config.n_positions
    if not isinstance(stream, torch.Tensor) or stream.dim() != 1 or len(stream) <= n_ctx:
        raise ValueError(f"stream must be a 1-d tensor of token ids longer than the context ({n_ctx}).")
    if len(planted) > max(steps // 2, 1):
        raise ValueError(f"{len(planted)} planted sequences need at least {2 * len(planted)} steps "
                         f"(one a step over the first half), got steps={steps}.")  # fmt: skip
    return steps, every
