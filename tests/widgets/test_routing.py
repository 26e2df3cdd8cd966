"""The Routing widget's data (:mod:`interplab.core.views.routing`) against the routing sites it is drawn from."""

from __future__ import annotations

import numpy as np
import pytest
from interplab.widgets._kit import payload_array

import interplab as ilab
from tests.model.test_routing import moe_layers, tiny_moe
from tests.tiny import tiny_tokenizer

TEXT = "Mary and John went to the store"


@pytest.mark.parametrize("kind", ["mixtral", "llama4_text", "deepseek_v3"])
def test_routing_grid_holds_each_chosen_experts_weight(kind):
    model = ilab.load_model(tiny_moe(kind), tokenizer=tiny_tokenizer())
    layer = moe_layers(model)[-1]
    widget = ilab.widgets.Routing(model, TEXT, layer=layer)
    sites = [f"blocks.{layer}.mlp.hook_{k}" for k in ("router_logits", "expert_ids", "expert_weights")]
    acts = model.collect([TEXT], sites)
    logits, ids, weights = (acts[s][0] for s in sites)
    grid_EL = payload_array(widget.weights)
    ranks_EL = payload_array(widget.ranks)
    assert grid_EL.shape == (widget.n_experts, len(widget.tokens)) == (logits.shape[1], logits.shape[0])
    assert widget.tokens == model.to_str_tokens(TEXT)
    np.testing.assert_allclose(payload_array(widget.logits), logits.T.numpy(), rtol=0, atol=1e-6)
    k = ids.shape[1]
    assert ((ranks_EL > 0).sum(0) == k).all() and (grid_EL[ranks_EL == 0] == 0).all()
    for t in range(len(widget.tokens)):
        for slot in range(k):
            expert = int(ids[t, slot])
            assert ranks_EL[expert, t] == slot + 1
            assert grid_EL[expert, t] == pytest.approx(float(weights[t, slot]), abs=1e-6)
    assert widget.scale["kind"] == "sequential" and widget.scale["vmax"] == pytest.approx(float(weights.max()))
