"""``make lab``'s command (``lab/command.py``): Jupyter's root refusal, the repository root, the tour's URL."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from traitlets.config.loader import PyFileConfigLoader

from lab.command import CONFIG, lab_command
from lab.notebooks import ROOT, TOUR, pre_save_hook

START_TIMEOUT_S = 120.0


def test_allow_root_is_passed_only_as_root() -> None:
    assert "--allow-root" in lab_command("python", uid=0)
    assert "--allow-root" not in lab_command("python", uid=1000)
    # this process's own user decides by default (root here, in a container)
    assert ("--allow-root" in lab_command()) == (os.geteuid() == 0)
    assert f"--config={CONFIG}" in lab_command() and CONFIG.is_file()


def test_make_lab_runs_the_lab_command() -> None:
    recipe = re.search(r"^lab: setup\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M)
    assert recipe and recipe.group(1).strip() == "$(PY) -m lab", recipe


def test_server_config_serves_the_root_and_opens_the_tour() -> None:
    config = PyFileConfigLoader(CONFIG.name, str(CONFIG.parent)).load_config()
    assert Path(config.ServerApp.root_dir) == ROOT
    assert config.LabApp.default_url == f"/lab/tree/{TOUR}" and (ROOT / TOUR).is_file()
    assert config.ContentsManager.pre_save_hook.__name__ == pre_save_hook.__name__


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_python_m_lab_starts_as_this_user_and_prints_the_tour_url(tmp_path: Path) -> None:
    """What ``make lab`` runs starts (as root here: Jupyter refuses root without ``--allow-root``), serves the
    repository root and prints a URL that opens the tour."""
    env = {**os.environ, **{f"JUPYTER_{d}_DIR": str(tmp_path / d.lower()) for d in ("CONFIG", "DATA", "RUNTIME")}}
    port = _free_port()
    log_path = tmp_path / "server.log"
    extra = ["--no-browser", f"--port={port}", "--ServerApp.port_retries=0"]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lab", *extra], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        url = None
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.25)
            found = re.search(rf"http://127\.0\.0\.1:{port}/\S+", log_path.read_text(errors="replace"))
            url = found.group(0) if found else None
        log = log_path.read_text(errors="replace")
        assert url is not None, f"no URL printed (exit code {proc.poll()}):\n{log[-3000:]}"
        assert url.startswith(f"http://127.0.0.1:{port}/lab/tree/{TOUR}?token="), url
        token = url.split("token=", 1)[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents?token={token}", timeout=30) as resp:
            names = {item["name"] for item in json.load(resp)["content"]}
        assert {"README.md", "ARCHITECTURE.md", "nbs"} <= names, names
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
