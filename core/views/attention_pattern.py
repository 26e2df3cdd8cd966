"""Attention patterns shaped for display: one text's heads x query x key probabilities, layer by layer.

Example
-------
>>> data = attention_data(model, "When Mary and John went to the store, John gave a drink to", layers=[10, 11])
>>> data.patterns.shape          # [n_layers shown, heads, query, key]
>>> data.head(10, 2)             # layer 10, head 2: [query, key]
>>> without_first_key(data.head(10, 2), renormalize=True)   # the BOS column hidden (NaN), rows summing to 1
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..checks import check_int, check_texts

if TYPE_CHECKING:
    from ..model.model import Model

#: At most this many pattern values (layers x heads x query x key) in one view unless ``max_values`` says more.
MAX_VALUES = 4_000_000


@dataclass
class AttentionData:
    """Attention probabilities of one text: ``patterns[i, h, q, k]`` for layer ``layers[i]``, head ``h``."""

    tokens: list[str]
    layers: list[int]
    patterns: np.ndarray  # float32 [n_layers shown, heads, query, key]; each query's row sums to 1

    @property
    def n_heads(self) -> int:
        return int(self.patterns.shape[1])

    def head(self, layer: int, head: int) -> np.ndarray:
        """One head's [query, key] pattern."""
        if layer not in self.layers:
            raise ValueError(f"Layer {layer} is not in this view; it holds layers {self.layers}.")
        check_int("head", head, 0, self.n_heads - 1)
        return self.patterns[self.layers.index(layer), head]


def without_first_key(pattern: np.ndarray, renormalize: bool = True) -> np.ndarray:
    """A [..., query, key] pattern with key 0 (the BOS token, where most heads park attention) hidden as NaN.

    With ``renormalize`` each query's row is divided by what it gives the other keys, so it sums to 1 again;
    without it the values are as computed (a row sums to 1 - P(key 0)). AttentionPattern's "hide BOS" shows
    the same numbers.

    >>> without_first_key(np.array([[1.0, 0.0], [0.6, 0.4]], np.float32))[1].tolist()
    [nan, 1.0]
    """
    out = np.array(pattern, dtype=np.float32, copy=True)
    if renormalize:
        rest = out[..., 1:].sum(-1, keepdims=True)
        out[..., 1:] = np.where(rest > 0, out[..., 1:] / np.where(rest > 0, rest, 1), 0)
    out[..., 0] = np.nan
    return out


def attention_data(
    model: Model, text: str, layers: int | Sequence[int] | None = None, max_values: int = MAX_VALUES
) -> AttentionData:
    """The attention patterns of ``text`` at ``layers`` (all by default), from one forward pass.

    Reads ``blocks.L.attn.hook_pattern`` (eager attention is switched on for that pass only). Refuses
    more than ``max_values`` values before running anything: pick fewer layers or a shorter text.

    >>> attention_data(model, "The cat sat on the mat", layers=3).head(3, 0).sum(-1)   # rows sum to 1
    """
    (text,) = check_texts(text)
    model.check_mapped()
    if layers is None:
        layers = list(range(model.n_layers))
    elif isinstance(layers, int):
        layers = [layers]
    layers = [check_int("layer", layer, 0, model.n_layers - 1) for layer in layers]
    if not layers:
        raise ValueError("layers is empty; give at least one layer (or None for all).")
    layers = sorted(set(layers))
    enc = model.to_tokens(text)
    n = int(enc["input_ids"].shape[1])
    size = len(layers) * model.n_heads * n * n
    if size > max_values:
        raise ValueError(
            f"{len(layers)} layers x {model.n_heads} heads x {n} x {n} tokens is {size:,} values, over "
            f"max_values={max_values:,}: pick fewer layers (layers=[...]) or a shorter text."
        )
    values = model.run_sites(enc, [f"blocks.{layer}.attn.hook_pattern" for layer in layers])
    # A bfloat16 model's probabilities are rounded to 8 bits (rows sum to 1 within ~1e-2): renormalised in float32.
    rows = [v[0].float() for v in values]
    patterns = np.stack([(r / r.sum(-1, keepdim=True).clamp_min(1e-30)).numpy() for r in rows])
    return AttentionData(tokens=model.to_str_tokens(enc["input_ids"][0]), layers=layers, patterns=patterns)
