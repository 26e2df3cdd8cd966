"""Interchange interventions inside nnsight traces: the base run with a subspace of the source's activations.

Everything a trace body here touches is an envoy, ``readout``, a tensor, a torch function or
:mod:`interplab.core.model.trace_ops` (``orthonormal``, ``interchange``, ``read_site``, ``write_site``), so it
runs on an NDIF server without interplab. The source activations are read once, without gradients,
before training (they do not depend on the rotation); each step then runs only the base prompts.
Training computes the loss *and its gradient* inside the trace (``torch.autograd.grad``), so only
tensors come back, remotely too.

Example
-------
>>> prep = prepare(model, pairs, "blocks.6.hook_resid_post", [-1])
>>> logits_NV = run(model, prep, torch.arange(len(pairs)), Q_DK)          # intervened, last position
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nnsight
import torch

from ..memory.frozen import frozen_weights
from ..model.model import position_columns
from ..model.trace_ops import interchange, orthonormal, read_site, write_site
from .pairs import CounterfactualPairs, label_ids

if TYPE_CHECKING:
    from ..model.model import Model


@dataclass
class Prepared:
    """Checked, tokenised pairs with the source activations at the intervened positions."""

    site: str
    positions: list[int]
    base_ids: list[torch.Tensor]  # each base prompt's token ids
    source_NPD: torch.Tensor  # source activations at the positions, the model's dtype
    labels_N: torch.Tensor
    base_labels_N: torch.Tensor | None

    def __len__(self) -> int:
        return len(self.base_ids)


def check_positions(model: Model, texts: Sequence[str], positions: int | Sequence[int], what: str) -> list[int]:
    """Positions as a list of ints that fall inside every one of ``texts`` (tokenisation only, no forward)."""
    items = [positions] if isinstance(positions, int) and not isinstance(positions, bool) else positions
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence) or not items:
        raise TypeError(f"positions must be a token index (-1: each prompt's last) or a non-empty list of them, "
                        f"got {positions!r}.")  # fmt: skip
    out = []
    for p in items:
        if isinstance(p, bool) or not isinstance(p, int):
            raise TypeError(f"positions must be token indices, got {p!r} in {positions!r}.")
        out.append(int(p))
    if len(set(out)) != len(out):
        raise ValueError(f"positions repeats an index: {out}.")
    shortest = min(int(model.to_tokens(t)["attention_mask"].sum()) for t in texts)
    for p in out:
        if not -shortest <= p < shortest:
            raise ValueError(f"Position {p} is outside a {what} prompt of {shortest} tokens.")
    return out


def source_values(model: Model, site: str, texts: list[str], positions: list[int], batch_size: int = 16
                  ) -> torch.Tensor:  # fmt: skip
    """[N, n_positions, d]: each text's activations at ``positions`` (one no-grad pass per batch, stopped early)."""
    out = []
    for start in range(0, len(texts), batch_size):
        enc = model.to_tokens(texts[start : start + batch_size])
        cols = position_columns(enc["attention_mask"].sum(1), positions)
        (values,) = model.run_sites(enc, [site])
        out.append(values[torch.arange(len(cols))[:, None], cols])
    return torch.cat(out)


def prepare(model: Model, pairs: CounterfactualPairs, site: str, positions: list[int], batch_size: int = 16
            ) -> Prepared:  # fmt: skip
    """Tokenise the base prompts, read the source activations (the only forward passes before training)."""
    base_ids = [model.to_tokens(t)["input_ids"][0] for t in pairs.base]
    src = source_values(model, site, pairs.source, positions, batch_size)
    base_labels = None if pairs.base_labels is None else label_ids(model, pairs.base_labels)
    return Prepared(site, positions, base_ids, src, label_ids(model, pairs.labels), base_labels)


