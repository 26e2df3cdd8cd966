"""Small modules the trainer tests train: an MLP over two token embeddings, and one over input bits."""

from __future__ import annotations

import torch
from interplab.core.train.nets import AttnOnlyBlock, HeadsAttention
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


class FixedTokens(nn.Module):
    """Fixed random token vectors (a buffer drawn from ``seed``, not trained, not saved)."""

    def __init__(self, n_tokens: int, d: int, seed: int = 0):
        super().__init__()
        table = torch.randn(n_tokens, d, generator=torch.Generator().manual_seed(seed)) / d**0.5
        self.register_buffer("table", table, persistent=False)

    def forward(self, ids_BL: torch.Tensor) -> torch.Tensor:
        return self.table[ids_BL]


class TiedReadout(nn.Module):
    """Logits against the fixed token vectors: ``x @ table.T``."""

    def __init__(self, tokens: FixedTokens):
        super().__init__()
        self.register_buffer("table", tokens.table, persistent=False)
        self.out_features = tokens.table.shape[0]

    def forward(self, x_BLD: torch.Tensor) -> torch.Tensor:
        return x_BLD @ self.table.T


class ICLNet(nn.Module):
    """The ICL-transition notebook's network: fixed random token vectors plus learned positions, two
    attention-only layers of two heads, logits against the token vectors."""

    def __init__(self, n_tokens: int, d: int = 32, n_heads: int = 2, n_layers: int = 2, n_positions: int = 13):
        super().__init__()
        self.n_heads, self.max_positions = n_heads, n_positions
        self.embed = FixedTokens(n_tokens, d)
        self.pos = nn.Parameter(torch.randn(n_positions, d) / d**0.5)
        self.blocks = nn.ModuleList(AttnOnlyBlock(d, n_heads) for _ in range(n_layers))
        self.unembed = TiedReadout(self.embed)

    def forward(self, ids_BL: torch.Tensor) -> torch.Tensor:
        x_BLD = self.embed(ids_BL) + self.pos[: ids_BL.shape[1]]
        for block in self.blocks:
            x_BLD = block(x_BLD)
        return self.unembed(x_BLD)


ICL_SITES = {
    "hook_embed": "embed",
    "blocks.{L}.hook_resid_post": "blocks.{L}",
    "blocks.{L}.attn.hook_z": "blocks.{L}.attn.out:input",
    "blocks.{L}.hook_attn_out": "blocks.{L}.attn",
    "unembed": "unembed",
}


class MLPAttnBlock(nn.Module):
    """Pre-norm block: attention, then a ReLU MLP of twice the width."""

    def __init__(self, d: int, n_heads: int):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), HeadsAttention(d, n_heads)
        self.ln2, self.up, self.act, self.down = nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d)

    def forward(self, x_BLD: torch.Tensor) -> torch.Tensor:
        x_BLD = x_BLD + self.attn(self.ln1(x_BLD))
        return x_BLD + self.down(self.act(self.up(self.ln2(x_BLD))))


class GraphNet(nn.Module):
    """The graph-search notebook's transformer: token and position embeddings, pre-norm blocks, final norm."""

    def __init__(self, n_tokens: int, d: int = 48, n_heads: int = 2, n_layers: int = 3, n_positions: int = 17):
        super().__init__()
        self.n_heads, self.max_positions = n_heads, n_positions
        self.embed = nn.Embedding(n_tokens, d)
        self.pos = nn.Parameter(torch.randn(n_positions, d) * 0.1)
        self.blocks = nn.ModuleList(MLPAttnBlock(d, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d)
        self.unembed = nn.Linear(d, n_tokens, bias=False)

    def forward(self, ids_BL: torch.Tensor) -> torch.Tensor:
        x_BLD = self.embed(ids_BL) + self.pos[: ids_BL.shape[1]]
        for block in self.blocks:
            x_BLD = block(x_BLD)
        return self.unembed(self.ln_f(x_BLD))


GRAPH_SITES = {
    "hook_embed": "embed",
    "blocks.{L}.hook_resid_post": "blocks.{L}",
    "blocks.{L}.attn.hook_z": "blocks.{L}.attn.out:input",
    "blocks.{L}.hook_attn_out": "blocks.{L}.attn",
    "blocks.{L}.mlp.hook_post": "blocks.{L}.act",
    "blocks.{L}.hook_mlp_out": "blocks.{L}.down",
    "final_norm": "ln_f",
    "unembed": "unembed",
}


class BanditNet(GraphNet):
    """The TD notebook's transformer (nbs/papers/knowledge_edit_and_td.ipynb): GraphNet's shape, two layers,
    sixty positions (twenty bandit rounds of three tokens)."""

    def __init__(self, n_tokens: int, d: int = 48, n_heads: int = 2, n_layers: int = 2, n_positions: int = 60):
        super().__init__(n_tokens, d, n_heads, n_layers, n_positions)


BANDIT_SITES = {
    "hook_embed": "embed",
    "blocks.{L}.hook_resid_post": "blocks.{L}",
    "final_norm": "ln_f",
    "unembed": "unembed",
}
