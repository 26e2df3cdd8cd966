"""FeatureFlow in a real JupyterLab and in exported HTML: nodes and edges drawn, the hover box (label, top
tokens) inside the viewport next to the node, a click reaches Python and the linked dashboard, dark theme
readable, untrusted labels stay text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.export.test_export import export_code

from .conftest import REPO_ROOT, cell_output_locator
from .test_export_html import Offline, offline  # noqa: F401  (the `offline` fixture)
from .test_heatmap import wait_for_python
from .test_lens_attention import assert_tip_near
from .test_tour import _notebook

if TYPE_CHECKING:
    from .conftest import LabServer, RunNotebook

pytestmark = pytest.mark.browser

SETUP = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT)!r})
import numpy as np
import interplab as ilab
from interplab.core.matching import Match
sites = [f"blocks.{{i}}.hook_resid_post" for i in range(3)]
chain = [Match(np.array([2, 0, 1, 3]), np.array([0.0, 0.1, 0.2, 0.3], np.float32), sites[0], sites[1]),
         Match(np.array([3, 2, 1, 0]), np.array([0.1, 0.1, 0.4, 0.0], np.float32), sites[1], sites[2])]
evil = '<img src=x onerror=alert(1)>'
labels = [{{0: "first"}}, {{2: evil}}, {{}}]
tops = [{{0: [" the", " cat"]}}, {{}}, {{}}]
class Board:
    site, selected = sites[1], 0
board = Board()
"""
WIDGETS = """
flow = ilab.widgets.FeatureFlow(chain, latents=[0, 1], labels=labels, top_tokens=tops, dashboard=board)
flow
"""
DARK = """
ilab.widgets.FeatureFlow(chain, latents=[0], labels=labels, scheme="dark")
"""


def check_flow(page: Page, out: Locator) -> None:
    nodes = out.locator(".ilab-flow-node")
    expect(nodes).to_have_count(6, timeout=30_000)
    expect(out.locator(".ilab-flow-edge")).to_have_count(4)
    first = nodes.first
    first.hover()
    tip = page.locator(".ilab-flow-tip:visible")
    assert_tip_near(page, tip, first)
    expect(tip).to_contain_text("first")
    expect(tip).to_contain_text("the")
    nodes.nth(1).hover()
    expect(tip).to_contain_text("<img src=x onerror=alert(1)>")
    assert page.locator(".ilab-flow-tip img").count() == 0


def test_flow_in_jupyterlab(page: Page, run_notebook: RunNotebook, lab_server: LabServer, scratch_dir: Path):
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    nb = scratch_dir / "flow.ipynb"
    nb.write_text(json.dumps(_notebook(SETUP, WIDGETS, DARK)))
    cells = run_notebook(page, nb.relative_to(lab_server.root).as_posix(), timeout_s=240)
    assert not any(c["has_error"] for c in cells), json.dumps(cells, indent=1)
    out = cell_output_locator(page, cells[1]["index"], cells[1]["panel_id"])
    check_flow(page, out)
    out.locator(".ilab-flow-node").nth(1).click()
    wait_for_python(page, "board.selected", "2")
    expect(out.locator(".ilab-flow-node.ilab-selected")).to_have_count(1)
    # dark theme: node labels light on a dark page
    dark = cell_output_locator(page, cells[2]["index"], cells[2]["panel_id"])
    expect(dark.locator(".ilab-flow-node")).to_have_count(3, timeout=30_000)
    colour = dark.locator(".ilab-flow-text").first.evaluate("e => getComputedStyle(e).fill")
    rgb = [int(v) for v in colour[colour.index("(") + 1 : colour.index(")")].split(",")[:3]]
    assert sum(rgb) / 3 > 180, colour
    assert not dialogs


def test_exported_flow_renders_offline(page: Page, offline: Offline, tmp_path: Path):  # noqa: F811
    html = export_code(tmp_path, "flow", SETUP + WIDGETS)
    page.goto(html.as_uri())
    check_flow(page, page.locator(".ilab-flow").first)
    assert not offline.blocked and not offline.dialogs and not offline.errors, offline.problems()