def _batch(model: Model, prep: Prepared, idx: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Right-padded base tokens of the pairs ``idx`` and their lengths."""
    rows = [prep.base_ids[int(i)] for i in idx]
    width = max(len(r) for r in rows)
    pad = model.tokenizer.pad_token_id or 0
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for r, row in enumerate(rows):
        ids[r, : len(row)] = row
        mask[r, : len(row)] = 1
    return {"input_ids": ids, "attention_mask": mask}, mask.sum(1)


def run(model: Model, prep: Prepared, idx: torch.Tensor, Q_DK: torch.Tensor | None, A_DK: torch.Tensor | None = None
        ) -> Any:  # fmt: skip
    """Intervened last-position logits [n, vocab] of pairs ``idx`` (float32, no gradient).

    ``Q_DK``: orthonormal columns of the subspace swapped; None swaps the whole vector (full interchange).
    With ``A_DK`` (a leaf requiring grad) instead, returns ``(loss, grad_DK, logits)``: the cross-entropy
    towards the labels and its gradient with respect to ``A_DK`` (whose orthonormalised columns are the
    subspace), both computed inside the trace.
    """
    enc, lengths = _batch(model, prep, idx)
    cols_NP = position_columns(lengths, prep.positions)
    rows_NP = torch.arange(len(idx))[:, None].expand_as(cols_NP)
    last_N = lengths - 1
    arange_N = torch.arange(len(idx))
    device = model.device  # what the trace body mixes with the model's activations lives there too
    rows_NP, cols_NP, last_N, arange_N = (t.to(device) for t in (rows_NP, cols_NP, last_N, arange_N))
    src_NPD, labels_N = prep.source_NPD[idx].to(device), prep.labels_N[idx].to(device)
    Q_DK = None if Q_DK is None else Q_DK.to(device)
    envoy, io = model.envoy(prep.site)
    last, readout = model.block(model.n_layers - 1), model.readout
    inputs = {k: v.to(device) for k, v in enc.items()}
    training = A_DK is not None
    leaves = [] if A_DK is None else [A_DK]  # the gradient is taken with respect to the caller's leaf
    A_DK = None if A_DK is None else A_DK.to(device)
    # training: the weights frozen (under the run lock) so the backward saves only what the rotation's gradient needs
    frozen = frozen_weights(model.module) if training else contextlib.nullcontext()
    with model.lock, frozen, torch.set_grad_enabled(training), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
        x = read_site(envoy, io)
        base_NPD = x[rows_NP, cols_NP]
        if A_DK is not None:  # training
            Q = orthonormal(A_DK)
            new_NPD = interchange(base_NPD, src_NPD, Q)
        elif Q_DK is not None:
            new_NPD = interchange(base_NPD, src_NPD, Q_DK)
        else:
            new_NPD = src_NPD.to(x.dtype)
        write_site(envoy, io, x.index_put((rows_NP, cols_NP), new_NPD))
        logits = readout(read_site(last, "output")[arange_N, last_N]).float()
        if A_DK is not None:
            loss = torch.nn.functional.cross_entropy(logits, labels_N)
            (grad,) = torch.autograd.grad(loss, leaves)
            out = nnsight.save((loss.detach(), grad.detach(), logits.detach()))
        else:
            out = nnsight.save(logits)
        tracer.stop()
    if training:
        loss, grad, logits = out
        return float(loss), grad.to("cpu"), logits.to("cpu")
    return out.detach().to("cpu")


def evaluate(model: Model, prep: Prepared, idx: torch.Tensor, Q_DK: torch.Tensor | None, batch_size: int = 32
             ) -> dict[str, float]:  # fmt: skip
    """Interchange-intervention accuracy (share of pairs whose top token becomes the label) and, with base labels,
    the mean logit difference label - base label after the intervention."""
    hits, diffs = [], []
    for start in range(0, len(idx), batch_size):
        chunk = idx[start : start + batch_size]
        with torch.no_grad():
            logits = run(model, prep, chunk, Q_DK)
        labels = prep.labels_N[chunk]
        hits.append(logits.argmax(1) == labels)
        if prep.base_labels_N is not None:
            rows = torch.arange(len(chunk))
            diffs.append(logits[rows, labels] - logits[rows, prep.base_labels_N[chunk]])
    out = {"iia": float(torch.cat(hits).float().mean()) if hits else float("nan")}
    out["logit_diff"] = float(torch.cat(diffs).mean()) if diffs else float("nan")
    return out
