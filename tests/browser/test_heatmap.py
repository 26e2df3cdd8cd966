"""FeatureHeatmap / TokenHeatmap in a real JupyterLab: render, hover, click, recolour, keyboard, paging."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Page, expect

from .conftest import cell_output_locator
from .test_tour import _notebook

if TYPE_CHECKING:
    from .conftest import LabServer, RunNotebook

pytestmark = pytest.mark.browser

SMALL = """
import numpy as np
import interplab as ilab
tokens = [["The", " cat", " <img src=x onerror=alert(1)>", "\\n", ' "'], ["A", " dog"]]
values = np.array([[0, 1], [1, 0], [2, 0.5], [0, 0], [3, -1], [0.5, 0], [0, 2]], dtype=np.float32)
w = ilab.widgets.FeatureHeatmap(tokens, values, labels=["alpha", "beta"])
w
"""

SPARSE = """
sparse_values = np.zeros(3000, dtype=np.float32)
sparse_values[[10, 2500]] = [1.0, 2.0]
sparse = ilab.widgets.TokenHeatmap([f" t{i}" for i in range(3000)], sparse_values, label="rare")
sparse
"""

BIG = """
%load_ext interplab
rng = np.random.default_rng(0)
n, f = 100_000, 32
%interplab max_values=1000
big = ilab.widgets.FeatureHeatmap([f" t{i % 97}" for i in range(n)], rng.random((n, f), dtype=np.float32))
%interplab max_values=4000000
big
"""

DROP_FIRST_REQUEST = """
dropped = []
def drop_first(widget, content, buffers):
    if content.get("type") == "column" and not dropped:
        dropped.append(content["index"])
        return
    widget._on_request(widget, content, buffers)
big.on_msg(big._on_request, remove=True)
big.on_msg(drop_first)
"""

KERNEL_EVAL = """
async (code) => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const future = kernel.requestExecute({ code, store_history: false });
  let out = "";
  future.onIOPub = (msg) => {
    if (msg.header.msg_type === "stream") out += msg.content.text;
    if (msg.header.msg_type === "error") out += `ERROR ${msg.content.ename}: ${msg.content.evalue}`;
  };
  await Promise.race([future.done, new Promise((_, no) => setTimeout(() => no(new Error("kernel timeout")), 30000))]);
  return out;
}
"""


def kernel_eval(page: Page, code: str) -> str:
    """Run code in the notebook's kernel and return what it printed."""
    out = page.evaluate(KERNEL_EVAL, code)
    assert "ERROR" not in out, out
    return out.strip()


def wait_for_python(page: Page, expr: str, expected: str, tries: int = 40) -> None:
    """Poll the kernel until ``print(expr)`` gives ``expected`` (widget messages are asynchronous)."""
    seen = None
    for _ in range(tries):
        seen = kernel_eval(page, f"print({expr})")
        if seen == expected:
            return
        page.wait_for_timeout(250)
    raise AssertionError(f"Python sees {expr} = {seen!r}, expected {expected!r}")


def backgrounds(spans) -> list[str]:
    return spans.evaluate_all("els => els.map(e => getComputedStyle(e).backgroundColor)")


