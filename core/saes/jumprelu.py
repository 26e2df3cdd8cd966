"""JumpReLU SAE (Rajamanoharan et al.): a learned threshold per latent, trained through
straight-through estimators with a rectangle kernel, and an L0 sparsity penalty.

Example
-------
>>> sae = SAE.create("jumprelu", d_in=640, d_sae=4096, l0_coefficient=0.5)
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from .base import SAE

INITIAL_THRESHOLD = 0.001


def _kernel(u: torch.Tensor) -> torch.Tensor:
    return ((u > -0.5) & (u < 0.5)).to(u.dtype)


class _JumpReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, pre: torch.Tensor, log_t: torch.Tensor, bw: float) -> torch.Tensor:  # type: ignore[override]
        t = log_t.exp()
        ctx.save_for_backward(pre, t)
        ctx.bw = bw
        return pre * (pre > t)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        pre, t = ctx.saved_tensors
        g_pre = g * (pre > t)
        g_t = (-(t / ctx.bw) * _kernel((pre - t) / ctx.bw) * g).sum(0)
        return g_pre, g_t * t, None  # chain rule through t = exp(log_t)


class _Step(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, pre: torch.Tensor, log_t: torch.Tensor, bw: float) -> torch.Tensor:  # type: ignore[override]
        t = log_t.exp()
        ctx.save_for_backward(pre, t)
        ctx.bw = bw
        return (pre > t).to(pre.dtype)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        pre, t = ctx.saved_tensors
        g_t = (-(1.0 / ctx.bw) * _kernel((pre - t) / ctx.bw) * g).sum(0)
        return None, g_t * t, None


class JumpReLUSAE(SAE):
    arch = "jumprelu"
    saelens_arch = "jumprelu"

    def __init__(self, cfg):  # type: ignore[no-untyped-def]
        super().__init__(cfg)
        self.log_threshold = nn.Parameter(torch.full((cfg.d_sae,), math.log(INITIAL_THRESHOLD)))

    @property
    def threshold(self) -> torch.Tensor:
        return self.log_threshold.exp()

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.pre_acts(x)
        return pre * (pre > self.threshold)

    def training_loss(self, x: torch.Tensor, dead: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        x = self._check_input(x)
        pre = self.pre_acts(x)
        acts = _JumpReLU.apply(pre, self.log_threshold, self.cfg.bandwidth)
        recon = self.decode(acts)
        mse = (recon - x).pow(2).sum(-1).mean()
        l0 = _Step.apply(pre, self.log_threshold, self.cfg.bandwidth).sum(-1).mean()
        loss = mse + (self.cfg.l0_coefficient or 0.0) * l0
        active = acts > 0
        return loss, {"recon": recon, "mse": float(mse.detach()), "l0": float(l0.detach()), "fired": active.any(0)}

    def extra_state(self) -> dict[str, torch.Tensor]:
        return {"threshold": self.threshold.detach().clone()}

    @torch.no_grad()
    def set_threshold(self, threshold: torch.Tensor) -> None:
        self.log_threshold.copy_(threshold.clamp_min(1e-12).log())
