"""``make lab`` in a real JupyterLab: the server the harness starts is ``make lab``'s (``lab/command.py``, its config).

Its printed URL opens the tour, the file browser reaches the repository root (README.md, ARCHITECTURE.md),
and a shipped notebook saved after a run is stored as git has it, while a user's notebook keeps its outputs.
"""

from __future__ import annotations

import contextlib
import json
import re
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat
import pytest
from playwright.sync_api import Page

from lab.notebooks import TOUR

if TYPE_CHECKING:
    from .conftest import LabServer

pytestmark = pytest.mark.browser
TIMEOUT_MS = 120_000

# Wait until the notebook panel open on `path` has a kernel that has told the notebook its language details.
_JS_KERNEL_INFO = """([path]) => {
  const app = window.jupyterapp;
  if (!app) return false;
  const p = Array.from(app.shell.widgets('main')).find((w) => w.context && w.context.path === path);
  const accept = document.querySelector('.jp-Dialog .jp-Dialog-button.jp-mod-accept');
  if (accept) accept.click();  // a notebook without a kernelspec asks which kernel
  const info = p && p.content.model && p.content.model.getMetadata('language_info');
  return !!(info && info.version && p.sessionContext.session);
}"""

# What a run leaves in the notebook model (outputs, counts, widget state), then a save through the server.
_JS_RUN_AND_SAVE = """async ([path]) => {
  const app = window.jupyterapp;
  const p = Array.from(app.shell.widgets('main')).find((w) => w.context && w.context.path === path);
  const cells = p.content.model.cells;
  for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i);
    if (c.type === 'code') {
      c.outputs.add({output_type: 'stream', name: 'stdout', text: 'ran\\n'});
      c.executionCount = i + 1;
    }
  }
  p.content.model.setMetadata('widgets', {'application/vnd.jupyter.widget-state+json': {state: {}}});
  await p.context.save();
  return p.sessionContext.session.id;
}"""


def _printed_url(server: LabServer) -> str:
    """The URL the server printed for the browser (the harness's token given on the command line reads '...')."""
    found = re.search(r"http://127\.0\.0\.1:\d+/\S*", server.log_path.read_text(errors="replace"))
    assert found, server.log_tail()
    return found.group(0)


def _shut_down(server: LabServer, session_id: str | None) -> None:
    if not session_id:
        return
    req = urllib.request.Request(
        f"{server.url}/api/sessions/{session_id}", method="DELETE", headers={"Authorization": f"token {server.token}"}
    )
    with contextlib.suppress(OSError), urllib.request.urlopen(req, timeout=10):
        pass


def test_printed_url_opens_the_tour_and_the_file_browser_reaches_the_root(page: Page, lab_server: LabServer) -> None:
    url = _printed_url(lab_server)
    assert url.startswith(f"{lab_server.url}/lab/tree/{TOUR}?token="), url
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url.split("?token=")[0] + f"?token={lab_server.token}")
    page.wait_for_function(_JS_KERNEL_INFO, arg=[TOUR], timeout=TIMEOUT_MS, polling=250)
    current = page.evaluate("() => window.jupyterapp.shell.currentWidget.context.path")
    assert current == TOUR
    session_id = page.evaluate(
        "([path]) => Array.from(window.jupyterapp.shell.widgets('main'))"
        ".find((w) => w.context && w.context.path === path).sessionContext.session.id",
        [TOUR],
    )
    try:
        page.evaluate("() => window.jupyterapp.commands.execute('filebrowser:activate')")
        page.locator(".jp-FileBrowser .jp-BreadCrumbs-home").click()
        listing = page.locator(".jp-FileBrowser .jp-DirListing-content")
        for name in ("README.md", "ARCHITECTURE.md", "nbs"):
            listing.locator(".jp-DirListing-itemText", has_text=re.compile(rf"^{re.escape(name)}$")).wait_for()
    finally:
        _shut_down(lab_server, session_id)


def _run_and_save(page: Page, server: LabServer, relpath: str) -> None:
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(f"{server.url}/lab/workspaces/save-{Path(relpath).stem}/tree/{relpath}?token={server.token}")
    page.wait_for_function(_JS_KERNEL_INFO, arg=[relpath], timeout=TIMEOUT_MS, polling=250)
    session_id = page.evaluate(_JS_RUN_AND_SAVE, [relpath])
    _shut_down(server, session_id)


def test_a_shipped_notebook_saved_after_a_run_is_stored_as_git_has_it(
    page: Page, lab_server: LabServer, scratch_dir: Path
) -> None:
    tour = lab_server.root / TOUR
    original = tour.read_bytes()
    # the control: a notebook of the user's own, run and saved the same way, keeps its outputs
    mine = scratch_dir / "mine.ipynb"
    mine.write_text(tour.read_text(encoding="utf-8"), encoding="utf-8")
    _run_and_save(page, lab_server, mine.relative_to(lab_server.root).as_posix())
    kept = nbformat.read(mine, as_version=4)
    code = [c for c in kept.cells if c.cell_type == "code"]
    assert code and all(c.outputs and c.execution_count for c in code)
    assert "widgets" in kept.metadata and "version" in kept.metadata.language_info
    try:
        _run_and_save(page, lab_server, TOUR)
        saved = tour.read_bytes()
        stored = json.loads(saved)
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in stored["cells"])
        assert saved == original, "the tour saved through the server differs from git's copy"
    finally:
        if tour.read_bytes() != original:
            tour.write_bytes(original)
