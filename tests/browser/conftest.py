"""Browser harness: a real JupyterLab server driven by Playwright in Debian's Chromium.

The server is the one ``make lab`` starts (``lab/command.py`` and its config: the repository root, the
shipped notebooks saved without outputs) with this harness's port, token and temporary folders.

Fixtures: ``lab_root``, ``lab_server``, ``run_notebook`` (plus the pytest-playwright
overrides ``browser_type_launch_args`` and ``browser_context_args``).  A failing test that
used ``page`` gets a screenshot in its ``tmp_path`` and the server log tail in its report.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
from playwright.sync_api import Locator, Page

from lab.command import lab_command

REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGE_TIMEOUT_MS = 60_000
SERVER_START_TIMEOUT_S = 60.0

# Settings written into JUPYTERLAB_SETTINGS_DIR: no news, never save over repo files,
# keep every cell in the DOM so outputs can be checked and located.
LAB_SETTINGS: dict[str, dict[str, Any]] = {
    "@jupyterlab/apputils-extension/notification": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}


@dataclass(frozen=True)
class LabServer:
    url: str  # http://127.0.0.1:PORT, no trailing slash
    token: str
    root: Path  # the server's root_dir; notebook paths are relative to it
    log_path: Path
    home: Path  # temp folder holding the server's config, data, runtime and TMPDIR

    def log_tail(self, n_chars: int = 4000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"<no server log: {exc}>"
        return text[-n_chars:]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_lab_settings(settings_dir: Path) -> None:
    for plugin, values in LAB_SETTINGS.items():
        path = settings_dir / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def _server_env(home: Path) -> dict[str, str]:
    dirs = {
        "JUPYTER_CONFIG_DIR": home / "config",
        "JUPYTER_DATA_DIR": home / "data",
        "JUPYTER_RUNTIME_DIR": home / "runtime",
        "JUPYTERLAB_SETTINGS_DIR": home / "lab-settings",
        "JUPYTERLAB_WORKSPACES_DIR": home / "lab-workspaces",
        "IPYTHONDIR": home / "ipython",
        "XDG_CONFIG_HOME": home / "xdg-config",
        "XDG_DATA_HOME": home / "xdg-data",
        "MPLCONFIGDIR": home / "matplotlib",
        "TMPDIR": home / "tmp",
    }
    env = dict(os.environ)
    for name, path in dirs.items():
        path.mkdir(parents=True, exist_ok=True)
        env[name] = str(path)
    # The kernel spec says "python": make sure it resolves to this venv.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    # The sys.prefix data dir (kernel spec, anywidget/jupyterlab_widgets lab extensions)
    # stays on Jupyter's path whatever JUPYTER_DATA_DIR says; do not let it be dropped.
    env.pop("JUPYTER_PREFER_ENV_PATH", None)
    env.pop("JUPYTER_PATH", None)
    return env


def _wait_http(url: str, proc: subprocess.Popen[bytes], server: LabServer) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"jupyter lab exited with code {proc.returncode} before answering.\n"
                f"--- server log ---\n{server.log_tail()}"
            )
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return
                last = f"HTTP {resp.status}"
        except (urllib.error.URLError, OSError) as exc:
            last = repr(exc)
        time.sleep(0.25)
    raise RuntimeError(
        f"jupyter lab did not answer {url} within {SERVER_START_TIMEOUT_S:.0f} s "
        f"(last: {last}).\n--- server log ---\n{server.log_tail()}"
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)  # jupyter_server also shuts its kernels down
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def lab_root() -> Path:
    """Server root_dir; notebook paths given to ``run_notebook`` are relative to it.

    Override this fixture (session scope) to serve another folder.
    """
    return REPO_ROOT


@pytest.fixture(scope="session")
def lab_server(lab_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    home = tmp_path_factory.mktemp("jupyterlab")
    env = _server_env(home)
    _write_lab_settings(Path(env["JUPYTERLAB_SETTINGS_DIR"]))
    port = _free_port()
    token = uuid.uuid4().hex
    server = LabServer(
        url=f"http://127.0.0.1:{port}",
        token=token,
        root=lab_root.resolve(),
        log_path=home / "server.log",
        home=home,
    )
    cmd = [
        # the command of `make lab` (its server config; --allow-root as root), then this harness's own settings
        *lab_command(sys.executable),
        "--no-browser", f"--port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={server.root}",
        "--LabApp.expose_app_in_browser=True",
        # .pytest-scratch/ is a hidden folder; checkpoints go to the temp folder, not the repo
        "--ContentsManager.allow_hidden=True",
        f"--FileCheckpoints.checkpoint_dir={home / 'checkpoints'}",
    ]  # fmt: skip
    with server.log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        _wait_http(f"{server.url}/api/status?token={token}", proc, server)
        yield server
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def browser_type_launch_args(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    # Chromium writes crash-report settings and dconf files under $HOME otherwise.
    home = tmp_path_factory.mktemp("chromium-home")
    env = {**os.environ, "HOME": str(home)}
    for var in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME"):
        env[var] = str(home / var.lower())
    return {"executable_path": CHROMIUM, "headless": True, "args": CHROMIUM_ARGS, "env": env}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_context_args, "viewport": {"width": 1400, "height": 1000}}


# --- running notebooks -----------------------------------------------------------------

# JS prelude: find the notebook panel open on `path` (the argument of every evaluate).
_FIND_PANEL = """
const app = window.jupyterapp;
const find = (path) => {
  if (!app) return null;
  for (const w of app.shell.widgets('main')) {
    if (w.context && w.context.path === path && w.content && w.content.model) return w;
  }
  return null;
};
"""


def _js(body: str) -> str:
    """A page function of ``[path, full]`` (the notebook path, a flag), with ``find`` in scope."""
    return "([path, full]) => {" + _FIND_PANEL + body + "}"


_JS_KERNEL_READY = _js(
    """
  const p = find(path);
  if (!p) return false;
  const sc = p.sessionContext;
  // a notebook without kernel metadata asks which kernel to start: take the default
  const accept = document.querySelector('.jp-Dialog .jp-Dialog-button.jp-mod-accept');
  if (accept && !(sc && sc.session)) accept.click();
  return !!(sc && sc.isReady && sc.session && sc.session.kernel
            && sc.session.kernel.status === 'idle');
