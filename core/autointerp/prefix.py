"""Many prompts that begin alike, run with the shared beginning computed once: its key-value cache is reused by
every prompt of a batch (a scorer asks twenty questions that differ only after ``Text:``; an explainer's prompts
share the system prompt and the instructions).

The prompts' token ids are compared, so the shared part is exact whatever the tokenizer does at the seam. Each batch
lays out ``[shared][padding][own tokens]``: the padding masked out, positions counted over real tokens only, so
every prompt sees what it would see alone. Greedy generation continues from the same cache.

Local Hugging Face causal LMs without a sliding window only (their ``cache``); :func:`takes_prefix_cache` says
whether a model is one.

Example
-------
>>> from interplab.core.autointerp.prefix import PrefixRunner
>>> runner = PrefixRunner(model, batch_size=8)
>>> ids = [model.to_tokens(t)["input_ids"][0].tolist() for t in prompts]
>>> logits_NV = runner.last_logits(ids)
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..model.model import Model


def takes_prefix_cache(model: Model) -> bool:
    """Whether ``model`` runs here as a Hugging Face causal LM taking ``past_key_values`` (not a remote one)."""
    from transformers import PreTrainedModel

    if getattr(model, "remote", False) or not isinstance(model.module, PreTrainedModel):
        return False
    # padding inside a batch would shift a sliding window, which counts cache slots, not positions
    takes_cache = "cache" in inspect.signature(model.module.forward).parameters
    return takes_cache and not getattr(model.config, "sliding_window", None)


def shared_length(ids: Sequence[Sequence[int]]) -> int:
    """The length of the token prefix every sequence shares, leaving each at least one token of its own."""
    shortest = min(len(s) for s in ids)
    n = 0
    while n < shortest - 1 and all(s[n] == ids[0][n] for s in ids):
        n += 1
    return n


class PrefixRunner:
    """Runs batches of token sequences through ``model.module`` with their shared prefix's cache computed once."""

    def __init__(self, model: Model, batch_size: int = 8) -> None:
        self.model, self.batch_size = model, batch_size
        self.device = model.device

    def _forward(
        self, ids_BS: torch.Tensor, mask_BT: torch.Tensor, positions_BS: torch.Tensor, cache: Any, keep: int = 1
    ) -> Any:
        """One pass of the module; logits of the last ``keep`` columns only."""
        return self.model.module(
            input_ids=ids_BS.to(self.device),
            attention_mask=mask_BT.to(self.device),
            position_ids=positions_BS.to(self.device),
            cache=cache,
            use_cache=True,
            logits_to_keep=keep,
        )

    def _prefix(self, prefix: Sequence[int]) -> Any:
        """The cache of ``prefix`` (batch 1), None for an empty one."""
        if not prefix:
            return None
        ids_1P = torch.tensor([list(prefix)])
        out = self._forward(ids_1P, torch.ones_like(ids_1P), torch.arange(len(prefix))[None], None)
        return out.cache

    def _start(
        self, prefix_cache: Any, n_prefix: int, rests: list[list[int]], keep: int = 1
    ) -> tuple[Any, torch.Tensor, Any]:
        """Run the prompts' own tokens (left-padded after the prefix): (logits [B, keep, V] of the last ``keep``
        columns, the mask, the cache)."""
        width = max(len(r) for r in rests)
        pad = int(self.model.tokenizer.pad_token_id or 0)
        ids_BS = torch.tensor([[pad] * (width - len(r)) + r for r in rests])
        own_BS = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rests])
        mask_BT = torch.cat([torch.ones(len(rests), n_prefix, dtype=torch.long), own_BS], 1)
        positions_BS = (n_prefix + own_BS.cumsum(1) - 1).clamp(min=n_prefix)
        cache = None
        if prefix_cache is not None:
            cache = copy.deepcopy(prefix_cache)
            cache.batch_repeat_interleave(len(rests))
        out = self._forward(ids_BS, mask_BT, positions_BS, cache, keep)
        return out.logits, mask_BT, out.cache

    def _batches(self, ids: Sequence[Sequence[int]], batch_size: int | None = None) -> list[list[int]]:
        """Batches of indices into ``ids``, shortest sequences first (alike lengths: little padding)."""
        lengths = [len(s) for s in ids]
        self.model.check_lengths(lengths, "prompt")
        order = sorted(range(len(ids)), key=lengths.__getitem__)
        size = batch_size or self.batch_size
        return [order[i : i + size] for i in range(0, len(ids), size)]

    def logits_at(
        self, ids: Sequence[Sequence[int]], positions: Sequence[Sequence[int]], batch_size: int | None = None
    ) -> list[torch.Tensor]:
        """Per sequence, float32 logits [len(positions[i]), vocab] at its ``positions[i]`` (indices into the whole
        sequence, each after the shared prefix), ``batch_size`` (default the runner's) sequences per pass."""
        n_prefix = shared_length(ids)
        n_prefix = min([n_prefix] + [min(p) for p in positions if len(p)])
        out: list[torch.Tensor] = [torch.empty(0)] * len(ids)
        with torch.no_grad(), self.model.lock:
            cache = self._prefix(ids[0][:n_prefix])
            for rows in self._batches(ids, batch_size):
                rests = [list(ids[r][n_prefix:]) for r in rows]
                # the kept columns end with every row's last token; row b's own tokens are its last len(rests[b])
                keep = max(len(rests[b]) - (min(positions[r]) - n_prefix) for b, r in enumerate(rows) if positions[r])
                logits_BSV, _, _ = self._start(cache, n_prefix, rests, max(keep, 1))
                width = logits_BSV.shape[1]
                for b, r in enumerate(rows):
                    cols = [width - len(rests[b]) + p - n_prefix for p in positions[r]]
                    out[r] = logits_BSV[b, cols].to("cpu", torch.float32)
        return out

    def last_logits(self, ids: Sequence[Sequence[int]], batch_size: int | None = None) -> torch.Tensor:
        """[N, vocab] float32 next-token logits after each whole sequence."""
        return torch.stack([row[0] for row in self.logits_at(ids, [[len(s) - 1] for s in ids], batch_size)])

    def greedy(
        self,
        ids: Sequence[Sequence[int]],
        max_new_tokens: int,
        stop_ids: Sequence[int],
        finished: Callable[[list[int]], bool] | None = None,
    ) -> list[list[int]]:
        """Each sequence's greedy continuation (up to ``max_new_tokens`` ids, ending before a ``stop_ids`` token, or
        after the token for which ``finished(continuation)`` holds)."""
        self.model.check_lengths([len(s) + max_new_tokens for s in ids], "the prompt and max_new_tokens")
        n_prefix = shared_length(ids)
        stops = torch.tensor(sorted(set(stop_ids)) or [-1])
        out: list[list[int]] = [[] for _ in ids]
        with torch.no_grad(), self.model.lock:
            prefix_cache = self._prefix(ids[0][:n_prefix])
            for rows in self._batches(ids):
                rests = [list(ids[r][n_prefix:]) for r in rows]
                logits_BSV, mask_BT, cache = self._start(prefix_cache, n_prefix, rests)
                position_B = mask_BT.sum(1) - 1
                done_B = torch.zeros(len(rows), dtype=torch.bool)
                next_B = logits_BSV[:, -1].argmax(-1).cpu()
                for step_index in range(max_new_tokens):
                    done_B |= torch.isin(next_B, stops)
                    for b, r in enumerate(rows):
                        if not done_B[b]:
                            out[r].append(int(next_B[b]))
                            done_B[b] = finished is not None and finished(out[r])
                    if bool(done_B.all()) or step_index == max_new_tokens - 1:
                        break
                    mask_BT = torch.cat([mask_BT, torch.ones(len(rows), 1, dtype=torch.long)], 1)
                    position_B = position_B + 1
                    step = self._forward(next_B[:, None], mask_BT, position_B[:, None], cache)
                    cache, next_B = step.cache, step.logits[:, -1].argmax(-1).cpu()
        return out
