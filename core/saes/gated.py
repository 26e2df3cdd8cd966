"""Gated SAE (Rajamanoharan et al.): a gate decides which latents fire, a magnitude path how much.

The magnitude path shares the encoder directions, rescaled by ``exp(r_mag)``. Saved in
SAELens form: ``b_gate`` (stored here as ``b_enc``), ``b_mag`` and ``r_mag``.

Example
-------
>>> sae = SAE.create("gated", d_in=640, d_sae=4096, l1_coefficient=2.0)
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from .base import SAE
from .config import SAEConfig


class GatedSAE(SAE):
    arch = "gated"
    saelens_arch = "gated"
    defaults: ClassVar[dict[str, Any]] = {"l1_coefficient": 2.0}
    resample_dead = True

    def __init__(self, cfg: SAEConfig):
        super().__init__(cfg)
        self.r_mag = nn.Parameter(torch.zeros(cfg.d_sae))
        self.b_mag = nn.Parameter(torch.zeros(cfg.d_sae))

    def _paths(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self._check_input(x)
        if self.cfg.apply_b_dec_to_input:
            x = x - self.b_dec
        pre_gate = x @ self.W_enc + self.b_enc
        magnitude = (x @ (self.W_enc * self.r_mag.exp()) + self.b_mag).relu()
        return pre_gate, magnitude

    def trace_tensors(self) -> dict[str, Any]:
        with torch.no_grad():
            mag = {"W_mag": (self.W_enc * self.r_mag.exp()).detach().clone(), "b_mag": self.b_mag.detach().clone()}
        return {**super().trace_tensors(), **mag}

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        pre_gate, magnitude = self._paths(x)
        return (pre_gate > 0).to(magnitude.dtype) * magnitude

    def training_loss(
        self, x: torch.Tensor, dead: torch.Tensor | None = None, target: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        x = self._check_input(x)
        y = self.target_of(x, target)
        pre_gate, magnitude = self._paths(x)
        acts = (pre_gate > 0).to(magnitude.dtype) * magnitude
        recon = self.decode(acts) + self.skip_out(x)
        mse = (recon - y).pow(2).sum(-1).mean()
        gate = pre_gate.relu()
        sparsity = gate.sum(-1).mean()
        aux_recon = gate @ self.W_dec.detach() + self.b_dec.detach()
        skip = self.skip_out(x)
        if isinstance(skip, torch.Tensor):  # a transcoder with a skip connection
            aux_recon = aux_recon + skip.detach()
        aux = (aux_recon - y).pow(2).sum(-1).mean()
        loss = mse + (self.cfg.l1_coefficient or 0.0) * sparsity + aux
        active = acts > 0
        return loss, {
            "recon": recon,
            "mse": float(mse.detach()),
            "aux": float(aux.detach()),
            "l0": float(active.sum()) / len(x),
            "fired": active.any(0),
        }

    @classmethod
    def tensor_shapes(cls, d_in: int, d_sae: int) -> dict[str, tuple[int, ...]]:
        shapes = {k: v for k, v in super().tensor_shapes(d_in, d_sae).items() if k != "b_enc"}
        return {**shapes, "b_gate": (d_sae,), "b_mag": (d_sae,), "r_mag": (d_sae,)}

    def extra_state(self) -> dict[str, torch.Tensor]:
        return {
            "b_gate": self.b_enc.detach().clone(),
            "b_mag": self.b_mag.detach().clone(),
            "r_mag": self.r_mag.detach().clone(),
        }

    @torch.no_grad()
    def load_extra(self, tensors: dict[str, torch.Tensor]) -> None:
        self.b_mag.copy_(tensors["b_mag"])
        self.r_mag.copy_(tensors["r_mag"])
