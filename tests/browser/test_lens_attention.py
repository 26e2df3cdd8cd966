"""LogitLens and AttentionPattern in a real JupyterLab and in exported HTML: cells and thumbnails drawn,
tooltips inside the viewport next to what is hovered, clicks reach Python, untrusted token text stays text."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.export.test_export import export_code

from .conftest import REPO_ROOT, cell_output_locator
from .test_export_html import Offline, offline  # noqa: F401  (the `offline` fixture)
from .test_heatmap import kernel_eval, wait_for_python
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
from interplab.core.readout.lens import LensView
from interplab.core.views.attention_pattern import AttentionData
from tests.tiny import tiny_model
torch.set_num_threads(1)
model = tiny_model("llama")
text = "Mary and John went to the store and John gave a drink to"
lens = ilab.logit_lens(model, text)
"""
LENS = "lens"  # displays as the LogitLens view by itself
WIDGETS = """
w = ilab.widgets.LogitLens(lens, token="Mary")
attn = ilab.widgets.AttentionPattern(model, text)
display(w, attn)
"""
EVIL = """
evil = '<img src=x onerror=alert(1)>'
tokens = ["<bos>", evil, '"']
view = LensView(tokens=tokens, top_ids=np.array([[[0, 1], [1, 0], [0, 1]]]), top_probs=np.full((1, 3, 2), 0.5),
                candidates=np.array([0, 1]), candidate_tokens=[evil, '"'], candidate_probs=np.full((1, 3, 2), 0.5),
                layers=[0])
pattern = np.tril(np.ones((1, 1, 3, 3), dtype=np.float32)); pattern /= pattern.sum(-1, keepdims=True)
display(ilab.widgets.LogitLens(view), ilab.widgets.AttentionPattern(AttentionData(tokens, [0], pattern)))
"""


def assert_tip_near(page: Page, tip: Locator, target: Locator, slack: float = 40) -> None:
    """The tooltip is visible, inside the viewport, and within ``slack`` px of the hovered element."""
    expect(tip).to_be_visible()
    t, c = tip.bounding_box(), target.bounding_box()
    vp = page.viewport_size
    assert t and c and vp
    assert t["x"] >= 0 and t["y"] >= 0, t
    assert t["x"] + t["width"] <= vp["width"] and t["y"] + t["height"] <= vp["height"], (t, vp)
    dx = max(0.0, t["x"] - (c["x"] + c["width"]), c["x"] - (t["x"] + t["width"]))
    dy = max(0.0, t["y"] - (c["y"] + c["height"]), c["y"] - (t["y"] + t["height"]))
    assert math.hypot(dx, dy) <= slack, (t, c)


def check_lens(page: Page, out: Locator, n_pos: int) -> None:
    """Cells drawn; a hover box next to the hovered cell; a click lists the cell's top-10."""
    cells = out.locator(".ilab-lens-cell")
    expect(cells).to_have_count(2 * n_pos, timeout=30_000)
    cell = cells.nth(n_pos + n_pos - 1)  # layer 1, last position
    cell.hover()
    tip = page.locator(".ilab-lens-tip:visible")  # hover boxes live in document.body (ilabTip)
    assert_tip_near(page, tip, cell)
    assert "layer 1 · after position" in (tip.text_content() or "")
    cell.click()
    expect(out.locator(".ilab-lens-topitem")).to_have_count(10)


def check_attention(page: Page, out: Locator, n_heads: int) -> None:
    """Thumbnails drawn; hover boxes next to a token and over the matrix; a thumbnail click shows its head."""
    expect(out.locator(".ilab-attn-thumb")).to_have_count(n_heads, timeout=30_000)
    strip = out.locator(".ilab-attn-from .ilab-attn-tok")
    token = strip.nth(4)
    token.hover()
    tip = page.locator(".ilab-attn-tip:visible")
    assert_tip_near(page, tip, token)
    matrix = out.locator(".ilab-attn-matrix")
    box = matrix.bounding_box()
    assert box and box["width"] > 50
    matrix.hover(position={"x": box["width"] * 0.9, "y": box["height"] * 0.95})
    expect(tip).to_contain_text("attention")
    out.locator(".ilab-attn-thumb").nth(2).click()
    expect(out.locator(".ilab-attn-title")).to_contain_text("H2")


EVIL_TOKEN = "<img src=x onerror=alert(1)>"


