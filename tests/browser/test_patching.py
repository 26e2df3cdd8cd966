"""PatchingGrid in a real JupyterLab: cells, token labels, hover values, click -> Python, tabs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Page, expect

from tests.export.test_export import export_code

from .conftest import REPO_ROOT, cell_output_locator
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
tokens = ["<bos>", "When", " <img src=x onerror=alert(1)>", " and", " When"]
corrupt = ["<bos>", "When", " <img src=x onerror=alert(1)>", " or", " When"]
values = np.arange(15, dtype=np.float32).reshape(3, 5) - 5.0
top_ids = np.zeros((3, 5, 2), dtype=np.int64)
top_probs = np.tile(np.array([0.75, 0.25], dtype=np.float32), (3, 5, 1))
top_tokens = [" Mary", " John"] * 15
exact = PatchingResult(values, clean_baseline=9.0, corrupt_baseline=-5.0, site="resid_pre", metric="logit_diff",
                       positions=list(range(5)), tokens=tokens, corrupt_tokens=corrupt, top_ids=top_ids,
                       top_probs=top_probs, top_tokens=top_tokens)
approx = PatchingResult(values * 0.5, clean_baseline=9.0, corrupt_baseline=-5.0, site="resid_pre",
                        method="attribution", positions=list(range(5)), tokens=tokens)
heads = PatchingResult(np.ones((3, 4), dtype=np.float32), clean_baseline=9.0, corrupt_baseline=-5.0, site="heads",
                       col_name="head", positions=list(range(5)), tokens=tokens)
w = ilab.widgets.PatchingGrid({"exact": exact, "attribution": approx, "heads": heads})
w
"""

LATENTS = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT)!r})
from tests.widgets.test_dashboard import hand_feature_data
latents = PatchingResult(np.ones((3, 5), dtype=np.float32), clean_baseline=9.0, corrupt_baseline=-5.0, site="latents",
                         row_name="latent", rows=[4, 2, 7], layer=0, positions=list(range(5)), tokens=tokens)
lat = ilab.widgets.PatchingGrid(latents)
dash = ilab.widgets.FeatureDashboard(hand_feature_data(), n_cards=12).link(lat)
lat
"""


def test_patching_grid_in_jupyterlab(page: Page, run_notebook: RunNotebook, lab_server: LabServer, scratch_dir: Path):
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    nb = scratch_dir / "patching.ipynb"
    nb.write_text(json.dumps(_notebook(GRID, LATENTS, "dash")))
    cells = run_notebook(page, nb.relative_to(lab_server.root).as_posix(), timeout_s=240)
    assert not any(c["has_error"] for c in cells), json.dumps(cells, indent=1)
    out = cell_output_locator(page, cells[0]["index"], cells[0]["panel_id"])
    grid_cells = out.locator(".ilab-pg-cell")
    expect(grid_cells).to_have_count(15, timeout=30_000)

    # Token labels on the position axis, as text (the markup token is not an element), each with its
    # position (the two " When" columns differ), written horizontally, under axis titles.
    labels = out.locator(".ilab-pg-collabel")
    expect(labels).to_have_count(5)
    assert labels.nth(2).locator(".ilab-pg-coltok").text_content() == " <img src=x onerror=alert(1)>"
    assert out.locator(".ilab-patching img").count() == 0 and not dialogs
    assert labels.evaluate_all("els => els.map(e => e.textContent)")[1::3] == ["1When", "4 When"]
    style = labels.nth(4).evaluate("e => [getComputedStyle(e).writingMode, getComputedStyle(e).transform]")
    assert style == ["horizontal-tb", "none"], style
    box = labels.nth(4).locator(".ilab-pg-coltok").bounding_box()
    assert box and box["width"] > box["height"]  # reads left to right
    expect(out.locator(".ilab-pg-rowtitle")).to_have_text("layer ↓")
    expect(out.locator(".ilab-pg-coltitle")).to_have_text("position → (index, clean token)")
    # The clean and the corrupted prompts are shown, the differing token marked.
    expect(out.locator(".ilab-pg-prompt-corrupted .ilab-pg-ptok")).to_have_count(5)
    expect(out.locator(".ilab-pg-prompt-corrupted .ilab-pg-pdiff")).to_have_text([" or"])
    expect(out.locator(".ilab-pg-prompt-clean .ilab-pg-pdiff")).to_have_text([" and"])
    assert "ilab-pg-coldiff" in (labels.nth(3).get_attribute("class") or "")

    # Diverging colours centred on 0 (normalized: corrupted -5 -> 0): cell 0 is 0, the rest positive.
    colours = grid_cells.evaluate_all("els => els.map(e => getComputedStyle(e).backgroundColor)")
    assert colours[0] in ("rgba(0, 0, 0, 0)", "transparent"), colours[0]
    assert colours[14].startswith("rgba(230, 85, 13"), colours[14]
    expect(out.locator(".ilab-legend")).to_be_visible()

    # Hover shows the exact value.
    grid_cells.nth(7).hover()
    tip = page.locator(".ilab-pg-tip:visible")  # hover boxes live in the page body
    expect(tip).to_have_count(1)
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

    # Site tab: heads grid, layers x heads. [1, 2] would be head 2 there: the selection is cleared.
    assert kernel_eval(page, "print(w.selected)") == "[1, 2]"  # kept across the method tabs of one site
    out.locator(".ilab-pg-groups button[data-group='heads']").click()
    wait_for_python(page, "w.tab", "heads")
    expect(grid_cells).to_have_count(12)
    expect(out.locator(".ilab-pg-collabel").first).to_have_text("H0")
    wait_for_python(page, "w.selected", "[]")
    expect(out.locator(".ilab-pg-cell.ilab-selected")).to_have_count(0)

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

    # Latent rows are labelled (the dashboard's labels) and open the latent's card in the linked dashboard.
    lat = cell_output_locator(page, cells[1]["index"], cells[1]["panel_id"])
    rows = lat.locator(".ilab-pg-rowlabel")
    expect(rows).to_have_text(["latent 4", "latent 2 · second", "latent 7"])
    rows.nth(2).click()
    wait_for_python(page, "(lat.latent, dash.selected)", "(7, 7)")
    dash_out = cell_output_locator(page, cells[2]["index"], cells[2]["panel_id"])
    expect(dash_out.locator(".ilab-dash-card")).to_have_attribute("data-latent", "7")
    kernel_eval(page, "dash.set_label(4, 'set in the dashboard')")
    expect(rows.first).to_have_text("latent 4 · set in the dashboard")


def test_exported_patching_grid_renders_offline(page: Page, offline: Offline, tmp_path: Path):  # noqa: F811
    """The grid renders from the saved widget state in exported HTML: no kernel, no network."""
    html = export_code(tmp_path, "grid", GRID)
    page.goto(html.as_uri())
    cells = page.locator(".ilab-patching .ilab-pg-cell")
    expect(cells).to_have_count(15, timeout=30_000)
    assert page.locator(".ilab-pg-collabel .ilab-pg-coltok").nth(2).text_content() == " <img src=x onerror=alert(1)>"
    cells.nth(14).hover()
    expect(page.locator(".ilab-pg-tip")).to_contain_text("value 9")
    page.locator(".ilab-pg-groups button[data-group='heads']").click()  # tabs work without a kernel
    expect(cells).to_have_count(12)
    assert not offline.blocked and not offline.dialogs and not offline.errors, offline.problems()


NAMED = """
import numpy as np
import interplab as ilab
PatchingResult = ilab.patching.PatchingResult
tokens, corrupt = ["<bos>", "When", " Mary", " and"], ["<bos>", "When", " John", " and"]
common = dict(clean_baseline=2.0, corrupt_baseline=-1.0, site="resid_pre", positions=[0, 1, 2, 3], tokens=tokens,
              corrupt_tokens=corrupt, n_pairs=8)
