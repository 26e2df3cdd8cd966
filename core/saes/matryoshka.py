"""Matryoshka BatchTopK SAE (Bussmann et al. 2025; Nabeshima): nested dictionaries.

A BatchTopK SAE whose first ``matryoshka_widths[0]`` latents must reconstruct the input on their
own, the first ``matryoshka_widths[1]`` too, and so on up to the whole dictionary: the loss sums
the reconstruction error of every prefix. Early latents learn general features, later ones
refine them, and absorption drops. Training uses BatchTopK's sparse path (only the selected
latents touch the decoder and the backward pass); each prefix decodes the selected pairs whose
latent lies inside it. At inference it is a BatchTopK SAE (one threshold), saved for SAELens as
``jumprelu`` like sae-lens's own ``MatryoshkaBatchTopKTrainingSAE``; the widths travel in interplab's
metadata.

Example
-------
>>> sae = SAE.create("matryoshka", d_in=640, d_sae=4096, k=32, matryoshka_widths=[256, 1024, 4096])
"""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

import torch

from .batchtopk import BatchTopKSAE
from .config import SAEConfig
from .kernels.sparse import decode_pairs, select_active
from .topk import AUX_COEFFICIENT


def default_widths(d_sae: int) -> list[int]:
    """Nested widths d_sae/16, d_sae/4, d_sae (fewer where d_sae is small)."""
    return sorted({max(1, d_sae // 16), max(1, d_sae // 4), d_sae})


class MatryoshkaSAE(BatchTopKSAE):
    arch = "matryoshka"
    saelens_arch = "jumprelu"
    defaults: ClassVar[dict[str, Any]] = {"k": 32}

    @classmethod
    def validate(cls, cfg: SAEConfig) -> None:
        super().validate(cfg)
        widths = cfg.matryoshka_widths
        if widths is None:
            return
        if (not isinstance(widths, (list, tuple)) or not widths
                or not all(isinstance(w, int) and not isinstance(w, bool) for w in widths)):  # fmt: skip
            raise ValueError(f"matryoshka_widths must be a list of integers, e.g. [256, 1024, {cfg.d_sae}]; "
                             f"got {widths!r}.")  # fmt: skip
        if any(a >= b for a, b in itertools.pairwise(widths)) or widths[0] < 1:
            raise ValueError(f"matryoshka_widths must be positive and strictly increasing, got {list(widths)}.")
        if widths[-1] != cfg.d_sae:
            raise ValueError(f"The last matryoshka width must be the width of the SAE ({cfg.d_sae}), got "
                             f"{list(widths)}.")  # fmt: skip

    def __init__(self, cfg: SAEConfig):
        if cfg.matryoshka_widths is None:
            cfg.matryoshka_widths = default_widths(cfg.d_sae)
        cfg.matryoshka_widths = [int(w) for w in cfg.matryoshka_widths]
        super().__init__(cfg)

    @property
    def widths(self) -> list[int]:
        widths = self.cfg.matryoshka_widths
        assert widths is not None  # __init__ fills in the defaults
        return list(widths)

    def training_loss(
        self, x: torch.Tensor, dead: torch.Tensor | None = None, target: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        if target is not None:
            raise NotImplementedError(
                "A matryoshka SAE reconstructs its input; train a transcoder (target=) with another architecture, "
                "e.g. 'batchtopk' or 'topk'."
            )
        x = self._check_input(x)
        vals, rows, cols = select_active(x, self.W_enc, self.b_enc, self._b_dec_in(), self.k, True)
        acts = vals.relu()
        recon = decode_pairs(acts, rows, cols, self.W_dec, self.b_dec, x.shape[0])
        mse = (recon - x).pow(2).sum(-1).mean()
        loss = mse
        inner = {}
        for width in self.widths[:-1]:  # every prefix reconstructs on its own
            inside = cols < width
            part = decode_pairs(acts[inside], rows[inside], cols[inside], self.W_dec, self.b_dec, x.shape[0])
            inner[width] = (part - x).pow(2).sum(-1).mean()
            loss = loss + inner[width]
        active = acts > 0
        fired = torch.zeros(self.d_sae, dtype=torch.bool, device=x.device)
        fired[cols[active]] = True
        self._after_select(acts, active)
        aux = torch.zeros((), device=x.device)
        if dead is not None and bool(dead.any()):
            aux = self._auxk(x, recon.detach(), dead)
            loss = loss + AUX_COEFFICIENT * aux
        return loss, {
            "recon": recon,
            "mse": float(mse.detach()),
            "aux": float(aux.detach()),
            "inner_mse": {w: float(v.detach()) for w, v in inner.items()},
            "l0": float(active.sum()) / len(x),
            "fired": fired,
        }
