"""The patch heatmap's data and widget: pixels to display bytes, values on the patch grid, the colour scale."""

from __future__ import annotations

import numpy as np
import torch
from interplab.widgets._kit import payload_array

import interplab as ilab
from tests.vision.tiny_vision import images, tiny_clip


def test_patch_data_lays_values_on_the_grid_row_by_row():
    data = ilab.vision.patch_data(images(1)[0], torch.arange(16.0), title="t")
    assert data.rgb_HW3.shape == (16, 16, 3) and data.rgb_HW3.dtype == np.uint8
    assert data.rgb_HW3.min() == 0 and data.rgb_HW3.max() == 255  # stretched for display
    assert data.values_GG[1, 0] == 4.0 and data.scale.vmax == 15.0


def test_widget_carries_a_neurons_activation_per_patch():
    model = ilab.load_model(tiny_clip())
    pixels = images(1)
    acts = model.collect(pixels, sites="blocks.1.mlp.hook_post")["blocks.1.mlp.hook_post"]
    widget = ilab.widgets.PatchHeatmap(pixels[0], acts[0, 1:, 7], title="neuron 7")
    values = payload_array(widget.values)
    assert values.shape == (4, 4)
    np.testing.assert_allclose(values.ravel(), acts[0, 1:, 7].numpy())
    assert payload_array(widget.image).shape == (16, 16, 3) and widget.selected == -1


def test_patching_row_lays_one_layers_grid_over_the_image():
    model = ilab.load_model(tiny_clip())
    clean, corrupt = images(1, seed=2), images(1, seed=3)
    r = ilab.patching.grid(model, clean, corrupt, site="resid_pre", progress=False)
    data = ilab.vision.patching_row(r, clean[0], layer=1)
    np.testing.assert_allclose(data.values_GG.ravel(), r.normalized[1, 1:], rtol=1e-6)
    assert data.values_GG.shape == (4, 4) and f"CLS {r.normalized[1, 0]:.2f}" in data.title
    raw = ilab.vision.patching_row(r, clean[0], layer=2, normalized=False)
    np.testing.assert_allclose(raw.values_GG.ravel(), r.values[2, 1:], rtol=1e-6)
    widget = ilab.widgets.PatchHeatmap(data)
    np.testing.assert_allclose(payload_array(widget.values), data.values_GG)