resid = PatchingResult(np.ones((2, 4), np.float32), **common)
ig = PatchingResult(np.zeros((2, 4), np.float32), method="attribution", **common)
named = ilab.widgets.PatchingGrid({"exact resid_pre": resid, "IG resid_pre": ig})
lat = dict(common, site="latents", row_name="latent", rows=[5, 9], layer=3)
latents = ilab.widgets.PatchingGrid({"attribution": PatchingResult(np.zeros((2, 4), np.float32), method="attribution",
                                                                   **lat),
                                     "exact": PatchingResult(np.ones((2, 4), np.float32), **lat)})
display(named, latents)
"""


def test_grids_are_named_as_given_and_say_what_they_average(
    page: Page, run_notebook: RunNotebook, lab_server: LabServer, scratch_dir: Path
):
    nb = scratch_dir / "named.ipynb"
    nb.write_text(json.dumps(_notebook(NAMED)))
    cells = run_notebook(page, nb.relative_to(lab_server.root).as_posix(), timeout_s=240)
    assert not any(c["has_error"] for c in cells), json.dumps(cells, indent=1)
    out = cell_output_locator(page, cells[0]["index"], cells[0]["panel_id"])
    named, latents = out.locator(".ilab-patching").nth(0), out.locator(".ilab-patching").nth(1)
    expect(named.locator(".ilab-pg-cell")).to_have_count(8, timeout=30_000)
    # the dict's keys are the tabs and the header, not the methods
    expect(named.locator(".ilab-pg-methods button")).to_have_text(["exact resid_pre", "IG resid_pre"])
    named.locator(".ilab-pg-methods button", has_text="IG resid_pre").click()
    wait_for_python(page, "named.tab", "IG resid_pre")
    info = named.locator(".ilab-pg-info")
    expect(info).to_contain_text("IG resid_pre (attribution patching of resid_pre)")
    # an 8-pair grid says it averages 8 pairs and which pair's prompts are shown
    expect(info).to_contain_text("mean over 8 prompt pairs")
    expect(named.locator(".ilab-pg-pairs")).to_have_text(
        "the values average 8 prompt pairs; shown: pair 1 of 8 (the token labels are its)"
    )
    # a latent grid with an exact grid opens on it
    expect(latents.locator(".ilab-pg-methods button.ilab-active")).to_have_attribute("data-method", "exact")
    assert kernel_eval(page, "print(latents.tab)") == "exact"
