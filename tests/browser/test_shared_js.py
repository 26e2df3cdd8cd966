"""The shared widget helpers (widgets/js/shared/) in a real Chromium page, without JupyterLab."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from interplab.core.views.colors import color_scale
from interplab.widgets._bundle import link
from interplab.widgets._kit import HERE
from playwright.sync_api import Page

pytestmark = pytest.mark.browser


@pytest.fixture
def shared(page: Page) -> Page:
    page.set_content("<html><body></body></html>")
    page.add_style_tag(content=(HERE / "shared" / "shared.css").read_text())
    page.add_script_tag(content=link(Path(__file__).parent / "shared_globals.js"))  # the helpers as globals
    return page


def test_legend_runs_from_its_vmin(shared: Page):
    """ilabLegend labels and colours from the vmin it is given, not from -vmax or 0."""
    labels, kind = shared.evaluate(
        """() => {
          const box = ilabLegend(-2, 5, true);
          return [[...box.querySelectorAll('.ilab-legend-label')].map(e => e.textContent), box.dataset.kind];
        }"""
    )
    assert labels == ["-2", "5"] and kind == "diverging"
    sequential = shared.evaluate(
        "() => [...ilabLegend(1, 4, false).querySelectorAll('.ilab-legend-label')].map(e => e.textContent)"
    )
    assert sequential == ["1", "4"]


def test_numbers_keep_their_trailing_zeros(shared: Page):
    """ilabFmt stripped zeros before the decimal point: -690 showed as "-69", 950 as "95", -900 as "-9"."""
    shown = shared.evaluate(
        "() => [-690, 950, -900, 100, 1234, 10, 0.5, 0.25, 1.5, 2.0, 0.001, -0.0012, 123456, 0].map(ilabFmt)"
    )
    assert shown == ["-690", "950", "-900", "100", "1234", "10", "0.5", "0.25", "1.5", "2", "0.001", "-0.0012",
                     "1.23e+5", "0"]  # fmt: skip
    signed = shared.evaluate("() => [0.5234, -1.3, 0, 12.345].map((x) => ilabFmtSigned(x))")
    assert signed == ["+0.52", "-1.30", "0.00", "+12.35"]


SCALES = [
    {"values": [-668.0, -400.0, -57.0]},
    {"values": [-668.0, -400.0, -57.0], "scale": "diverging", "center": -400.0},
    {"values": [0.0, 3.0, 1.0]},
    {"values": [-1.0, 10.0], "scale": "diverging", "vmin": -1.0},
    {"values": [0.0, 100.0], "vmax": 10.0},
]


@pytest.mark.parametrize("case", SCALES)
def test_the_browser_places_values_where_python_says(shared: Page, case):
    """One scale implementation: Python resolves it (core/views/colors.py), the browser draws from it."""
    case = dict(case)
    values = case.pop("values")
    scale = color_scale(values, **case)
    probe = np.linspace(min(values) - 50, max(values) + 50, 23).tolist()
    got = shared.evaluate(
        "([s, probe]) => [probe.map((v) => ilabScalePos(v, ilabScale(s))), probe.map((v) => ilabScalePos(v, s))]",
        [scale.to_list(), probe],
    )
    want = scale.position(probe)
    np.testing.assert_allclose(got[0], want, atol=1e-9)
    np.testing.assert_allclose(
        shared.evaluate("([s, probe]) => probe.map((v) => ilabScalePos(v, s))", [scale.to_dict(), probe]), want
    )


def test_colours_are_lighter_in_a_dark_theme(shared: Page):
    """The strongest alpha follows --ilab-heat-alpha: 0.85 in light, 0.6 in dark (light text keeps its contrast)."""
    got = shared.evaluate(
        """() => {
          const out = [];
          for (const cls of ['ilab-root ilab-light', 'ilab-root ilab-dark']) {
            const root = ilabEl('div', cls);
            const span = ilabEl('span', null, 'x');
            span.style.background = ilabColor(2, {kind: 'diverging', vmin: -2, center: 0, vmax: 2});
            root.appendChild(span);
            document.body.appendChild(root);
            out.push(getComputedStyle(span).backgroundColor);
          }
          out.push(ilabColor(0.001, 1, false));
          return out;
        }"""
    )
    assert got == ["rgba(230, 85, 13, 0.85)", "rgba(230, 85, 13, 0.6)", "transparent"]


def test_tip_lands_next_to_its_anchor_inside_a_contained_box(shared: Page):
    """A fixed box inside an ancestor with `contain`/transform is placed relative to that ancestor,
    as in JupyterLab; ilabTip lives in the body and keeps the box next to the anchor, inside the viewport."""
    shared.set_viewport_size({"width": 800, "height": 600})
    boxes = shared.evaluate(
        """() => {
          const outer = ilabEl('div');
          outer.style.cssText = 'position:absolute; left:290px; top:90px; width:480px; height:480px; contain:strict;';
          const root = ilabEl('div', 'ilab-root');
          outer.appendChild(root);
          document.body.appendChild(outer);
          const out = [];
          for (const [x, y] of [[10, 10], [430, 20], [10, 470]]) {   // plain, near the right edge, near the bottom
            const a = ilabEl('span', null, 'token');
            a.style.cssText = `position:absolute; left:${x}px; top:${y}px;`;
            root.appendChild(a);
            const tip = ilabTip(root);
            tip.show(a, 'a long line of tooltip text, longer than the room on the right\\nsecond line\\nthird');
            const r = a.getBoundingClientRect(), t = tip.el.getBoundingClientRect();
            out.push({a: [r.left, r.top, r.right, r.bottom], t: [t.left, t.top, t.right, t.bottom],
                      parent: tip.el.parentElement === document.body});
            tip.remove();
          }
          return out;
        }"""
    )
    for box in boxes:
        (al, at, ar, ab), (tl, tt, tr, tb) = box["a"], box["t"]
        assert box["parent"]
        assert tl >= 0 and tt >= 0 and tr <= 800 and tb <= 600, box  # inside the viewport
        dx = max(0.0, tl - ar, al - tr)
        dy = max(0.0, tt - ab, at - tb)
        assert dx <= 40 and dy <= 40, box  # next to the anchor
    assert boxes[0]["t"][1] == pytest.approx(boxes[0]["a"][3] + 4, abs=1)  # below the token by default
    assert boxes[2]["t"][3] == pytest.approx(boxes[2]["a"][1] - 4, abs=1)  # above it when there is no room below
