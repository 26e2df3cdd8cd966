"""A DRC-style planning agent: a stack of ConvLSTM layers run for several internal ticks on each observation.

:class:`DRC` reads one observation (token ids, one per cell of a ``size x size`` board, see
:data:`~interplab.core.agents.sokoban.CELLS`), encodes it with a convolution, then runs ``n_layers`` ConvLSTM
layers for ``ticks`` internal ticks (each layer reads the encoding and the layer below; the first reads the
top layer of the tick before), and reads the action logits [batch, 4] from the top layer's hidden state.

Each tick's hidden states pass through :class:`TickState` modules (``ticks.{T}.layers.{l}``) that show them as
[batch, cells, channels]: one position per square. :meth:`DRC.sites` names them for
``ilab.load_model(agent, sites=agent.sites(), tokenizer=CELLS)``: the block index is the tick, and
``blocks.{T}.hook_resid_post`` is the top layer's hidden state after tick ``T`` (``hook_resid_mid`` the
bottom layer's). Writing a site in a trace changes what the later ticks and the action read.

Example
-------
>>> agent = DRC(size=6, channels=16, n_layers=2, ticks=3)
>>> agent(levels_ids_BL).shape
torch.Size([B, 4])
>>> model = ilab.load_model(agent, sites=agent.sites(), tokenizer=ilab.agents.CELLS)
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from ..checks import check_int
from .sokoban import ACTIONS, AGENT, AGENT_ON_TARGET, CELLS, MAX_SIZE, MIN_SIZE, WALL

#: What the action logits read: the top layer's state on the agent's square, or all squares flattened (an MLP).
HEADS = ("agent", "flat")


class TickState(nn.Module):
    """A hidden state [batch, channels, rows, cols] shown as [batch, cells, channels] (a site's output)."""

    def forward(self, h_BCHW: torch.Tensor) -> torch.Tensor:
        """The cells as positions."""
        return h_BCHW.flatten(2).transpose(1, 2)


class Tick(nn.Module):
    """The hidden states of one tick, one :class:`TickState` per layer."""

    def __init__(self, n_layers: int):
        super().__init__()
        self.layers = nn.ModuleList(TickState() for _ in range(n_layers))


class ConvLSTM(nn.Module):
    """One ConvLSTM layer: the four gates from a 3x3 convolution of its input and hidden state."""

    def __init__(self, d_in: int, channels: int):
        super().__init__()
        self.gates = nn.Conv2d(d_in + channels, 4 * channels, 3, padding=1)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The new hidden and cell states."""
        i, f, g, o = self.gates(torch.cat([x, h], 1)).chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


class DRC(nn.Module):
    """A Deep Repeated ConvLSTM: ``n_layers`` ConvLSTM layers repeated for ``ticks`` ticks per observation.

    ``ticks`` may be changed after training (up to ``max_ticks``) to let the agent think longer. An input
    row shorter than the board fills the first cells; the rest are walls.

    >>> DRC(size=6)(torch.zeros(2, 36, dtype=torch.long)).shape
    torch.Size([2, 4])
    """

    def __init__(self, size: int = 6, channels: int = 16, n_layers: int = 2, ticks: int = 3, max_ticks: int = 8,
                 head: str = "agent", seed: int = 0):  # fmt: skip
        super().__init__()
        self.size = check_int("size", size, MIN_SIZE, MAX_SIZE)
        self.max_ticks = check_int("max_ticks", max_ticks, 1, 64)
        self.ticks = check_int("ticks", ticks, 1, self.max_ticks)
        check_int("channels", channels, 1, 1024)
        check_int("n_layers", n_layers, 1, 8)
        if head not in HEADS:
            raise ValueError(f"head={head!r} is not one of {', '.join(HEADS)}.")
        self.head_kind = head
        self.max_positions = size * size
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.embed = nn.Embedding(len(CELLS), channels)
            self.encode = nn.Conv2d(channels, channels, 3, padding=1)
            self.cells = nn.ModuleList(ConvLSTM(2 * channels, channels) for _ in range(n_layers))
            self.head: nn.Module
            if head == "agent":
                self.head = nn.Linear(channels, len(ACTIONS))
            else:
                self.head = nn.Sequential(nn.Flatten(), nn.Linear(channels * size * size, 32), nn.ReLU(),
                                          nn.Linear(32, len(ACTIONS)))  # fmt: skip
        self.thoughts = nn.ModuleList(Tick(n_layers) for _ in range(self.max_ticks))

    def sites(self) -> dict[str, str]:
        """The ``sites=`` of ``ilab.load_model``: the tick is the block; the top and bottom layers' hidden states."""
        return {"blocks": "thoughts", "blocks.{L}.hook_resid_post": f"thoughts.{{L}}.layers.{len(self.cells) - 1}",
                "blocks.{L}.hook_resid_mid": "thoughts.{L}.layers.0"}  # fmt: skip

    def _board(self, ids_BL: torch.Tensor) -> torch.Tensor:
        cells = self.size * self.size
        if ids_BL.shape[1] > cells:
            raise ValueError(f"An observation of {ids_BL.shape[1]} cells does not fit a {self.size}x{self.size} board.")
        if ids_BL.shape[1] < cells:
            pad = torch.full((ids_BL.shape[0], cells - ids_BL.shape[1]), WALL, dtype=ids_BL.dtype, device=ids_BL.device)
            ids_BL = torch.cat([ids_BL, pad], 1)
        x = self.embed(ids_BL).transpose(1, 2).reshape(len(ids_BL), -1, self.size, self.size)
        return torch.relu(self.encode(x))

    def forward(self, ids_BL: torch.Tensor) -> torch.Tensor:
        """Action logits [batch, 4] after ``self.ticks`` ticks on the observations ``ids_BL``."""
        enc = self._board(ids_BL)
        hs = [torch.zeros_like(enc) for _ in self.cells]
        cs = [torch.zeros_like(enc) for _ in self.cells]
        for t in range(self.ticks):
            below = hs[-1]
            for i, cell in enumerate(self.cells):
                h, cs[i] = cell(torch.cat([enc, below], 1), hs[i], cs[i])
                shown = cast(Tick, self.thoughts[t]).layers[i](h)
                hs[i] = below = shown.transpose(1, 2).reshape(h.shape)
        if self.head_kind == "flat":
            return self.head(hs[-1])
        here_BS = ((ids_BL == AGENT) | (ids_BL == AGENT_ON_TARGET)).float()
        top_BSC = hs[-1].flatten(2).transpose(1, 2)[:, : ids_BL.shape[1]]
        return self.head(torch.einsum("bs,bsc->bc", here_BS, top_BSC))
