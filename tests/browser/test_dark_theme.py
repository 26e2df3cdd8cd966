"""Canvases follow a JupyterLab theme switch: after File > Theme > JupyterLab Dark, AttentionPattern (matrix and head
thumbnails) and CircuitGraph repaint on a dark background without any interaction, and mid values stay visible
on it (attention 0.41 in the matrix, a small normalized value in a patching grid, a routing grid's chosen experts),
checked on the pixels."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Locator, Page, expect

from .conftest import REPO_ROOT, cell_output_locator
from .test_tour import _notebook

if TYPE_CHECKING:
    from .conftest import LabServer, RunNotebook

pytestmark = pytest.mark.browser

SETUP = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT)!r})
import numpy as np
import torch
import interplab as ilab
from interplab.core.circuits import attribute
from interplab.core.views.attention_pattern import AttentionData
from tests.circuits.test_attribute import PROMPT, transcoders
from tests.model.test_routing import tiny_moe
from tests.tiny import tiny_model, tiny_tokenizer
torch.set_num_threads(1)
pattern = np.zeros((1, 2, 4, 4), dtype=np.float32)
pattern[0, :, 0, 0] = 1.0
pattern[0, :, 1, :2] = [0.5, 0.5]
pattern[0, :, 2, :3] = [0.4, 0.3, 0.3]
pattern[0, :, 3] = [0.29, 0.41, 0.30, 0.0]     # key 1: attention 0.41; key 3: 0 (background)
attn = ilab.widgets.AttentionPattern(AttentionData(["<bos>", "a", "b", "c"], [0], pattern))
values = np.array([[0.1, 1.0, 0.0]], dtype=np.float32)   # normalized = values (clean 1, corrupted 0)
grid = ilab.widgets.PatchingGrid(ilab.patching.PatchingResult(values, clean_baseline=1.0, corrupt_baseline=0.0,
                                 site="resid_pre", positions=[0, 1, 2], tokens=["a", "b", "c"]))
moe = ilab.load_model(tiny_moe("mixtral"), tokenizer=tiny_tokenizer())
routing = ilab.widgets.Routing(moe, "Mary and John went to the store", layer=1)
display(attn, grid, routing)
"""
GRAPH = """
model = tiny_model("gemma3")
graph = attribute(model, transcoders(model.d_model), PROMPT, batch_size=16, progress=False)
ilab.widgets.CircuitGraph(graph)
"""


def luminance(rgb: list[float]) -> float:
    """WCAG relative luminance of an sRGB colour (0..255 channels)."""

    def channel(v: float) -> float:
        v = v / 255
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(v) for v in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: list[float], b: list[float]) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def over(rgba: list[float], bg: list[float]) -> list[float]:
    """An rgba colour (alpha 0..1) composited over an opaque background."""
    a = rgba[3] if len(rgba) > 3 else 1.0
    return [a * c + (1 - a) * b for c, b in zip(rgba[:3], bg[:3], strict=True)]


def css_rgba(text: str) -> list[float]:
    """'rgb(1, 2, 3)' or 'rgba(1, 2, 3, 0.5)' as numbers."""
    inside = text[text.index("(") + 1 : text.index(")")]
    return [float(x) for x in inside.replace("/", ",").split(",") if x.strip()]


def pixel(canvas: Locator, x: int, y: int) -> list[float]:
    """The RGBA of a canvas pixel (canvas coordinates)."""
    return canvas.evaluate(f"c => Array.from(c.getContext('2d').getImageData({x}, {y}, 1, 1).data)")


def set_theme(page: Page, theme: str, light: bool) -> None:
    page.evaluate("(t) => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})", theme)
    page.wait_for_function(f"document.body.dataset.jpThemeLight === '{str(light).lower()}'", timeout=30_000)


