"""Building blocks of the hand-written models trained in the notebooks: causal multi-head attention whose output
projection reads the heads' values (the ``attn.hook_z`` site as ``attn.out:input``), and an attention-only block.

>>> block = AttnOnlyBlock(64, n_heads=2)
>>> block(torch.randn(1, 5, 64)).shape
torch.Size([1, 5, 64])
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["AttnOnlyBlock", "HeadsAttention"]


class HeadsAttention(nn.Module):
    """Causal multi-head self-attention (biases with ``bias``); the output projection's input is the heads' values.

    >>> HeadsAttention(8, 2)(torch.randn(1, 3, 8)).shape
    torch.Size([1, 3, 8])
    """

    def __init__(self, d: int, n_heads: int, bias: bool = False):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d, 3 * d, bias=bias)
        self.out = nn.Linear(d, d, bias=bias)

    def forward(self, x_BLD: torch.Tensor) -> torch.Tensor:
        b, n, d = x_BLD.shape
        q, k, v = self.qkv(x_BLD).view(b, n, 3, self.n_heads, d // self.n_heads).unbind(2)
        scores_BHQK = torch.einsum("bqhe,bkhe->bhqk", q, k) / (d // self.n_heads) ** 0.5
        causal_QK = torch.ones(n, n, dtype=torch.bool, device=x_BLD.device).tril()
        pattern_BHQK = scores_BHQK.masked_fill(~causal_QK, float("-inf")).float().softmax(-1).to(v.dtype)
        return self.out(torch.einsum("bhqk,bkhe->bqhe", pattern_BHQK, v).reshape(b, n, d))


class AttnOnlyBlock(nn.Module):
    """``x + attention(x)``: no MLP, no norm.

    >>> AttnOnlyBlock(8, 2)(torch.randn(1, 3, 8)).shape
    torch.Size([1, 3, 8])
    """

    def __init__(self, d: int, n_heads: int, bias: bool = False):
        super().__init__()
        self.attn = HeadsAttention(d, n_heads, bias=bias)

    def forward(self, x_BLD: torch.Tensor) -> torch.Tensor:
        return x_BLD + self.attn(x_BLD)
