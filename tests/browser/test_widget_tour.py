"""Every widget in one notebook in a real JupyterLab: where hover boxes land, and readable colours in both themes.

Inside JupyterLab an ancestor of the output sets `contain`, which moves `position: fixed` boxes (by about
290 px right and 90 px down), so tooltips are placed knowing it. Here each widget is hovered at tokens or
cells near its edges; the box must be inside the viewport and within 40 px of what is hovered. Then
JupyterLab's dark theme is switched on and every piece of text in every widget (and its hover box) must have
a contrast of at least 4.5:1 against what is behind it (WCAG AA), as in the light theme.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from playwright.sync_api import Locator, Page, expect

from .conftest import REPO_ROOT, cell_output_locator
from .test_heatmap import wait_for_python
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
from tests.tiny import TEXTS, tiny_model
torch.set_num_threads(1)
model = tiny_model("gpt2")
words = ("the cat sat on the mat and then the dog ran to the park where a bird sang " * 12).split()
docs = [["<bos>"] + [" " + w for w in words[i : i + 40]] for i in range(0, 160, 40)]
n = sum(len(d) for d in docs)
values = np.random.default_rng(0).normal(size=(n, 6)).astype(np.float32)
"""
CELLS = {
    "FeatureHeatmap": 'ilab.widgets.FeatureHeatmap(docs, values, labels=[f"feature {i}" for i in range(6)])',
    "TokenHeatmap": (
        'ilab.widgets.TokenHeatmap(docs, values[:, 0] * 100 - 300, label="direction", scale="diverging", center=-300.0)'
    ),
    "FeatureDashboard": """
sae = ilab.SAE.create("standard", d_in=model.d_model, d_sae=16, site="blocks.0.hook_resid_post")
sae.init_weights(seed=3)
dash = ilab.widgets.FeatureDashboard(sae, model, TEXTS * 4, n_tokens=200, n_top=3, context=8, progress=False)
dash
""",
    "PatchingGrid": """
metric = ilab.patching.logit_diff(" Mary", " John")
clean = "Mary and John went to the store and John gave a drink to"
corrupt = "Mary and John went to the store and Mary gave a drink to"
grid = ilab.widgets.PatchingGrid({"exact": ilab.patching.grid(model, clean, corrupt, metric, site="resid_pre"),
                                  "heads": ilab.patching.grid(model, clean, corrupt, metric, site="heads")})
grid
""",
    "SteeringPanel": """
direction = torch.randn(model.d_model, generator=torch.Generator().manual_seed(0)) * 3
vec = ilab.steering.SteeringVector("blocks.1.hook_resid_post", direction)
panel = ilab.widgets.SteeringPanel(model, {"alpha": vec}, prompt="the cat sat on the mat", max_new_tokens=8,
                                   metric=" cat")
panel.values = {"alpha": 6.0}
panel
""",
    "LogitLens": "ilab.widgets.LogitLens(ilab.logit_lens(model, clean))",
    "AttentionPattern": "ilab.widgets.AttentionPattern(model, clean)",
    "Routing": """
from tests.model.test_routing import tiny_moe
moe = ilab.load_model(tiny_moe("mixtral"), tokenizer=model.tokenizer)
ilab.widgets.Routing(moe, clean, layer=1)
""",
}
# What to hover in each widget's output: the first, the right-most and the last of these elements.
TARGETS = {
    "FeatureHeatmap": ".ilab-tok",
    "TokenHeatmap": ".ilab-tok",
    "FeatureDashboard": ".ilab-dash-tokens .ilab-tok",
    "PatchingGrid": ".ilab-pg-cell",
    "SteeringPanel": ".ilab-steer-tok",
    "LogitLens": ".ilab-lens-cell",
    "AttentionPattern": ".ilab-attn-from .ilab-attn-tok",
    "Routing": ".ilab-routing-cell",
}
MAX_GAP_PX = 40
MIN_CONTRAST = 4.5

# Element index (among matches) of the first, the right-most and the last element.
_PICK = """
(els) => {
  let right = 0;
  els.forEach((e, i) => { if (e.getBoundingClientRect().right > els[right].getBoundingClientRect().right) right = i; });
  return [...new Set([0, right, els.length - 1])];
}
"""


def _run_tour(page: Page, run_notebook: RunNotebook, lab_server: LabServer, folder: Path) -> dict[str, Locator]:
    nb = folder / "tour.ipynb"
    nb.write_text(json.dumps(_notebook(SETUP, *CELLS.values())))
    cells = run_notebook(page, nb.relative_to(lab_server.root).as_posix(), timeout_s=300)
    assert not any(c["has_error"] for c in cells), json.dumps(cells, indent=1)
    outputs = {name: cell_output_locator(page, c["index"], c["panel_id"]) for name, c in zip(CELLS, cells[1:])}
    for name, out in outputs.items():
        expect(out.locator(TARGETS[name]).first).to_be_visible(timeout=30_000)
    wait_for_python(page, "panel.wait(60) and panel.status", "done")
    expect(outputs["SteeringPanel"].locator(".ilab-steer-metric").first).to_contain_text("P(' cat') = ")
    return outputs


