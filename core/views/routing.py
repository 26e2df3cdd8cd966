"""What the routing view draws: one text's experts x tokens routing weights at one MoE layer.

Example
-------
>>> data = routing_data(model, "The cat sat.", layer=0)
>>> data.weights_EL.shape        # [n_experts, tokens]: the weight each token gives each expert (0: not chosen)
(8, 5)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_int
from ..model.model import Model
from ..model.sites import site_name
from .colors import ColorScale, color_scale


@dataclass(frozen=True)
class RoutingData:
    """One text's routing at one layer: ``weights_EL`` the weight each token gives each expert (0 where the router did
    not choose it), ``logits_EL`` the router's logits, ``rank_EL`` each chosen expert's place in the token's choice
    (1 first, 0 not chosen), the tokens and the colour scale of the weights."""

    tokens: list[str]
    layer: int
    weights_EL: np.ndarray
    logits_EL: np.ndarray
    rank_EL: np.ndarray
    scale: ColorScale


def routing_data(model: Model, text: str, layer: int) -> RoutingData:
    """The routing of ``text`` at block ``layer`` of a mixture-of-experts ``model`` (see :class:`RoutingData`);
    a clear error for a dense model or a dense layer, before any forward pass."""
    if not isinstance(text, str) or not text:
        raise TypeError(f"text must be one non-empty string, got {type(text).__name__}: {text!r:.60}.")
    check_int("layer", layer, 0, max(model.n_layers - 1, 0))
    sites = [site_name(layer, k) for k in ("router_logits", "expert_ids", "expert_weights")]
    model.parse_sites(sites)  # refuses a dense model or layer, naming the layers with a router
    acts = model.collect([text], sites)
    logits_LE = acts[sites[0]][0].numpy()
    ids_LK = acts[sites[1]][0].numpy().astype(np.int64)
    chosen_LK = acts[sites[2]][0].numpy()
    n_tokens, n_experts = logits_LE.shape
    weights_LE = np.zeros((n_tokens, n_experts), np.float32)
    rank_LE = np.zeros((n_tokens, n_experts), np.int32)
    rows = np.arange(n_tokens)[:, None]
    weights_LE[rows, ids_LK] = chosen_LK
    rank_LE[rows, ids_LK] = np.arange(1, ids_LK.shape[1] + 1)[None, :]
    return RoutingData(
        tokens=list(acts.str_tokens[0]), layer=layer, weights_EL=weights_LE.T.copy(), logits_EL=logits_LE.T.copy(),
        rank_EL=rank_LE.T.copy(), scale=color_scale(weights_LE, scale="sequential", vmin=0.0),
    )  # fmt: skip
