"""Cross-layer transcoders (CLTs): each layer's latents read that layer's MLP input and write to its MLP
output and to every later layer's.

Layer ``l`` has an encoder ``W_enc[l]`` [D, S] (with ``b_enc[l]``) reading ``blocks.l.hook_mlp_in``, and a
decoder ``W_dec[l]`` [S, L - l, D] whose slice ``[:, j]`` writes to ``blocks.(l + j).hook_mlp_out``. The MLP
output of layer ``m`` is predicted as ``sum_{l <= m} acts[l] @ W_dec[l][:, m - l] + b_dec[m]`` (plus
``x[m] @ W_skip[m]`` with an affine skip). The activation is circuit-tracer's: JumpReLU (``pre * (pre >
threshold)``), ReLU, or TopK (the ``k`` largest pre-activations per token and layer, ReLU'd). The decoders
hold ``S * L * (L + 1) / 2 * D`` numbers, ``(L + 1) / 2`` times a per-layer set's: :meth:`estimate_bytes`
says it before anything is allocated.

Example
-------
>>> clt = CrossLayerTranscoder(n_layers=18, d_model=640, d_sae=1024, activation="jumprelu")
>>> clt.nbytes, CrossLayerTranscoder.estimate_bytes(18, 640, 1024)
>>> acts = clt.encode(mlp_in_LPD)          # [L, P, S]
>>> pred = clt.decode(acts)                # [L, P, D]: every layer's predicted MLP output
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import torch
from torch import nn

from ..checks import check_int, check_positive_int
from ..memory.budget import check_memory

ACTIVATIONS = ("jumprelu", "relu", "topk")


def mlp_in_site(layer: int) -> str:
    return f"blocks.{layer}.hook_mlp_in"


def mlp_out_site(layer: int) -> str:
    return f"blocks.{layer}.hook_mlp_out"


class CrossLayerTranscoder(nn.Module):
    """A cross-layer transcoder over every layer of a model (see the module doc)."""

    def __init__(
        self,
        n_layers: int,
        d_model: int,
        d_sae: int,
        activation: str = "jumprelu",
        k: int | None = None,
        skip: bool = False,
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__()
        check_positive_int("n_layers", n_layers)
        check_positive_int("d_model", d_model)
        check_positive_int("d_sae", d_sae)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {list(ACTIVATIONS)}, got {activation!r}.")
        if activation == "topk":
            check_int("k of a topk cross-layer transcoder", k, 1, d_sae)
        elif k is not None:
            raise ValueError(f"k is the number of latents a topk CLT keeps; activation={activation!r} takes none.")
        check_memory(f"CrossLayerTranscoder(n_layers={n_layers}, d_model={d_model}, d_sae={d_sae})",
                     self.estimate_bytes(n_layers, d_model, d_sae, dtype, skip))  # fmt: skip
        self.n_layers, self.d_model, self.d_sae = n_layers, d_model, d_sae
        self.activation, self.k, self.skip = activation, k, skip
        self.W_enc = nn.Parameter(torch.zeros(n_layers, d_model, d_sae, dtype=dtype))
        self.b_enc = nn.Parameter(torch.zeros(n_layers, d_sae, dtype=dtype))
        self.W_dec = nn.ParameterList(
            [nn.Parameter(torch.zeros(d_sae, n_layers - layer, d_model, dtype=dtype)) for layer in range(n_layers)]
        )
        self.b_dec = nn.Parameter(torch.zeros(n_layers, d_model, dtype=dtype))
        self.log_threshold = nn.Parameter(torch.zeros(n_layers, d_sae, dtype=dtype), requires_grad=False)
        self.log_threshold.requires_grad_(activation == "jumprelu")
        self.W_skip = nn.Parameter(torch.zeros(n_layers, d_model, d_model, dtype=dtype)) if skip else None

    # ------------------------------------------------------------------ sizes
    @staticmethod
    def estimate_bytes(
        n_layers: int, d_model: int, d_sae: int, dtype: torch.dtype = torch.float32, skip: bool = False
    ) -> int:
        """The bytes of a CLT's weights: decoders ``d_sae * L(L+1)/2 * d_model`` numbers, encoders ``L * d_model *
        d_sae``, thresholds, biases and the skips.

        >>> CrossLayerTranscoder.estimate_bytes(18, 640, 1024) / 2**20   # about 488 MiB in float32
        """
        numbers = d_sae * n_layers * (n_layers + 1) // 2 * d_model + n_layers * (d_model * d_sae + 2 * d_sae + d_model)
        numbers += n_layers * d_model * d_model if skip else 0
        return numbers * torch.empty((), dtype=dtype).element_size()

    @property
    def nbytes(self) -> int:
        """The bytes this CLT's weights take."""
        return sum(p.numel() * p.element_size() for p in self.parameters())

    @property
    def decoder_bytes(self) -> int:
        """The bytes of the decoders alone (most of a CLT)."""
        return sum(w.numel() * w.element_size() for w in self.W_dec)

    @property
    def device(self) -> torch.device:
        return self.b_enc.device

    @property
    def threshold(self) -> torch.Tensor | None:
        """[L, S] JumpReLU thresholds (None for the other activations)."""
        return self.log_threshold.exp() if self.activation == "jumprelu" else None

    @torch.no_grad()
    def set_threshold(self, threshold_LS: torch.Tensor) -> None:
        self.log_threshold.copy_(threshold_LS.to(self.log_threshold).clamp_min(1e-12).log())

    @property
    def sites(self) -> list[str]:
        return [mlp_in_site(layer) for layer in range(self.n_layers)]

    @property
    def sites_out(self) -> list[str]:
        return [mlp_out_site(layer) for layer in range(self.n_layers)]

    # --------------------------------------------------------------- the rule
    def _layer(self, layer: int) -> int:
        return check_int("layer", layer, 0, self.n_layers - 1)

    def pre_acts(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        """[..., S] the pre-activations of layer ``layer``'s latents on its MLP input ``x`` [..., D]."""
        layer = self._layer(layer)
        return x.to(self.W_enc.dtype) @ self.W_enc[layer] + self.b_enc[layer]

    def activate(self, pre: torch.Tensor, layer: int) -> torch.Tensor:
        """The activation of pre-activations ``pre`` [..., S] of layer ``layer``."""
        if self.activation == "jumprelu":
            threshold = self.log_threshold[layer].exp()
            return pre * (pre > threshold)
        if self.activation == "relu":
            return pre.relu()
        vals, idx = torch.topk(pre, int(self.k or 1), dim=-1)
        return torch.zeros_like(pre).scatter_(-1, idx, vals.relu())

    def encode_layer(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        """[..., S] layer ``layer``'s latent activations on its MLP input ``x`` [..., D]."""
        return self.activate(self.pre_acts(x, layer), layer)

    def encode(self, x_L: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
        """[L, ..., S] every layer's activations from every layer's MLP input ``x_L`` [L, ..., D]."""
        self._check_layers(x_L)
        return torch.stack([self.encode_layer(x_L[layer], layer) for layer in range(self.n_layers)])

    def decode_layer(self, acts_L: torch.Tensor | list[torch.Tensor], out_layer: int) -> torch.Tensor:
        """[..., D] the predicted MLP output of ``out_layer`` from the activations of layers ``0..out_layer``
        (``acts_L`` [L, ..., S], or a list whose layers after ``out_layer`` may be missing); no skip."""
        out_layer = self._layer(out_layer)
        total = self.b_dec[out_layer]
        for layer in range(out_layer + 1):
            total = total + acts_L[layer].to(self.W_enc.dtype) @ self.W_dec[layer][:, out_layer - layer]
        return total

    def decode(self, acts_L: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
        """[L, ..., D] every layer's predicted MLP output (without the skip) from ``acts_L`` [L, ..., S]."""
        self._check_layers(acts_L)
        return torch.stack([self.decode_layer(acts_L, m) for m in range(self.n_layers)])

    def skip_out(self, x: torch.Tensor, layer: int) -> torch.Tensor | float:
        """The affine skip's part of layer ``layer``'s output (0.0 without a skip)."""
        return 0.0 if self.W_skip is None else x.to(self.W_skip.dtype) @ self.W_skip[self._layer(layer)]

    def forward(self, x_L: torch.Tensor) -> torch.Tensor:
        """[L, ..., D] every layer's predicted MLP output, skip included, from the MLP inputs ``x_L``."""
        pred = self.decode(self.encode(x_L))
        if self.W_skip is not None:
            pred = pred + torch.stack([self.skip_out(x_L[m], m) for m in range(self.n_layers)])  # type: ignore[misc]
        return pred

    def decoder_rows(self, layer: int, latents: torch.Tensor) -> torch.Tensor:
        """[n, L - layer, D] what each latent of ``layer`` writes per unit activation to layers ``layer..L-1``."""
        return self.W_dec[self._layer(layer)][latents]

    def _check_layers(self, xs: torch.Tensor | list[torch.Tensor]) -> None:
        if len(xs) != self.n_layers:
            raise ValueError(f"This CLT has {self.n_layers} layers; got {len(xs)} along the first axis.")

    # ----------------------------------------------------------------- checks
    def init_weights(self, seed: int = 0, threshold: float = 0.001) -> None:
        """Seeded initial weights: decoders of small random rows, encoders their transposes, zero biases."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            scale = 1.0 / math.sqrt(self.d_model * self.n_layers)
            for layer, w in enumerate(self.W_dec):
                w.copy_(torch.randn(w.shape, generator=g) * scale)
                self.W_enc[layer].copy_(w[:, 0].T * math.sqrt(self.n_layers - layer))
            self.b_enc.zero_(), self.b_dec.zero_()
            self.log_threshold.fill_(math.log(threshold))
            if self.W_skip is not None:
                self.W_skip.zero_()

    def check_fits(self, model: Any) -> None:
        """A clear error unless ``model`` has this CLT's layers and widths (before any work)."""
        if model.n_layers != self.n_layers:
            raise ValueError(f"This cross-layer transcoder has {self.n_layers} layers and {model.name!r} has "
                             f"{model.n_layers}: a CLT covers every layer of the model it was made for.")  # fmt: skip
        for site in (mlp_in_site(0), mlp_out_site(0)):
            if site not in model.sites:
                raise ValueError(f"This CLT reads blocks.L.hook_mlp_in and writes blocks.L.hook_mlp_out; "
                                 f"{model.name!r} has no {site!r}.")  # fmt: skip
            if model.site_dim(site) != self.d_model:
                raise ValueError(f"This CLT has d_model={self.d_model}, but {site} of {model.name!r} has width "
                                 f"{model.site_dim(site)}.")  # fmt: skip

    def fingerprint(self) -> str:
        """A stable id of the weights (16 hex digits)."""
        h = hashlib.sha256(f"clt|{self.n_layers}|{self.d_model}|{self.d_sae}|{self.activation}|{self.k}".encode())
        tensors = [self.W_enc, self.b_enc, *self.W_dec, self.b_dec]
        tensors += [self.log_threshold] if self.activation == "jumprelu" else []
        tensors += [self.W_skip] if self.W_skip is not None else []
        for t in tensors:
            h.update(t.detach().float().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()[:16]

    def __repr__(self) -> str:
        k = f", k={self.k}" if self.k else ""
        skip = ", skip=True" if self.skip else ""
        return (f"CrossLayerTranscoder(n_layers={self.n_layers}, d_model={self.d_model}, d_sae={self.d_sae}, "
                f"activation={self.activation!r}{k}{skip}, {self.nbytes / 2**20:.1f} MiB)")  # fmt: skip
