"""Exported HTML renders its widgets in Chromium over file://, with every network request aborted.

Uses the pytest-playwright ``page`` fixture with the Chromium settings of this folder's conftest;
no JupyterLab server is started.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Page, Route

from interplab.export import export_html
from tests.export.test_export import SCRIPT_TOKENS, ensure_web_assets, export_code, kernel_home, write_small_notebook
from tests.notebooks.test_notebooks import export_checked

REPO_ROOT = Path(__file__).resolve().parents[2]
HEATMAP_NOTEBOOKS = [REPO_ROOT / "nbs" / "01_heatmaps.ipynb"]
LOCAL_SCHEMES = ("file:", "data:", "blob:")
RENDER_TIMEOUT_MS = 30_000
# Per token span: its text, classes, inline background, size, and whether it paints.
_SPANS = """(root) => Array.from(root.querySelectorAll('.ilab-tok'), (e) => {
  const r = e.getBoundingClientRect();
  const cs = getComputedStyle(e);
  return {text: e.textContent, cls: e.className, bg: e.style.background || cs.backgroundColor,
          w: r.width, h: r.height, opacity: Number(cs.opacity), visibility: cs.visibility,
          weight: Number(cs.fontWeight)};
})"""


@dataclass
class Offline:
    """What a page did while only local URLs were allowed."""

    blocked: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    def problems(self) -> str:
        return f"blocked={self.blocked} dialogs={self.dialogs} errors={self.errors} console={self.console_errors}"


@pytest.fixture
def offline(page: Page) -> Iterator[Offline]:
    """Abort every request that is not file://, data: or blob:, and record what happened."""
    seen = Offline()

    def route(r: Route) -> None:
        url = r.request.url
        if url.startswith(LOCAL_SCHEMES):
            r.continue_()
        else:
            seen.blocked.append(url)
            r.abort()

    def dialog(d) -> None:  # type: ignore[no-untyped-def]
        seen.dialogs.append(f"{d.type}: {d.message}")
        d.dismiss()

    page.route("**/*", route)
    page.on("dialog", dialog)
    page.on("pageerror", lambda exc: seen.errors.append(str(exc)))
    page.on("console", lambda m: seen.console_errors.append(m.text) if m.type == "error" else None)
    yield seen


def _colored(bg: str) -> bool:
    return bool(bg) and bg not in ("transparent", "rgba(0, 0, 0, 0)")


@pytest.mark.browser
def test_exported_heatmap_renders_offline(page: Page, offline: Offline, tmp_path: Path) -> None:
    ensure_web_assets()
    nb = write_small_notebook(tmp_path)
    with kernel_home(tmp_path / "home"):
        export_html(nb, tmp_path / "built" / "small.html")
    # The page and its interplab-static/ folder keep working when moved together.
    site = tmp_path / "moved"
    shutil.move(tmp_path / "built", site)

    page.goto((site / "small.html").as_uri())
    page.wait_for_selector(".ilab-heatmap .ilab-tok", timeout=RENDER_TIMEOUT_MS)
    page.wait_for_function("document.querySelectorAll('.ilab-heatmap').length >= 2", timeout=RENDER_TIMEOUT_MS)
    page.wait_for_timeout(500)  # give any injected onerror handler time to fire
    page.screenshot(path=str(tmp_path / "export.png"), full_page=True)

    roots = page.locator(".ilab-heatmap")
    assert roots.count() == 2
    first, second = roots.nth(0), roots.nth(1)
    spans = first.evaluate(_SPANS)
    assert [s["text"] for s in spans] == ["a", " <img src=x onerror=alert(1)>", "↵", " b"]
    assert not _colored(spans[0]["bg"]), spans[0]  # value 0
    assert all(_colored(s["bg"]) for s in spans[1:]), spans  # 1, -1, 2
    assert spans[1]["bg"] != spans[2]["bg"], "positive and negative values share a colour"
    # untrusted token text stays text
    assert " <img src=x onerror=alert(1)>" in first.text_content()
    assert first.locator("img").count() == 0
    # the newline token is a faint, visible symbol (a light glyph at full colour: readable on any heat colour)
    newline = spans[2]
    assert "ilab-faint" in newline["cls"] and "ilab-faint" not in spans[0]["cls"]
    assert newline["w"] > 0 and newline["h"] > 0 and newline["visibility"] == "visible"
    assert newline["weight"] < spans[0]["weight"] and newline["opacity"] == 1
    # a token holding </script> did not break out of the page's state script
    assert [s["text"] for s in second.evaluate(_SPANS)] == SCRIPT_TOKENS
    runnable = "Array.from(document.scripts).filter((s) => !s.type && s.textContent.includes('alert(2)')).length"
    assert page.evaluate(runnable) == 0

    assert not offline.blocked and not offline.dialogs and not offline.errors, offline.problems()
    assert not offline.console_errors, offline.problems()