def check_tokens_as_themselves(page: Page, lens_out: Locator, attn_out: Locator) -> None:
    """Hover boxes, the clicked cell's heading and the strip labels show a token as its own text:
    `"` as a quote and `<img ...>` as those characters, never escaped (`"\\""`) nor as markup."""
    lens_cells = lens_out.locator(".ilab-lens-cell")
    expect(lens_cells).to_have_count(3, timeout=30_000)
    lens_cells.nth(2).hover()  # layer 0, position 2: the token `"`; its top tokens are `<img ...>` and `"`
    tip = page.locator(".ilab-lens-tip:visible")
    expect(tip).to_contain_text('after position 2 "')
    text = tip.text_content() or ""
    assert f"P({EVIL_TOKEN}) = " in text and f"  {EVIL_TOKEN}" in text and '\\"' not in text, text
    lens_cells.nth(1).click()
    expect(lens_out.locator(".ilab-lens-where")).to_have_text(f"layer 0 · after position 1 {EVIL_TOKEN}")
    strip = attn_out.locator(".ilab-attn-from .ilab-attn-tok")
    strip.nth(2).hover()
    attn_tip = page.locator(".ilab-attn-tip:visible")
    expect(attn_tip).to_contain_text('" (position 2)')
    expect(attn_out.locator(".ilab-attn-striplabel").first).to_have_text('" (position 2) attends to:')
    strip.nth(1).hover()
    expect(attn_tip).to_contain_text(f"{EVIL_TOKEN} (position 1)")
    assert '\\"' not in (attn_tip.text_content() or "")
    assert lens_out.locator("img").count() == 0 and attn_out.locator("img").count() == 0


def test_lens_and_attention_in_jupyterlab(page: Page, run_notebook: RunNotebook, lab_server: LabServer,
                                          scratch_dir: Path):  # fmt: skip
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    nb = scratch_dir / "lens.ipynb"
    nb.write_text(json.dumps(_notebook(SETUP, LENS, WIDGETS, EVIL)))
    cells = run_notebook(page, nb.relative_to(lab_server.root).as_posix(), timeout_s=240)
    assert not any(c["has_error"] for c in cells), json.dumps(cells, indent=1)
    n_pos = 14

    # `lens` on its own displays as the LogitLens view
    shown = cell_output_locator(page, cells[1]["index"], cells[1]["panel_id"])
    expect(shown.locator(".ilab-lens-cell")).to_have_count(2 * n_pos, timeout=30_000)

    out = cell_output_locator(page, cells[2]["index"], cells[2]["panel_id"])
    lens_out, attn_out = out.locator(".ilab-lens"), out.locator(".ilab-attn")
    check_lens(page, lens_out, n_pos)
    wait_for_python(page, "w.selected", f"[1, {n_pos - 1}]")
    assert kernel_eval(page, "print(w.selected_top == w.view.top(1, 13))") == "True"
    # keyboard: focus the grid, move right twice and down once from the first cell, Enter selects
    lens_out.locator(".ilab-lens-grid").focus()
    for key in ("ArrowRight", "ArrowRight", "ArrowDown", "Enter"):
        page.keyboard.press(key)
    wait_for_python(page, "w.selected", "[1, 2]")
    # the cells are coloured by P("Mary"): the values drawn are the view's
    drawn = lens_out.locator(".ilab-lens-cell").evaluate_all("els => els.map(e => Number(e.dataset.v))")
    want = json.loads(kernel_eval(page, "import json; print(json.dumps(w.view.prob('Mary').ravel().tolist()))"))
    assert max(abs(a - b) for a, b in zip(drawn, want, strict=True)) < 1e-6
    # choose another token in the picker: Python follows, and the other way round
    other = kernel_eval(page, "print(w.vocab_ids[w.colour_index[1]])")
    lens_out.locator(".ilab-lens-token").select_option(other)
    wait_for_python(page, "w.token_id", other)
    kernel_eval(page, "w.token = 'Mary'")
    expect(lens_out.locator(".ilab-lens-token")).to_have_value(kernel_eval(page, "print(w.token_id)"))

    check_attention(page, attn_out, 4)
    wait_for_python(page, "attn.head", "2")
    row = attn_out.locator(".ilab-attn-from .ilab-attn-tok")
    row.nth(5).click()
    wait_for_python(page, "attn.selected_token", "5")
    drawn = row.evaluate_all("els => els.map(e => Number(e.dataset.v))")
    want = json.loads(kernel_eval(page, "import json; print(json.dumps(attn.pattern[5].tolist()))"))
    assert max(abs(a - b) for a, b in zip(drawn, want, strict=True)) < 1e-6  # where token 5 attends, head 2
    kernel_eval(page, "attn.layer = 1")
    expect(attn_out.locator(".ilab-attn-title")).to_contain_text("L1 H2")
    kernel_eval(page, "attn.set_scale(vmax=0.25); w.set_scale(vmax=0.05)")  # the shared colour scales
    expect(attn_out.locator(".ilab-legend-max")).to_have_text("0.25")
    expect(lens_out.locator(".ilab-legend-max")).to_have_text("0.05")

    # untrusted token text is text
    evil = cell_output_locator(page, cells[3]["index"], cells[3]["panel_id"])
    expect(evil.locator(".ilab-lens-cell")).to_have_count(3, timeout=30_000)
    assert evil.locator(".ilab-lens-top").first.text_content() == "<img src=x onerror=alert(1)>"
    assert evil.locator(".ilab-attn-tok").nth(1).text_content() == "<img src=x onerror=alert(1)>"
    check_tokens_as_themselves(page, evil.locator(".ilab-lens"), evil.locator(".ilab-attn"))
    assert evil.locator("img").count() == 0 and not dialogs