def _check_tip(page: Page, anchor: Locator, where: str) -> None:
    anchor.scroll_into_view_if_needed()
    anchor.hover()
    tip = page.locator(".ilab-tip:visible")
    expect(tip, where).to_have_count(1)
    a, t = anchor.bounding_box(), tip.bounding_box()
    view = page.viewport_size
    assert a and t and view
    inside = t["x"] >= 0 and t["y"] >= 0 and t["x"] + t["width"] <= view["width"]
    inside = inside and t["y"] + t["height"] <= view["height"]
    assert inside, f"{where}: hover box {t} outside the {view} viewport"
    dx = max(0.0, t["x"] - (a["x"] + a["width"]), a["x"] - (t["x"] + t["width"]))
    dy = max(0.0, t["y"] - (a["y"] + a["height"]), a["y"] - (t["y"] + t["height"]))
    assert dx <= MAX_GAP_PX and dy <= MAX_GAP_PX, f"{where}: hover box {t} is {dx:.0f}, {dy:.0f} px from {a}"


def test_tooltips_sit_next_to_what_they_describe(
    page: Page, run_notebook: RunNotebook, lab_server: LabServer, scratch_dir: Path
) -> None:
    outputs = _run_tour(page, run_notebook, lab_server, scratch_dir)
    checked = 0
    for name, out in outputs.items():
        targets = out.locator(TARGETS[name])
        for i in targets.evaluate_all(_PICK):
            _check_tip(page, targets.nth(i), f"{name} {TARGETS[name]} #{i}")
            checked += 1
        page.mouse.move(0, 0)
    assert checked >= 2 * len(outputs)


# Every element with text of its own inside the widgets (and their visible hover boxes): its colour
# against the colour behind it (backgrounds composited from the page down), with opacities applied.
_CONTRAST = """
([roots, minimum]) => {
  const parse = (c) => {
    const m = c && c.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return [0, 0, 0, 0];
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, below) => {  // top (with alpha) over an opaque colour
    const a = top[3];
    return [0, 1, 2].map((i) => top[i] * a + below[i] * (1 - a));
  };
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const chain = (el) => { const out = []; for (let e = el; e; e = e.parentElement) out.push(e); return out; };
  const background = (el) => {
    let colour = [255, 255, 255];
    for (const e of chain(el).reverse()) colour = over(parse(getComputedStyle(e).backgroundColor), colour);
    return colour;
  };
  const opacity = (el) => chain(el).reduce((o, e) => o * Number(getComputedStyle(e).opacity || 1), 1);
  const failures = [];
  let checked = 0;
  for (const root of roots) {
    for (const el of [root, ...root.querySelectorAll('*')]) {
      const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
      if (!own || el.closest(':disabled') || el.tagName === 'OPTION' || el.tagName === 'TITLE') continue;
      const r = el.getBoundingClientRect();
      const style = getComputedStyle(el);
      if (!r.width || !r.height || style.visibility === 'hidden') continue;
      const bg = background(el);
      const fgRaw = parse(el instanceof SVGElement ? style.fill : style.color);
      const fg = over([fgRaw[0], fgRaw[1], fgRaw[2], fgRaw[3] * opacity(el)], bg);
      const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
      const ratio = (hi + 0.05) / (lo + 0.05);
      checked++;
      if (ratio >= minimum) continue;
      failures.push({text: el.textContent.slice(0, 40), cls: String(el.className.baseVal ?? el.className),
                     ratio: Math.round(ratio * 100) / 100, fg: fg.map(Math.round), bg: bg.map(Math.round)});
    }
  }
  const fgOfRoots = roots.map((r) => lum(parse(getComputedStyle(r).color)));
  return {checked, failures, fgOfRoots};
}
"""


def _contrast(page: Page, outputs: dict[str, Locator]) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for name, out in outputs.items():
        roots = out.locator(".ilab-root").element_handles()
        targets = out.locator(TARGETS[name])
        targets.first.scroll_into_view_if_needed()
        targets.first.hover()  # its hover box counts too
        tips = page.locator(".ilab-tip:visible").element_handles()
        report[name] = page.evaluate(_CONTRAST, [roots + tips, MIN_CONTRAST])
        page.mouse.move(0, 0)
    return report


def _set_theme(page: Page, theme: str, light: bool) -> None:
    page.evaluate("(theme) => { void window.jupyterapp.commands.execute('apputils:change-theme', {theme}); }", theme)
    page.wait_for_function(f"() => document.body.dataset.jpThemeLight === '{str(light).lower()}'", timeout=30_000)
    page.wait_for_timeout(500)  # the theme's stylesheet applied


def test_every_widget_is_readable_in_light_and_dark_themes(
    page: Page, run_notebook: RunNotebook, lab_server: LabServer, scratch_dir: Path
) -> None:
    outputs = _run_tour(page, run_notebook, lab_server, scratch_dir)
    light = _contrast(page, outputs)
    _set_theme(page, "JupyterLab Dark", light=False)
    try:
        dark = _contrast(page, outputs)
        assert all(min(r["fgOfRoots"]) > 0.5 for r in dark.values()), dark  # light text: the dark theme is on
    finally:
        _set_theme(page, "JupyterLab Light", light=True)  # the setting outlives this page: put it back
    problems = []
    for theme, report in (("light", light), ("dark", dark)):
        for name, result in report.items():
            assert result["checked"] > 5, f"{theme} {name}: only {result['checked']} text elements seen"
            problems += [{"theme": theme, "widget": name, **f} for f in result["failures"]]
    assert not problems, f"text below {MIN_CONTRAST}:1\n" + json.dumps(problems[:30], indent=1)