@pytest.mark.browser
@pytest.mark.notebook
@pytest.mark.parametrize("notebook", HEATMAP_NOTEBOOKS, ids=[p.stem for p in HEATMAP_NOTEBOOKS])
def test_heatmap_notebook_renders_offline(page: Page, offline: Offline, tmp_path: Path, notebook: Path) -> None:
    ensure_web_assets()
    with kernel_home(tmp_path / "home"):
        html = export_checked(notebook, tmp_path)  # the notebook's run: its cells and memory checked

    page.goto(html.as_uri())
    page.wait_for_selector(".ilab-heatmap .ilab-tok", timeout=RENDER_TIMEOUT_MS)
    page.wait_for_timeout(500)
    page.screenshot(path=str(tmp_path / f"{notebook.stem}.png"), full_page=True)

    n_roots = page.locator(".ilab-heatmap").count()
    assert n_roots > 0
    # every heatmap that shows tokens colours some of them
    per_root = page.locator(".ilab-heatmap").evaluate_all(
        f"(roots) => roots.map((root) => ({_SPANS})(root).map((s) => s.bg))"
    )
    for i, backgrounds in enumerate(per_root):
        if backgrounds:
            assert any(_colored(bg) for bg in backgrounds), f"heatmap {i} of {n_roots} has no coloured token"
    assert not offline.blocked and not offline.dialogs and not offline.errors, offline.problems()


#: Strings that end or derail a <script> element's text when embedded unescaped: an unclosed comment
#: opener followed by a script opener (the "double escaped" parser state, where the real </script> no
#: longer closes the state), a closer, and a CDATA end.
BREAKERS = ["<!--", "<script", "</script>", "]]>", "<!--<script>x", " after"]
_INJECTION_CELL = f"""import numpy as np
import interplab as ilab

display(ilab.widgets.TokenHeatmap({BREAKERS!r}, np.arange({len(BREAKERS)}, dtype=np.float32), label="<!--<script"))
grid = ilab.patching.PatchingResult(values=np.eye(2, 3, dtype=np.float32), clean_baseline=1.0, corrupt_baseline=0.0,
                                    site="resid_pre", tokens=["<!--", "<script", "]]>"], positions=[0, 1, 2])
display(ilab.widgets.PatchingGrid(grid))
ilab.widgets.TokenHeatmap(["an", " unrelated", " widget"], [1.0, 2.0, 3.0])
"""


@pytest.mark.browser
def test_no_string_in_widget_state_blanks_the_page(page: Page, offline: Offline, tmp_path: Path) -> None:
    """An unclosed <!-- then <script anywhere in the state leaves every widget of the page working."""
    html = export_code(tmp_path, "breakers", _INJECTION_CELL)
    page.goto(html.as_uri())
    page.wait_for_function("document.querySelectorAll('.ilab-heatmap').length >= 2", timeout=RENDER_TIMEOUT_MS)
    page.wait_for_selector(".ilab-patching .ilab-pg-cell", timeout=RENDER_TIMEOUT_MS)
    page.wait_for_timeout(500)
    page.screenshot(path=str(tmp_path / "breakers.png"), full_page=True)

    roots = page.locator(".ilab-heatmap")
    assert roots.count() == 2, "every widget renders, the one holding the strings and the unrelated one"
    assert [s["text"] for s in roots.nth(0).evaluate(_SPANS)] == BREAKERS, "the strings stay text, exactly"
    assert [s["text"] for s in roots.nth(1).evaluate(_SPANS)] == ["an", " unrelated", " widget"]
    grid_text = page.locator(".ilab-patching").first.text_content() or ""
    assert "<script" in grid_text and "]]>" in grid_text, grid_text[:300]
    assert page.evaluate("Array.from(document.scripts).filter((s) => s.textContent.includes('<script>x')).length") == 0
    assert not offline.blocked and not offline.dialogs and not offline.errors, offline.problems()