def test_heatmap_in_jupyterlab(page: Page, run_notebook: RunNotebook, lab_server: LabServer, scratch_dir: Path):
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    nb = scratch_dir / "heatmap.ipynb"
    nb.write_text(json.dumps(_notebook(SMALL, BIG, SPARSE)))
    cells = run_notebook(page, nb.relative_to(lab_server.root).as_posix(), timeout_s=240)
    assert not any(c["has_error"] for c in cells), json.dumps(cells, indent=1)

    small = cell_output_locator(page, cells[0]["index"], cells[0]["panel_id"])
    spans = small.locator(".ilab-tok")
    expect(spans).to_have_count(7, timeout=30_000)

    # Coloured tokens: exactly the non-zero values of feature 0 (alpha).
    colours = backgrounds(spans)
    coloured = [c not in ("rgba(0, 0, 0, 0)", "transparent") for c in colours]
    assert coloured == [False, True, True, False, True, True, False], colours

    # Untrusted text stays text: no <img> element, no script ran, the markup is visible literally.
    assert spans.nth(2).text_content() == " <img src=x onerror=alert(1)>"
    assert small.locator(".ilab-heatmap img").count() == 0
    # Whitespace tokens are visible, as faint symbols.
    assert spans.nth(3).text_content() == "↵" and "ilab-faint" in (spans.nth(3).get_attribute("class") or "")

    # Hover shows the value and the top features at that token.
    spans.nth(4).hover()
    tip = page.locator(".ilab-heat-tip:visible")  # hover boxes live in the page body
    expect(tip).to_have_count(1)
    tip_text = tip.text_content() or ""
    assert "alpha: 3" in tip_text and "beta: -1" in tip_text, tip_text
    # the token is shown as its text, not escaped a second time ('" \\""')
    assert tip_text.startswith(' "  (token 4, doc 0)'), tip_text
    # the top features at a token leave zeros out (token 0: alpha is 0 there)
    spans.nth(0).hover()
    expect(tip).to_contain_text("top features here:\n  1 · beta: 1")
    assert (tip.text_content() or "").split("top features here:")[1] == "\n  1 · beta: 1"
    # the legend's maximum and the feature's name do not run into each other
    gap = small.locator(".ilab-legend-box").evaluate(
        "b => b.querySelector('.ilab-legend-name').getBoundingClientRect().left"
        " - b.querySelector('.ilab-legend-max').getBoundingClientRect().right"
    )
    assert gap >= 6, gap

    # Click sets selected_token in Python.
    spans.nth(4).click()
    wait_for_python(page, "w.selected_token", "4")
    assert "ilab-selected" in (spans.nth(4).get_attribute("class") or "")

    # Choosing another feature in the list recolours (beta has a negative value: diverging, blue).
    small.locator("select.ilab-select").select_option("1")
    wait_for_python(page, "w.feature", "1")
    recoloured = backgrounds(spans)
    assert recoloured != colours
    assert recoloured[4].startswith("rgba(49, 130, 189"), recoloured  # -1: blue
    assert recoloured[6].startswith("rgba(230, 85, 13"), recoloured  # +2: orange

    # The search box filters the list by label; Enter picks the only match.
    small.locator("input.ilab-search").fill("alp")
    expect(small.locator("select.ilab-select option")).to_have_count(1)
    small.locator("input.ilab-search").press("Enter")
    wait_for_python(page, "w.feature", "0")

    # Setting the feature from Python recolours the widget.
    kernel_eval(page, "w.feature = 0")
    page.wait_for_function(
        "([el, c]) => getComputedStyle(el).backgroundColor === c", arg=[spans.nth(4).element_handle(), colours[4]]
    )

    # Keyboard: focus the tokens, move right twice, Enter selects token 1.
    small.locator(".ilab-docs").focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Enter")
    wait_for_python(page, "w.selected_token", "1")

    # 100k tokens x 32 features over the cap: one page of spans in the DOM, other features fetched on demand.
    big = cell_output_locator(page, cells[1]["index"], cells[1]["panel_id"])
    big_spans = big.locator(".ilab-tok")
    expect(big_spans.first).to_be_visible(timeout=30_000)
    assert big_spans.count() == 2000
    assert kernel_eval(page, "print(big.sent_columns)") == "[0]"
    expected = float(kernel_eval(page, "print(float(big.column(5)[10]))"))
    big.locator("select.ilab-select").select_option("5")
    page.wait_for_function(
        "([el, want]) => Math.abs(Number(el.dataset.v) - want) < 1e-6",
        arg=[big_spans.nth(10).element_handle(), expected],
    )
    # A column whose answer never comes (a busy kernel dropped it): after the timeout the widget says the
    # kernel has not answered (not "not exported": a kernel is there) and asking again fetches it.
    kernel_eval(page, DROP_FIRST_REQUEST)
    big.locator("select.ilab-select").select_option("9")
    status = big.locator(".ilab-status")
    expect(status).to_contain_text("No answer from the kernel for feature 9", timeout=15_000)
    expect(status).not_to_contain_text("not exported")
    expected = float(kernel_eval(page, "print(float(big.column(9)[10]))"))
    big.locator("button.ilab-retry").click()
    page.wait_for_function(
        "([el, want]) => Math.abs(Number(el.dataset.v) - want) < 1e-6",
        arg=[big_spans.nth(10).element_handle(), expected],
    )
    assert kernel_eval(page, "print(dropped)") == "[9]"
    big.locator("button.ilab-next").click()
    wait_for_python(page, "big.page", "1")
    expect(big.locator(".ilab-page")).to_contain_text("tokens 2000–3999 of 100000")

    # A sparse feature: jump from one activation to the next, across pages, and back.
    sparse = cell_output_locator(page, cells[2]["index"], cells[2]["panel_id"])
    expect(sparse.locator(".ilab-tok").first).to_be_visible(timeout=30_000)
    sparse.locator("button.ilab-next-active").click()
    wait_for_python(page, "sparse.selected_token", "10")
    sparse.locator("button.ilab-next-active").click()
    wait_for_python(page, "(sparse.selected_token, sparse.page)", "(2500, 1)")
    expect(sparse.locator(".ilab-tok.ilab-selected")).to_have_text(" t2500")
    sparse.locator("button.ilab-prev-active").click()
    wait_for_python(page, "(sparse.selected_token, sparse.page)", "(10, 0)")
    sparse.locator("button.ilab-next-active").click()
    sparse.locator("button.ilab-next-active").click()  # past the last one: round to the first
    wait_for_python(page, "sparse.selected_token", "10")
    expect(sparse.locator(".ilab-status")).to_contain_text("wrapped around")
    assert not dialogs, dialogs
