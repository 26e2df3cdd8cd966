"""Routing: which experts a mixture-of-experts layer sends each token to, as an experts x tokens heatmap.

A cell's colour is the weight the token gives the expert (blank where the router did not choose it); hover a
cell for the token, the expert, its weight, its place among the token's choices and the router's logit.

Example
-------
>>> ilab.widgets.Routing(model, "The cat sat on the mat.", layer=1)
"""

from __future__ import annotations

from typing import Any

import traitlets
from interplab.core.model.model import Model
from interplab.core.views.routing import routing_data

from ._kit import Widget, array_payload, css, esm


class Routing(Widget):
    """The routing of one text at one MoE layer of ``model`` (:func:`interplab.core.views.routing.routing_data`)."""

    _esm = esm("routing")
    _css = css("routing")

    tokens = traitlets.List(traitlets.Unicode()).tag(sync=True)
    layer = traitlets.Int(0).tag(sync=True)
    n_experts = traitlets.Int(0).tag(sync=True)
    weights = traitlets.Dict().tag(sync=True)  # float32 [experts, tokens]
    logits = traitlets.Dict().tag(sync=True)  # float32 [experts, tokens]
    ranks = traitlets.Dict().tag(sync=True)  # int32 [experts, tokens]: 1 the token's first choice, 0 not chosen
    scale = traitlets.Dict().tag(sync=True)

    def __init__(self, model: Model, text: str, layer: int = 0, **kwargs: Any) -> None:
        data = routing_data(model, text, layer)
        super().__init__(
            tokens=data.tokens, layer=data.layer, n_experts=int(data.weights_EL.shape[0]),
            weights=array_payload(data.weights_EL, "float32"), logits=array_payload(data.logits_EL, "float32"),
            ranks=array_payload(data.rank_EL, "int32"), scale=data.scale.to_dict(), **kwargs,
        )  # fmt: skip
