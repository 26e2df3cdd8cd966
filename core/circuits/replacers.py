"""What replaces the MLPs in an attribution graph: one transcoder per layer, or one cross-layer transcoder.

Both answer the same questions, so the graph build names neither: each layer's encoder direction (a feature
target's reader), each layer's activations from its MLP input, what an active latent writes to its own and
(for a CLT) every later layer's MLP output, each layer's decoder bias and affine skip.

Example
-------
>>> rep = replacer(model, transcoders)          # a list of per-layer transcoders or a CrossLayerTranscoder
>>> rep.decoder_rows(3, latents_n)              # [n, K, D]: K = 1 per layer, L - 3 for a CLT
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..model.model import Model
from ..saes.base import SAE
from ..saes.clt import CrossLayerTranscoder


def check_transcoders(model: Model, transcoders: Any) -> list[SAE]:
    """One transcoder per layer, from ``blocks.L.hook_mlp_in`` to ``blocks.L.hook_mlp_out``, in layer order."""
    if isinstance(transcoders, CrossLayerTranscoder):
        raise TypeError("check_transcoders checks one transcoder per layer; a CrossLayerTranscoder is checked by "
                        "its own check_fits(model), and attribute, intervene, feature_cards, qk, qk_edge, qk_cards "
                        "and transcoder_quality take it as it is.")  # fmt: skip
    if isinstance(transcoders, Mapping):
        items = list(transcoders.values())
    elif isinstance(transcoders, Sequence) and not isinstance(transcoders, (str, bytes)):
        items = list(transcoders)
    else:
        raise TypeError(
            "transcoders must be a list or a dict of transcoders by layer, or a CrossLayerTranscoder, got "
            f"{type(transcoders).__name__}."
        )
    by_layer: dict[int, SAE] = {}
    for tc in items:
        if not isinstance(tc, SAE) or not tc.is_transcoder:
            raise TypeError(f"Every item must be a transcoder (an SAE with site_out), got {tc!r:.80}.")
        parts = tc.site.split(".")
        layer = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else -1
        if tc.site != f"blocks.{layer}.hook_mlp_in" or tc.site_out != f"blocks.{layer}.hook_mlp_out":
            raise ValueError(f"Attribution needs MLP transcoders (blocks.L.hook_mlp_in -> blocks.L.hook_mlp_out); "
                             f"{tc!r} reads {tc.site!r} and writes {tc.site_out!r}.")  # fmt: skip
        tc.check_fits(model)
        _check_device(tc, tc.W_dec.device, model)
        if layer in by_layer:
            raise ValueError(f"Two transcoders for layer {layer}.")
        by_layer[layer] = tc
    missing = sorted(set(range(model.n_layers)) - set(by_layer))
    if missing:
        raise ValueError(f"Attribution replaces every MLP: transcoders are missing for layers {missing} "
                         f"(the model has {model.n_layers}).")  # fmt: skip
    return [by_layer[layer] for layer in range(model.n_layers)]


def _check_device(what: Any, device: torch.device, model: Model) -> None:
    if device != model.device:
        raise ValueError(f"{what!r:.80} is on {device} and the model on {model.device}; move it there first "
                         "(tc.to(model.device)).")  # fmt: skip


class PerLayer:
    """One transcoder per layer: each latent writes to its own layer's MLP output only."""

    def __init__(self, tcs: list[SAE]):
        self.tcs = tcs
        self.n_layers = len(tcs)

    def reader(self, layer: int) -> torch.Tensor:
        """[D, S] the direction whose dot product with the MLP input is each latent's pre-activation."""
        p = self.tcs[layer].trace_tensors()
        return (p["W_mag"] if "W_mag" in p else p["W_enc"]).float()

    def encode(self, x_PD: torch.Tensor, layer: int) -> torch.Tensor:
        return self.tcs[layer].encode(x_PD).float()

    def decoder_rows(self, layer: int, latents: torch.Tensor) -> torch.Tensor:
        return self.tcs[layer].W_dec.float()[latents][:, None]

    def b_dec(self, layer: int) -> torch.Tensor:
        return self.tcs[layer].b_dec.float()

    def skip_out(self, x_PD: torch.Tensor, layer: int) -> torch.Tensor | float:
        return self.tcs[layer].skip_out(x_PD)

    def skips(self) -> list[torch.Tensor | None]:
        return [tc.W_skip.detach() if tc.cfg.skip else None for tc in self.tcs]

    def fingerprints(self) -> list[str]:
        return [tc.fingerprint() for tc in self.tcs]


class CrossLayer:
    """A cross-layer transcoder: layer ``l``'s latents write to the MLP outputs of layers ``l..L-1``."""

    def __init__(self, clt: CrossLayerTranscoder):
        self.clt = clt
        self.n_layers = clt.n_layers

    def reader(self, layer: int) -> torch.Tensor:
        return self.clt.W_enc[layer].detach().float()

    def encode(self, x_PD: torch.Tensor, layer: int) -> torch.Tensor:
        with torch.no_grad():
            return self.clt.encode_layer(x_PD, layer).float()

    def decoder_rows(self, layer: int, latents: torch.Tensor) -> torch.Tensor:
        return self.clt.decoder_rows(layer, latents).detach().float()

    def b_dec(self, layer: int) -> torch.Tensor:
        return self.clt.b_dec[layer].detach().float()

    def skip_out(self, x_PD: torch.Tensor, layer: int) -> torch.Tensor | float:
        with torch.no_grad():
            out = self.clt.skip_out(x_PD, layer)
        return out if isinstance(out, float) else out.float()

    def skips(self) -> list[torch.Tensor | None]:
        w = self.clt.W_skip
        return [None if w is None else w[layer].detach() for layer in range(self.n_layers)]

    def fingerprints(self) -> list[str]:
        return [self.clt.fingerprint()]


Replacer = PerLayer | CrossLayer


def replacer(model: Model, transcoders: Any) -> Replacer:
    """What replaces ``model``'s MLPs: per-layer transcoders (a list or a dict by layer) or a CrossLayerTranscoder;
    a clear error when they do not fit the model."""
    if isinstance(transcoders, CrossLayerTranscoder):
        transcoders.check_fits(model)
        _check_device(transcoders, transcoders.device, model)
        return CrossLayer(transcoders)
    return PerLayer(check_transcoders(model, transcoders))
