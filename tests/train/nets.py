"""Small modules the trainer tests train: an MLP over two token embeddings, and one over input bits."""

from __future__ import annotations

import torch
from torch import nn


class PairMLP(nn.Module):
    """Embeds two tokens, one hidden ReLU layer over their concatenation, logits over ``n_out`` answers."""

    def __init__(self, n_tokens: int, d: int = 16, hidden: int = 32, n_out: int | None = None):
        super().__init__()
        self.embed = nn.Embedding(n_tokens, d)
        self.hidden = nn.Linear(2 * d, hidden)
        self.act = nn.ReLU()
        self.out = nn.Linear(hidden, n_out or n_tokens)

    def forward(self, ids_BL: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.hidden(self.embed(ids_BL).flatten(1))))


class BitsMLP(nn.Module):
    """Reads the token ids as bits: Linear, ReLU, Linear to two logits."""

    def __init__(self, n_inputs: int = 2, hidden: int = 4):
        super().__init__()
        self.l1 = nn.Linear(n_inputs, hidden)
        self.act = nn.ReLU()
        self.l2 = nn.Linear(hidden, 2)

    def forward(self, ids_BL: torch.Tensor) -> torch.Tensor:
        return self.l2(self.act(self.l1(ids_BL.float())))