"""
)

# Clear old outputs and counts in the (unsaved) model, then fire run-all without awaiting.
_JS_RUN_ALL = _js(
    """
  const p = find(path);
  app.shell.activateById(p.id);
  const cells = p.content.model.cells;
  for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i);
    if (c.type === 'code') { c.outputs.clear(); c.executionCount = null; }
  }
  void app.commands.execute('notebook:run-all-cells');
  return p.sessionContext.session ? p.sessionContext.session.id : null;
"""
)

# Snapshot of kernel status, each code cell's model and whether its outputs are in the DOM;
# the rendered text only when `full` (it is polled).
_JS_STATE = _js(
    """
  const p = find(path);
  if (!p) return null;
  const kernel = p.sessionContext.session && p.sessionContext.session.kernel;
  const out = [];
  const cells = p.content.model.cells;
  for (let i = 0; i < cells.length; i++) {
    const m = cells.get(i);
    if (m.type !== 'code') continue;
    const w = p.content.widgets[i];
    const outputs = [];
    for (let j = 0; j < m.outputs.length; j++) {
      const o = m.outputs.get(j);
      const e = o.type === 'error' ? o.toJSON() : {};
      outputs.push({output_type: o.type, mime_types: Object.keys(o.data || {}),
                    ename: e.ename, evalue: e.evalue});
    }
    const area = w && w.node.querySelector('.jp-OutputArea');
    const rendered = area ? area.querySelectorAll(':scope > .jp-OutputArea-child').length : -1;
    out.push({
      index: i,
      execution_count: m.executionCount,
      running: m.executionState === 'running',
      outputs,
      n_rendered: rendered,
      text: area && full ? Array.from(area.querySelectorAll('.jp-OutputArea-output'),
                              (e) => e.innerText).join('\\n') : '',
    });
  }
  return {kernel: kernel ? kernel.status : null, panel_id: p.id, cells: out};
"""
)


def _summarise(cell: dict[str, Any], panel_id: str, max_text: int) -> dict[str, Any]:
    outputs: list[dict[str, Any]] = cell["outputs"]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    mimes = sorted({k for o in outputs for k in o["mime_types"]})
    text: str = cell["text"]
    return {
        "index": cell["index"],  # position among *all* cells of the notebook
        "execution_count": cell["execution_count"],
        "has_error": bool(errors),
        "error": f"{errors[0].get('ename')}: {errors[0].get('evalue')}" if errors else None,
        "n_outputs": len(outputs),
        "n_rendered": cell["n_rendered"],  # output-area children in the DOM (-1: no area)
        "output_types": [o.get("output_type") for o in outputs],
        "mime_types": mimes,
        "text": text if len(text) <= max_text else text[:max_text] + "…",
        "panel_id": panel_id,
    }


def _finished(state: dict[str, Any] | None) -> bool:
    if not state or state["kernel"] != "idle":
        return False
    cells = state["cells"]
    if any(c["running"] for c in cells):
        return False
    counted = all(c["execution_count"] is not None for c in cells)
    errored = any(o.get("output_type") == "error" for c in cells for o in c["outputs"])
    # run-all stops at the first error: later cells keep no count
    rendered = all(c["n_rendered"] == len(c["outputs"]) for c in cells)
    return (counted or errored) and rendered


RunNotebook = Callable[..., list[dict[str, Any]]]


def _delete_session(server: LabServer, session_id: str) -> None:
    """Shut a notebook's kernel down through the REST API (best effort)."""
    req = urllib.request.Request(
        f"{server.url}/api/sessions/{session_id}",
        method="DELETE",
        headers={"Authorization": f"token {server.token}"},
    )
    with contextlib.suppress(OSError), urllib.request.urlopen(req, timeout=10):
        pass


