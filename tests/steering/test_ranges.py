"""Slider ranges scaled to the site (``core/steering/ranges.py``) and the SteeringPanel's default range."""

from __future__ import annotations

import pytest
import torch
from interplab.core.steering.ranges import REACH, REFERENCE_TEXT, nice, scaled_range, typical_norm

import interplab as ilab
from tests.tiny import tiny_model

SITE = "blocks.1.hook_resid_pre"


def test_typical_norm_is_the_median_token_norm_without_the_first_token():
    model = tiny_model("gpt2")
    acts = model.collect(REFERENCE_TEXT, sites=[SITE])[SITE][0]
    want = float(acts[1:].norm(dim=-1).median())
    assert typical_norm(model, SITE) == pytest.approx(want, rel=1e-5)


def test_scaled_range_reaches_twice_the_norm_rounded_up():
    for site_norm, vec_norm in [(50.0, 193.0), (0.165, 19.6), (400.0, 1.0), (3.0, 3.0)]:
        lo, hi, step = scaled_range(site_norm, vec_norm)
        assert lo == -hi and REACH * 0.999 <= hi * vec_norm / site_norm <= REACH * 1.5  # rounded up by < 1.5x
        assert 26 <= hi / step <= 40
    assert [nice(x) for x in (7.3, 0.0123, 1.0, 101.0)] == [7.5, 0.0125, 1.0, 125.0]
    with pytest.raises(ValueError, match="site_norm and vector_norm must be > 0"):
        scaled_range(0.0, 1.0)


def test_panel_defaults_to_the_site_scaled_range_and_follows_the_site():
    model = tiny_model("gpt2")
    vec = torch.ones(model.d_model) * 20.0
    panel = ilab.widgets.SteeringPanel(model, {"big": vec, "given": vec}, site=SITE, ranges={"given": (-1, 1, 0.5)},
                                       autorun=False)  # fmt: skip
    try:
        assert panel.ranges["big"] == list(scaled_range(typical_norm(model, SITE), float(vec.norm())))
        assert panel.ranges["given"] == [-1.0, 1.0, 0.5]  # a range given is kept
        assert f"typical norm of {SITE}" in panel.range_note and "|big| = " in panel.range_note
        panel.site = "blocks.0.hook_resid_pre"
        assert panel.ranges["big"] == list(scaled_range(typical_norm(model, panel.site), float(vec.norm())))
        assert "blocks.0.hook_resid_pre" in panel.range_note
    finally:
        panel.close()
    fixed = ilab.widgets.SteeringPanel(model, {"big": vec}, site=SITE, default_range=(-8, 8, 0.5), autorun=False)
    try:
        assert fixed.ranges == {"big": [-8.0, 8.0, 0.5]} and fixed.range_note == ""
    finally:
        fixed.close()
