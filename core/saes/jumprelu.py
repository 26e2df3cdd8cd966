"""JumpReLU SAE (Rajamanoharan et al.): a learned threshold per latent, trained through
straight-through estimators with a rectangle kernel, and an L0 sparsity penalty.

Example
-------
>>> sae = SAE.create("jumprelu", d_in=640, d_sae=4096, l0_coefficient=0.5)
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from .base import SAE, SAEConfig
from .kernels.dense import jumprelu_l0

INITIAL_THRESHOLD = 0.001


class JumpReLUSAE(SAE):
    arch = "jumprelu"
    saves_threshold = True
    saelens_arch = "jumprelu"
    saelens_transcoder_arch = "jumprelu_transcoder"
    defaults: ClassVar[dict[str, Any]] = {"l0_coefficient": 0.5}

    def __init__(self, cfg: SAEConfig):
        super().__init__(cfg)
        self.log_threshold = nn.Parameter(torch.full((cfg.d_sae,), math.log(INITIAL_THRESHOLD)))

    @property
    def threshold(self) -> torch.Tensor:
        return self.log_threshold.exp()

    def training_loss(
        self, x: torch.Tensor, dead: torch.Tensor | None = None, target: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        x = self._check_input(x)
        y = self.target_of(x, target)
        recon, l0, active = jumprelu_l0(
            x,
            (self.W_enc, self.b_enc, self.W_dec, self.b_dec),
            self.log_threshold,
            self.cfg.bandwidth,
            self.cfg.apply_b_dec_to_input,
        )
        recon = recon + self.skip_out(x)
        mse = (recon - y).pow(2).sum(-1).mean()
        loss = mse + (self.cfg.l0_coefficient or 0.0) * l0
        return loss, {"recon": recon, "mse": float(mse.detach()), "l0": float(l0.detach()), "fired": active.any(0)}

    @torch.no_grad()
    def set_threshold(self, threshold: torch.Tensor) -> None:
        self.log_threshold.copy_(threshold.clamp_min(1e-12).log())

    def load_extra(self, tensors: dict[str, torch.Tensor]) -> None:
        self.set_threshold(tensors["threshold"])
