"""The documentation site, built as ``make docs`` builds it, works in Chromium over file:// with the network blocked.

The site is built once for the module with ``mkdocs build --strict`` and one small notebook executed
(``INTERPLAB_DOCS_EXECUTE=01_heatmaps``; the other notebooks are exported with their code and text only). Then: an
API page shows a documented function's signature, the notebook's page frames the exported notebook and its widget
draws, and the search finds a function, every request other than file:, data: and blob: aborted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Page, Route

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = "01_heatmaps"
LOCAL_SCHEMES = ("file:", "data:", "blob:")
BUILD_TIMEOUT_S = 900
RENDER_TIMEOUT_MS = 30_000


@dataclass
class Offline:
    """What a page did while only local URLs were allowed."""

    blocked: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def problems(self) -> str:
        return f"blocked={self.blocked} errors={self.errors}"


@pytest.fixture
def offline(page: Page) -> Iterator[Offline]:
    """Abort every request that is not file:, data: or blob:, and record what was blocked and what failed."""
    seen = Offline()

    def route(r: Route) -> None:
        if r.request.url.startswith(LOCAL_SCHEMES):
            r.continue_()
        else:
            seen.blocked.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.on("pageerror", lambda exc: seen.errors.append(str(exc)))
    page.set_default_timeout(RENDER_TIMEOUT_MS)
    yield seen


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``mkdocs build --strict`` into a temporary folder, executing one notebook; the site's folder."""
    from interplab.web_assets import WebAssetsError, prepare_web_assets

    try:
        prepare_web_assets()
    except WebAssetsError as exc:
        pytest.skip(f"web assets unavailable: {exc}")
    tmp = tmp_path_factory.mktemp("docs-site")
    env = {**os.environ, "INTERPLAB_DOCS_EXECUTE": NOTEBOOK, "NO_MKDOCS_2_WARNING": "1"}
    env.setdefault("OMP_NUM_THREADS", "1")
    for var in ("JUPYTER_RUNTIME_DIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "IPYTHONDIR", "MPLCONFIGDIR"):
        (tmp / var.lower()).mkdir()
        env[var] = str(tmp / var.lower())  # the notebook's kernel keeps its files here
    out = tmp / "site"
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    done = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert done.returncode == 0, f"mkdocs build failed:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    assert f"executed and exported {NOTEBOOK}.ipynb" in done.stderr
    return out


@pytest.mark.browser
def test_an_api_page_shows_a_documented_signature(site: Path, page: Page, offline: Offline, tmp_path: Path) -> None:
    page.goto((site / "api" / "loading.html").as_uri())
    signature = page.locator(".doc-signature", has_text="load_model(").first
    signature.wait_for()
    page.screenshot(path=str(tmp_path / "api.png"))
    text = signature.inner_text()
    assert "load_model(" in text and "dtype" in text and "remote" in text, text
    box = signature.bounding_box()
    assert box and box["width"] > 100 and box["height"] > 10, box  # drawn, not hidden
    # the docstring's example renders as code, not as Markdown quotes
    assert page.locator(".doc-contents pre code", has_text=">>> model = load_model()").count() >= 1
    assert page.locator("blockquote", has_text="load_model").count() == 0
    assert not offline.blocked and not offline.errors, offline.problems()


@pytest.mark.browser
def test_a_notebook_page_frames_the_notebook_and_its_widget_draws(
    site: Path, page: Page, offline: Offline, tmp_path: Path
) -> None:
    page.goto((site / "notebooks" / f"{NOTEBOOK}.html").as_uri())
    frame = page.frame_locator("iframe.ilab-notebook")
    tokens = frame.locator(".ilab-heatmap .ilab-tok")
    tokens.first.wait_for()
    page.wait_for_timeout(500)
    page.screenshot(path=str(tmp_path / "notebook.png"))
    backgrounds = tokens.evaluate_all(
        "(spans) => spans.map((s) => s.style.background || getComputedStyle(s).backgroundColor)"
    )
    coloured = [bg for bg in backgrounds if bg and bg not in ("transparent", "rgba(0, 0, 0, 0)")]
    assert len(coloured) > 10, backgrounds[:20]
    box = page.locator("iframe.ilab-notebook").bounding_box()
    assert box and box["height"] > 400, box  # framed at a readable size
    assert not offline.blocked and not offline.errors, offline.problems()


@pytest.mark.browser
def test_the_search_works_offline(site: Path, page: Page, offline: Offline) -> None:
    page.goto((site / "index.html").as_uri())
    page.locator("input.md-search__input").click()
    page.locator("input.md-search__input").fill("set_memory_budget")
    result = page.locator(".md-search-result__link", has_text="set_memory_budget").first
    result.wait_for()
    assert result.is_visible()
    assert not offline.blocked and not offline.errors, offline.problems()
