"""Two hand-written modules that read token ids: an MLP language model and a tiny transformer."""

from __future__ import annotations

import torch
from interplab.core.train.nets import HeadsAttention
from torch import nn

VOCAB = 11


class MLPBlock(nn.Module):
    """A residual MLP block: x + down(act(up(x)))."""

    def __init__(self, d: int, d_mlp: int):
        super().__init__()
        self.up = nn.Linear(d, d_mlp)
        self.act = nn.ReLU()
        self.down = nn.Linear(d_mlp, d)

    def forward(self, x_BLD: torch.Tensor) -> torch.Tensor:
        return x_BLD + self.down(self.act(self.up(x_BLD)))


class MLPNet(nn.Module):
    """Token embedding, two residual MLP blocks acting on each position, an unembedding."""

    def __init__(self, d: int = 8, d_mlp: int = 16, n_layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d)
        self.layers = nn.ModuleList(MLPBlock(d, d_mlp) for _ in range(n_layers))
        self.head = nn.Linear(d, VOCAB)

    def forward(self, ids_BL: torch.Tensor) -> torch.Tensor:
        x_BLD = self.embed(ids_BL)
        for block in self.layers:
            x_BLD = block(x_BLD)
        return self.head(x_BLD)


MLP_SITES = {
    "hook_embed": "embed",
    "blocks.{L}.hook_resid_post": "layers.{L}",
    "blocks.{L}.mlp.hook_post": "layers.{L}.act",
    "blocks.{L}.hook_mlp_out": "layers.{L}.down",
    "unembed": "head",
}


class Block(nn.Module):
    """Pre-norm transformer block."""

    def __init__(self, d: int, n_heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = HeadsAttention(d, n_heads, bias=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = MLPBlock(d, 4 * d)

    def forward(self, x_BLD: torch.Tensor) -> torch.Tensor:
        x_BLD = x_BLD + self.attn(self.ln1(x_BLD))
        return x_BLD + self.mlp.down(self.mlp.act(self.mlp.up(self.ln2(x_BLD))))


class TinyTransformer(nn.Module):
    """Token and position embeddings, two pre-norm blocks, a final norm and an unembedding."""

    max_positions = 16

    def __init__(self, d: int = 16, n_heads: int = 2, n_layers: int = 2):
        super().__init__()
        self.n_heads = n_heads
        self.embed = nn.Embedding(VOCAB, d)
        self.pos = nn.Parameter(torch.randn(self.max_positions, d) * 0.1)
        self.blocks = nn.ModuleList(Block(d, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d)
        self.unembed = nn.Linear(d, VOCAB, bias=False)

    def forward(self, ids_BL: torch.Tensor) -> torch.Tensor:
        x_BLD = self.embed(ids_BL) + self.pos[: ids_BL.shape[1]]
        for block in self.blocks:
            x_BLD = block(x_BLD)
        return self.unembed(self.ln_f(x_BLD))


TRANSFORMER_SITES = {
    "blocks.{L}.hook_resid_pre": "blocks.{L}:input",
    "blocks.{L}.hook_resid_post": "blocks.{L}",
    "blocks.{L}.attn.hook_z": "blocks.{L}.attn.out:input",
    "blocks.{L}.hook_attn_out": "blocks.{L}.attn",
    "blocks.{L}.mlp.hook_post": "blocks.{L}.mlp.act",
    "blocks.{L}.hook_mlp_out": "blocks.{L}.mlp.down",
    "final_norm": "ln_f",
    "unembed": "unembed",
}