@pytest.fixture
def run_notebook(lab_server: LabServer, tmp_path: Path) -> Iterator[RunNotebook]:
    """``run_notebook(page, relpath, timeout_s=240, max_text=2000) -> list[dict]``.

    Opens ``relpath`` (relative to the server root) in a fresh workspace, waits for its
    kernel, runs all cells (never saves), waits until done and returns one dict per code
    cell: index, execution_count, has_error, error, n_outputs, n_rendered, output_types,
    mime_types, text, panel_id.  The kernels stay up until the test ends.
    """
    sessions: list[str] = []

    def run(page: Page, relpath: str, timeout_s: float = 240, max_text: int = 2000) -> list[dict[str, Any]]:
        page.set_default_timeout(PAGE_TIMEOUT_MS)
        page.set_default_navigation_timeout(PAGE_TIMEOUT_MS)
        workspace = f"pytest-{uuid.uuid4().hex[:8]}"
        page.goto(f"{lab_server.url}/lab/workspaces/{workspace}/tree/{relpath}?token={lab_server.token}")

        def fail(what: str, state: Any = None) -> NoReturn:
            shot = tmp_path / f"run_notebook-{Path(relpath).stem}.png"
            try:
                page.screenshot(path=str(shot), full_page=True)
            except Exception as exc:  # the page may be gone
                shot = Path(f"<no screenshot: {exc}>")
            detail = json.dumps(state, indent=1, default=str)[-3000:] if state else ""
            pytest.fail(
                f"run_notebook({relpath!r}): {what}\nscreenshot: {shot}\n{detail}\n"
                f"--- server log tail ---\n{lab_server.log_tail()}",
                pytrace=False,
            )

        start = time.monotonic()
        try:
            page.wait_for_function(_JS_KERNEL_READY, arg=[relpath, False], timeout=PAGE_TIMEOUT_MS * 2, polling=250)
        except Exception as exc:
            fail(f"notebook panel/kernel not ready: {exc}")
        session_id: str | None = page.evaluate(_JS_RUN_ALL, [relpath, False])
        if session_id:
            sessions.append(session_id)
        deadline = start + timeout_s
        state: dict[str, Any] | None = None
        stable = 0
        while time.monotonic() < deadline:
            page.wait_for_timeout(300)
            state = page.evaluate(_JS_STATE, [relpath, False])
            stable = stable + 1 if _finished(state) else 0
            if stable >= 2:  # seen finished twice in a row: no cell is about to start
                break
        else:
            fail(f"not finished within {timeout_s} s", state)
        state = page.evaluate(_JS_STATE, [relpath, True])
        assert state is not None
        return [_summarise(c, state["panel_id"], max_text) for c in state["cells"]]

    yield run
    for session_id in sessions:
        _delete_session(lab_server, session_id)


def cell_output_locator(page: Page, index: int, panel_id: str | None = None) -> Locator:
    """Output area of cell ``index`` (position among all cells, as in run_notebook's result).

    Use with e.g. ``.locator('.jupyter-widgets')`` / ``.hover()`` / ``.click()``.  Give the
    result's ``panel_id`` when several notebooks are open in the page.
    """
    panel = f"#{panel_id}" if panel_id else ".jp-NotebookPanel:visible"
    return page.locator(f"{panel} .jp-Notebook .jp-Cell").nth(index).locator(".jp-OutputArea")


@pytest.fixture
def output_locator() -> Callable[..., Locator]:
    """Fixture form of ``cell_output_locator(page, index, panel_id=None)``."""
    return cell_output_locator


@pytest.fixture
def scratch_dir(lab_server: LabServer) -> Iterator[Path]:
    """A unique folder under ``<lab root>/.pytest-scratch/`` (removed afterwards)."""
    base = lab_server.root / ".pytest-scratch"
    path = base / uuid.uuid4().hex[:8]
    path.mkdir(parents=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(OSError):
            base.rmdir()  # only if no other run is using it


# --- failure artefacts -----------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when != "call" or not report.failed:
        return report
    funcargs: dict[str, Any] = getattr(item, "funcargs", {})
    page = funcargs.get("page")
    server = funcargs.get("lab_server")
    folder = funcargs.get("tmp_path") or (server.home if isinstance(server, LabServer) else None)
    if isinstance(page, Page) and isinstance(folder, Path):
        shot = folder / f"failure-{re.sub(r'[^A-Za-z0-9_.-]+', '_', item.name)}.png"
        try:
            page.screenshot(path=str(shot), full_page=True)
            report.sections.append(("browser screenshot", str(shot)))
        except Exception as exc:
            report.sections.append(("browser screenshot", f"failed: {exc}"))
    if isinstance(server, LabServer) and "server log tail" not in report.longreprtext:
        report.sections.append(("jupyter server log (tail)", server.log_tail()))
    return report
