"""PatchingGrid in a real JupyterLab: cells, token labels, hover values, click -> Python, tabs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Page, expect

from tests.test_export import export_code

from .conftest import cell_output_locator
from .test_export_html import Offline, offline  # noqa: F401  (the `offline` fixture)
from .test_heatmap import kernel_eval, wait_for_python
from .test_tour import _notebook

if TYPE_CHECKING:
    from .conftest import LabServer, RunNotebook

pytestmark = pytest.mark.browser

GRID = """
import numpy as np
import interplab as ilab
PatchingResult = ilab.patching.PatchingResult
tokens = ["<bos>", "When", " <img src=x onerror=alert(1)>", " and", " to"]
values = np.arange(15, dtype=np.float32).reshape(3, 5) - 5.0
top_ids = np.zeros((3, 5, 2), dtype=np.int64)
top_probs = np.tile(np.array([0.75, 0.25], dtype=np.float32), (3, 5, 1))
top_tokens = [" Mary", " John"] * 15
exact = PatchingResult(values, clean_baseline=9.0, corrupt_baseline=-5.0, site="resid_pre", metric="logit_diff",
                       positions=list(range(5)), tokens=tokens, top_ids=top_ids, top_probs=top_probs,
                       top_tokens=top_tokens)
approx = PatchingResult(values * 0.5, clean_baseline=9.0, corrupt_baseline=-5.0, site="resid_pre",
                        method="attribution", positions=list(range(5)), tokens=tokens)
heads = PatchingResult(np.ones((3, 4), dtype=np.float32), clean_baseline=9.0, corrupt_baseline=-5.0, site="heads",
                       col_name="head", positions=list(range(5)), tokens=tokens)
w = ilab.widgets.PatchingGrid({"exact": exact, "attribution": approx, "heads": heads})
w
"""


def test_patching_grid_in_jupyterlab(page: Page, run_notebook: RunNotebook, lab_server: LabServer, scratch_dir: Path):
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    nb = scratch_dir / "patching.ipynb"
    nb.write_text(json.dumps(_notebook(GRID)))
    cells = run_notebook(page, nb.relative_to(lab_server.root).as_posix(), timeout_s=240)
    assert not any(c["has_error"] for c in cells), json.dumps(cells, indent=1)
    out = cell_output_locator(page, cells[0]["index"], cells[0]["panel_id"])
    grid_cells = out.locator(".ilab-pg-cell")
    expect(grid_cells).to_have_count(15, timeout=30_000)

    # Token labels on the position axis, as text (the markup token is not an element).
    labels = out.locator(".ilab-pg-collabel")
    expect(labels).to_have_count(5)
    assert labels.nth(2).text_content() == " <img src=x onerror=alert(1)>"
    assert out.locator(".ilab-patching img").count() == 0 and not dialogs

    # Diverging colours centred on 0 (normalized: corrupted -5 -> 0): cell 0 is 0, the rest positive.
    colours = grid_cells.evaluate_all("els => els.map(e => getComputedStyle(e).backgroundColor)")
    assert colours[0] in ("rgba(0, 0, 0, 0)", "transparent"), colours[0]
    assert colours[14].startswith("rgba(230, 85, 13"), colours[14]
    expect(out.locator(".ilab-legend")).to_be_visible()

    # Hover shows the exact value.
    grid_cells.nth(7).hover()
    tip = out.locator(".ilab-pg-tip")
    expect(tip).to_be_visible()
    text = tip.text_content() or ""
    assert "layer 1" in text and "position 2" in text and "value 2" in text and "normalized 0.5" in text, text

    # Click -> selected in Python, and the patched run's top tokens are shown.
    grid_cells.nth(7).click()
    wait_for_python(page, "w.selected", "[1, 2]")
    assert kernel_eval(page, "print(w.selected_cell['value'])") == "2.0"
    expect(out.locator(".ilab-pg-topitem")).to_have_count(2)
    expect(out.locator(".ilab-pg-topitem").first).to_have_text(" Mary 0.75")
    assert "ilab-selected" in (grid_cells.nth(7).get_attribute("class") or "")

    # Method tab: attribution of the same site.
    out.locator(".ilab-pg-methods button[data-method='attribution']").click()
    wait_for_python(page, "w.tab", "attribution")
    expect(out.locator(".ilab-pg-detail")).to_contain_text("first-order estimate")

    # Site tab: heads grid, layers x heads.
    out.locator(".ilab-pg-groups button[data-group='heads']").click()
    wait_for_python(page, "w.tab", "heads")
    expect(grid_cells).to_have_count(12)
    expect(out.locator(".ilab-pg-collabel").first).to_have_text("H0")

    # Python drives the widget too.
    kernel_eval(page, "w.tab = 'exact'")
    expect(grid_cells).to_have_count(15)
    kernel_eval(page, "w.selected = [2, 4]")
    expect(grid_cells.nth(14)).to_have_class("ilab-pg-cell ilab-selected")

    # Keyboard: focus the grid, move, Enter selects.
    out.locator(".ilab-pg-grid").focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    wait_for_python(page, "w.selected", "[1, 1]")


def test_exported_patching_grid_renders_offline(page: Page, offline: Offline, tmp_path: Path):  # noqa: F811
    """The grid renders from the saved widget state in exported HTML: no kernel, no network."""
    html = export_code(tmp_path, "grid", GRID)
    page.goto(html.as_uri())
    cells = page.locator(".ilab-patching .ilab-pg-cell")
    expect(cells).to_have_count(15, timeout=30_000)
    assert page.locator(".ilab-pg-collabel").nth(2).text_content() == " <img src=x onerror=alert(1)>"
    cells.nth(14).hover()
    expect(page.locator(".ilab-pg-tip")).to_contain_text("value 9")
    page.locator(".ilab-pg-groups button[data-group='heads']").click()  # tabs work without a kernel
    expect(cells).to_have_count(12)
    assert not offline.blocked and not offline.dialogs and not offline.errors, offline.problems()
