"""AttentionPattern's data (core/views/attention_pattern.py) and Python side
(widgets/attention_pattern.py); the browser half is
tests/browser/test_lens_attention.py. Patterns are checked against Hugging Face's output_attentions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import traitlets
from interplab.core.views.attention_pattern import AttentionData, attention_data
from interplab.widgets._kit import payload_array

import interplab as ilab
from tests.tiny import TEXTS, tiny_hf_model


def hf_patterns(family: str, model, text: str) -> torch.Tensor:
    hf = tiny_hf_model(family)
    hf.set_attn_implementation("eager")
    with torch.no_grad():
        return torch.stack(hf(**model.to_tokens(text), output_attentions=True).attentions)[:, 0]  # [L, H, P, P]


def test_attention_data_equals_hf(model, family):
    data = attention_data(model, TEXTS[1])
    ref = hf_patterns(family, model, TEXTS[1])
    assert data.layers == [0, 1] and data.tokens == model.to_str_tokens(TEXTS[1])
    assert data.patterns.dtype == np.float32 and data.patterns.shape == tuple(ref.shape)
    np.testing.assert_allclose(data.patterns, ref.numpy(), atol=1e-6)
    np.testing.assert_allclose(data.head(1, 2), ref[1, 2].numpy(), atol=1e-6)
    one = attention_data(model, TEXTS[1], layers=1)
    assert one.layers == [1] and one.patterns.shape[0] == 1
    np.testing.assert_array_equal(one.patterns[0], data.patterns[1])


def test_bad_requests_fail_before_any_work(model):
    with pytest.raises(ValueError, match=r"layer must be an integer in 0\.\.1, got 5"):
        attention_data(model, TEXTS[0], layers=[0, 5])
    with pytest.raises(ValueError, match=r"2 layers x 4 heads x 7 x 7 tokens is 392 values, over max_values=100"):
        attention_data(model, TEXTS[0], max_values=100)
    with pytest.raises(ValueError, match="not in this view"):
        attention_data(model, TEXTS[0], layers=0).head(1, 0)


def test_widget_payload_and_traits(model):
    w = ilab.widgets.AttentionPattern(model, TEXTS[0], layer=1, head=3)
    assert isinstance(w.data, AttentionData)
    patterns = payload_array(w.patterns)
    np.testing.assert_array_equal(patterns, w.data.patterns)
    assert w.tokens == model.to_str_tokens(TEXTS[0]) and w.layers == [0, 1]
    np.testing.assert_array_equal(w.pattern, w.data.patterns[1, 3])
    w.head, w.layer = 0, 0
    np.testing.assert_array_equal(w.pattern, w.data.patterns[0, 0])
    with pytest.raises(traitlets.TraitError, match="not a head"):
        w.head = 4
    with pytest.raises(traitlets.TraitError, match="not among the layers held"):
        w.layer = 7
    with pytest.raises(traitlets.TraitError, match="not a position"):
        w.selected_token = 99
    w.selected_token = 3
    assert "AttentionPattern(7 tokens" in repr(w)
    from_data = ilab.widgets.AttentionPattern(attention_data(model, TEXTS[0], layers=[1]))
    assert from_data.layer == 1 and from_data.layers == [1]
    with pytest.raises(TypeError, match="give the text"):
        ilab.widgets.AttentionPattern(model)


def test_colour_options_on_both_probability_views():
    """vmin/vmax/center/scale (the shared colour scales of core/views/colors.py) on AttentionPattern and LogitLens."""
    from tests.tiny import tiny_model

    model = tiny_model("gpt2")
    attn = ilab.widgets.AttentionPattern(model, TEXTS[0])
    assert attn.color_scale == {"kind": "sequential", "vmin": 0.0, "center": 0.0, "vmax": 1.0}
    assert attn.set_scale(vmax=0.3).vmax == 0.3 and attn.color_scale["vmax"] == 0.3
    lens = ilab.widgets.LogitLens(ilab.logit_lens(model, TEXTS[0]), vmax=0.1)
    assert lens.color_scale["vmax"] == 0.1
    assert lens.set_scale("diverging").to_dict() == {"kind": "diverging", "vmin": 0.0, "center": 0.5, "vmax": 1.0}
    with pytest.raises(ValueError, match="vmin must be below vmax"):
        ilab.widgets.AttentionPattern(model, TEXTS[0], vmin=0.5, vmax=0.2)
    with pytest.raises(ValueError, match="scale='rainbow' is not one of"):
        lens.set_scale("rainbow")
