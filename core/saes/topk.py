"""TopK SAE: keep the k largest pre-activations per token (Gao et al.), with AuxK for dead latents.

Training uses the sparse path of :mod:`.sparse`: a dense encoder forward, then only the
k active latents per token in the decoder and in every backward pass.

Example
-------
>>> sae = SAE.create("topk", d_in=640, d_sae=8192, k=32)
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from ..checks import check_int
from .base import SAE
from .config import SAEConfig
from .kernels.sparse import decode_pairs, select_active

AUX_COEFFICIENT = 1 / 32


class TopKSAE(SAE):
    arch = "topk"
    saelens_arch = "topk"
    defaults: ClassVar[dict[str, Any]] = {"k": 32}
    batch_topk = False

    @classmethod
    def validate(cls, cfg: SAEConfig) -> None:
        super().validate(cfg)
        check_int(f"k of a {cls.arch} SAE of width={cfg.d_sae}", cfg.k, 1, cfg.d_sae)

    @property
    def k(self) -> int:
        """Latents kept per token (``cfg.k``; :meth:`validate` refuses a config without one)."""
        assert self.cfg.k is not None
        return self.cfg.k

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.pre_acts(x)
        vals, idx = torch.topk(pre, self.k, dim=-1)
        return torch.zeros_like(pre).scatter_(-1, idx, vals.relu())

    per_latent = False

    def trace_tensors(self) -> dict[str, Any]:
        return {**super().trace_tensors(), "k": self.k}

    def _b_dec_in(self) -> torch.Tensor:
        return self.b_dec if self.cfg.apply_b_dec_to_input else self.W_enc.new_zeros(self.d_in)

    def training_loss(
        self, x: torch.Tensor, dead: torch.Tensor | None = None, target: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        x = self._check_input(x)
        y = self.target_of(x, target)
        vals, rows, cols = select_active(x, self.W_enc, self.b_enc, self._b_dec_in(), self.k, self.batch_topk)
        acts = vals.relu()
        recon = decode_pairs(acts, rows, cols, self.W_dec, self.b_dec, x.shape[0]) + self.skip_out(x)
        mse = (recon - y).pow(2).sum(-1).mean()
        active = acts > 0
        fired = torch.zeros(self.d_sae, dtype=torch.bool, device=x.device)
        fired[cols[active]] = True
        self._after_select(acts, active)
        loss = mse
        aux = torch.zeros((), device=x.device)
        if dead is not None and bool(dead.any()):
            aux = self._auxk(x, recon.detach(), dead) if target is None else self._auxk(x, recon.detach(), dead, y)
            loss = loss + AUX_COEFFICIENT * aux
        return loss, {
            "recon": recon,
            "mse": float(mse.detach()),
            "aux": float(aux.detach()),
            "l0": float(active.sum()) / len(x),
            "fired": fired,
        }

    def _after_select(self, acts: torch.Tensor, active: torch.Tensor) -> None:
        """Hook for BatchTopK's threshold estimate."""

    def _auxk(
        self, x: torch.Tensor, recon: torch.Tensor, dead: torch.Tensor, y: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Reconstruct the error of ``y`` (x for an SAE) with the top dead latents (normalised by its variance)."""
        err = (x if y is None else y) - recon
        dead_idx = dead.nonzero().flatten()
        k_aux = min(self.d_in // 2, len(dead_idx))
        pre = (x - self._b_dec_in()) @ self.W_enc[:, dead_idx] + self.b_enc[dead_idx]
        vals, idx = torch.topk(pre, k_aux, dim=1)
        offsets = torch.arange(0, x.shape[0] * k_aux, k_aux, device=x.device)
        err_hat = F.embedding_bag(
            dead_idx[idx].flatten(), self.W_dec, offsets, mode="sum", per_sample_weights=vals.relu().flatten()
        )
        denom = (err - err.mean(0)).pow(2).sum(-1).mean().clamp_min(1e-8)
        return (err_hat - err).pow(2).sum(-1).mean() / denom