def attention_pixels(out: Locator) -> dict[str, list[float]]:
    """Matrix pixels: the 0.41 cell (query 3, key 1), a zero cell (query 0, key 3); a thumbnail's corner."""
    matrix = out.locator(".ilab-attn-matrix")
    cell = int(matrix.evaluate("c => c.width")) // 4
    thumb = out.locator(".ilab-attn-thumbcanvas").first
    t_cell = int(thumb.evaluate("c => c.width")) // 4
    return {
        "mid": pixel(matrix, cell + cell // 2, 3 * cell + cell // 2),
        "bg": pixel(matrix, 3 * cell + cell // 2, cell // 2),
        "thumb_bg": pixel(thumb, 3 * t_cell + t_cell // 2, t_cell // 2),
    }


def test_canvases_repaint_on_a_theme_switch_and_keep_mid_values_visible(
    page: Page, run_notebook: RunNotebook, lab_server: LabServer, scratch_dir: Path
):
    nb = scratch_dir / "dark.ipynb"
    nb.write_text(json.dumps(_notebook(SETUP, GRAPH)))
    cells = run_notebook(page, nb.relative_to(lab_server.root).as_posix(), timeout_s=300)
    assert not any(c["has_error"] for c in cells), json.dumps(cells, indent=1)
    out = cell_output_locator(page, cells[0]["index"], cells[0]["panel_id"])
    graph_out = cell_output_locator(page, cells[1]["index"], cells[1]["panel_id"])
    expect(out.locator(".ilab-attn-thumb")).to_have_count(2, timeout=30_000)
    circuit = graph_out.locator(".ilab-circuit canvas")
    expect(circuit).to_have_attribute("data-nodes", re.compile(r"^[1-9]\d*$"), timeout=30_000)
    light = attention_pixels(out)
    assert luminance(light["bg"]) > 0.8 and luminance(pixel(circuit, 2, 2)) > 0.8  # painted for the light theme
    try:
        set_theme(page, "JupyterLab Dark", light=False)
        # no interaction: the canvases repaint by themselves
        page.wait_for_function(
            "() => { const c = document.querySelector('.ilab-attn-matrix');"
            " const d = c.getContext('2d').getImageData(c.width - 2, 2, 1, 1).data; return d[0] < 80; }",
            timeout=30_000,
        )
        dark = attention_pixels(out)
        assert luminance(dark["bg"]) < 0.05, dark
        assert luminance(dark["thumb_bg"]) < 0.05, dark
        assert contrast(dark["mid"], dark["bg"]) >= 3.0, dark  # attention 0.41 is plainly visible on black
        page.wait_for_function(
            "() => { const c = document.querySelector('.ilab-circuit canvas');"
            " return c.getContext('2d').getImageData(2, 2, 1, 1).data[0] < 80; }",
            timeout=30_000,
        )
        assert luminance(pixel(circuit, 2, 2)) < 0.05
        # a small normalized value (0.1 of a -1..1 scale) in a patching grid stays visible on the dark grid
        grid = out.locator(".ilab-pg-grid")
        bg = css_rgba(grid.evaluate("e => getComputedStyle(e).backgroundColor"))
        small = css_rgba(out.locator(".ilab-pg-cell").first.evaluate("e => getComputedStyle(e).backgroundColor"))
        assert luminance(bg) < 0.05 and contrast(over(small, bg), bg) >= 1.5, (small, bg)
        # the routing grid follows the theme: a dark grid, dark cell borders, chosen cells visible on it
        routing = out.locator(".ilab-routing-grid")
        bg = css_rgba(routing.evaluate("e => getComputedStyle(e).backgroundColor"))
        chosen = out.locator(".ilab-routing-chosen").first
        cell, border = (
            css_rgba(chosen.evaluate(f"e => getComputedStyle(e).{p}")) for p in ("backgroundColor", "borderTopColor")
        )
        assert luminance(bg) < 0.05 and luminance(border) < 0.1, (bg, border)
        assert contrast(over(cell, bg), bg) >= 1.5, (cell, bg)
    finally:
        set_theme(page, "JupyterLab Light", light=True)
    # and back: light again
    page.wait_for_function(
        "() => { const c = document.querySelector('.ilab-attn-matrix');"
        " const d = c.getContext('2d').getImageData(c.width - 2, 2, 1, 1).data; return d[0] > 200; }",
        timeout=30_000,
    )
