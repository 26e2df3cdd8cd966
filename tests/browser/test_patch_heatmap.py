"""The PatchHeatmap widget in exported HTML: the image on a canvas, one tinted cell per patch, the hover box naming
the patch and its value, a title that looks like markup kept as text."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.export.test_export import export_code

from .conftest import REPO_ROOT
from .test_export_html import Offline, offline  # noqa: F401  (the `offline` fixture)

pytestmark = pytest.mark.browser

SETUP = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT)!r})
import torch
import interplab as ilab
from tests.vision.tiny_vision import images, tiny_clip
model = ilab.load_model(tiny_clip())
pixels = images(1)
acts = model.collect(pixels, sites="blocks.1.mlp.hook_post")["blocks.1.mlp.hook_post"]
values = torch.zeros(16)
values[5] = 3.0
ilab.widgets.PatchHeatmap(pixels[0], values, title="<b>neuron 7</b>")
"""


def test_exported_patch_heatmap_renders_offline(page: Page, offline: Offline, tmp_path: Path):  # noqa: F811
    html = export_code(tmp_path, "patch_heatmap", SETUP)
    page.goto(html.as_uri())
    root = page.locator(".ilab-patch-heatmap").first
    cells = root.locator(".ilab-patch-cell")
    expect(cells.first).to_be_visible(timeout=30_000)
    expect(cells).to_have_count(16)
    expect(root.locator(".ilab-patch-title")).to_have_text("<b>neuron 7</b>")
    assert root.locator("b").count() == 0
    drawn = root.locator("canvas.ilab-patch-image").evaluate(
        "c => Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data).some(v => v > 0)"
    )
    assert drawn
    hot, cold = cells.nth(5), cells.nth(0)
    assert hot.evaluate("e => getComputedStyle(e).backgroundColor") != "rgba(0, 0, 0, 0)"
    assert cold.evaluate("e => getComputedStyle(e).backgroundColor") == "rgba(0, 0, 0, 0)"
    hot.hover()
    tip = page.locator(".ilab-patch-tip:visible")
    expect(tip).to_contain_text("patch 5 (row 1, column 1)")
    expect(tip).to_contain_text("value 3")
    assert not offline.blocked and not offline.errors, offline.problems()