def test_exported_lens_and_attention_render_offline(page: Page, offline: Offline, tmp_path: Path):  # noqa: F811
    """Both render from the saved widget state with no kernel and no network; hover and head switch work."""
    html = export_code(tmp_path, "lens", SETUP + WIDGETS + EVIL)
    page.goto(html.as_uri())
    lens_out, attn_out = page.locator(".ilab-lens").first, page.locator(".ilab-attn").first
    check_lens(page, lens_out, 14)
    check_attention(page, attn_out, 4)
    assert page.locator(".ilab-lens-top").nth(2 * 14).text_content() == "<img src=x onerror=alert(1)>"
    check_tokens_as_themselves(page, page.locator(".ilab-lens").last, page.locator(".ilab-attn").last)
    assert not offline.blocked and not offline.dialogs and not offline.errors, offline.problems()


BOS = """
import numpy as np
import interplab as ilab
from interplab.core.views.attention_pattern import AttentionData
tokens = ["<bos>", "When", " Mary", " and"]
pattern = np.zeros((1, 1, 4, 4), dtype=np.float32)
pattern[0, 0] = [[1, 0, 0, 0], [0.8, 0.2, 0, 0], [0.6, 0.3, 0.1, 0], [0.5, 0.25, 0.125, 0.125]]
attn = ilab.widgets.AttentionPattern(AttentionData(tokens, [0], pattern))
attn
"""


def test_attention_labels_keys_and_hides_the_bos_column(
    page: Page, run_notebook: RunNotebook, lab_server: LabServer, scratch_dir: Path
):
    nb = scratch_dir / "bos.ipynb"
    nb.write_text(json.dumps(_notebook(BOS)))
    cells = run_notebook(page, nb.relative_to(lab_server.root).as_posix(), timeout_s=240)
    assert not any(c["has_error"] for c in cells), json.dumps(cells, indent=1)
    out = cell_output_locator(page, cells[0]["index"], cells[0]["panel_id"])
    matrix = out.locator(".ilab-attn-matrix")
    expect(matrix).to_be_visible(timeout=30_000)
    # the key axis: a token under each column, as text
    keys = out.locator(".ilab-attn-collabel")
    expect(keys).to_have_text(["<bos>", "When", " Mary", " and"])
    m, k = matrix.bounding_box(), keys.nth(2).bounding_box()
    assert m and k and k["y"] >= m["y"] + m["height"] - 1  # under the matrix
    cell = m["width"] / 4
    assert m["x"] + 2 * cell - 2 <= k["x"] + k["width"] / 2 <= m["x"] + 3 * cell + 2  # under column 2
    # hide the BOS column: Python sees it, the panel says rows are renormalised, the column is background
    out.locator("input[aria-label='hide the first key (BOS) column']").check()
    wait_for_python(page, "attn.hide_bos", "True")
    expect(out.locator(".ilab-attn-bosnote")).to_have_text(
        "BOS column hidden; rows renormalised over the other keys (each sums to 1)"
    )
    assert kernel_eval(page, "print(np.nansum(attn.pattern, -1).round(6).tolist())") == "[0.0, 1.0, 1.0, 1.0]"
    bos_pixel = matrix.evaluate("c => Array.from(c.getContext('2d').getImageData(2, c.height - 2, 1, 1).data)")
    blank = matrix.evaluate(
        "c => Array.from(c.getContext('2d').getImageData(c.width - 2, 2, 1, 1).data)"
    )  # query 0, key 3: 0 attention
    assert bos_pixel == blank
    matrix.hover(position={"x": cell * 1.5, "y": cell * 1.5})  # query 1 -> key 1: 0.2 / 0.2 = 1
    expect(page.locator(".ilab-attn-tip:visible")).to_contain_text("attention 1")
    # ... or not renormalised: the values as computed
    out.locator("input[aria-label='renormalise each row over the other keys']").uncheck()
    wait_for_python(page, "attn.renormalize", "False")
    expect(out.locator(".ilab-attn-bosnote")).to_contain_text("values as computed")
    matrix.hover(position={"x": cell * 1.5, "y": cell * 1.6})
    expect(page.locator(".ilab-attn-tip:visible")).to_contain_text("attention 0.2")
