"""Standard SAE: ReLU latents with an L1 penalty; dead latents are resampled during training.

Example
-------
>>> sae = SAE.create("standard", d_in=640, d_sae=4096, l1_coefficient=5.0)
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from .base import SAE
from .kernels.dense import relu_l1


class StandardSAE(SAE):
    arch = "standard"
    saelens_arch = "standard"
    saelens_transcoder_arch = "transcoder"
    defaults: ClassVar[dict[str, Any]] = {"l1_coefficient": 2.0}
    resample_dead = True

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.pre_acts(x).relu()

    def training_loss(
        self, x: torch.Tensor, dead: torch.Tensor | None = None, target: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        x = self._check_input(x)
        y = self.target_of(x, target)
        recon, l1, active = relu_l1(x, (self.W_enc, self.b_enc, self.W_dec, self.b_dec), self.cfg.apply_b_dec_to_input)
        recon = recon + self.skip_out(x)
        mse = (recon - y).pow(2).sum(-1).mean()
        loss = mse + (self.cfg.l1_coefficient or 0.0) * l1
        return loss, {
            "recon": recon,
            "mse": float(mse.detach()),
            "l1": float(l1.detach()),
            "l0": float(active.sum()) / len(x),
            "fired": active.any(0),
        }
