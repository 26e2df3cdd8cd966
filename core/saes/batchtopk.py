"""BatchTopK SAE (Bussmann et al.): the top k*B activations over a whole batch, so the average L0 is k.

At inference a single threshold, estimated during training, replaces the batch selection:
a latent fires where its pre-activation exceeds it (saved in SAELens as ``jumprelu``).

Example
-------
>>> sae = SAE.create("batchtopk", d_in=640, d_sae=4096, k=32)
"""

from __future__ import annotations

import torch

from .base import SAE
from .config import SAEConfig
from .topk import TopKSAE

THRESHOLD_RATE = 0.01


class BatchTopKSAE(TopKSAE):
    batch_topk = True
    per_latent = True
    _encode = SAE._encode  # inference: the estimated threshold, not TopK's per-token selection
    trace_tensors = SAE.trace_tensors  # the same threshold rule inside a trace
    topk_threshold: torch.Tensor  # a buffer: the estimated inference threshold
    arch = "batchtopk"
    saves_threshold = True
    saelens_arch = "jumprelu"  # saved with its threshold, SAELens reads it as JumpReLU
    saelens_transcoder_arch = "jumprelu_transcoder"

    def __init__(self, cfg: SAEConfig):
        super().__init__(cfg)
        self.register_buffer("topk_threshold", torch.zeros(()))

    @property
    def threshold(self) -> torch.Tensor:
        return self.topk_threshold.expand(self.d_sae)

    @torch.no_grad()
    def _after_select(self, acts: torch.Tensor, active: torch.Tensor) -> None:
        if not bool(active.any()):
            return
        smallest = acts[active].min()
        if float(self.topk_threshold) == 0.0:
            self.topk_threshold.copy_(smallest)
        else:
            self.topk_threshold.lerp_(smallest, THRESHOLD_RATE)

    @torch.no_grad()
    def load_extra(self, tensors: dict[str, torch.Tensor]) -> None:
        self.topk_threshold.copy_(tensors["threshold"][0])
