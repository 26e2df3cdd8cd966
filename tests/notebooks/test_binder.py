"""Binder: its pins agree with pyproject.toml and the Makefile, and a rehearsal builds and runs the tour."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.notebooks.test_notebooks import MARK, PEAK_CELL

ROOT = Path(__file__).resolve().parents[2]


def _pins(lines: list[str]) -> dict[str, str]:
    pins = {}
    for line in lines:
        match = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s;#]+).*", line)
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def test_binder_installs_the_project_and_its_data_packages():
    lines = [line.strip() for line in (ROOT / "binder" / "requirements.txt").read_text().splitlines()]
    assert ".[lab]" in lines, "binder must install the project itself, with JupyterLab"
    for package in ("interplab-saes-gemma-3-270m", "interplab-transcoders-gemma-3-270m"):
        assert f"./packages/{package}" in lines


def test_binder_torch_matches_makefile():
    make_pin = re.search(r"^TORCH := torch==(\S+)$", (ROOT / "Makefile").read_text(), re.M)
    binder = _pins((ROOT / "binder" / "requirements.txt").read_text().splitlines())
    assert make_pin and binder["torch"].split("+")[0] == make_pin.group(1)
    assert binder["torch"].endswith("+cpu"), "Binder must use the CPU-only torch build"


def test_binder_prepares_the_model_and_starts_on_python_311():
    post = (ROOT / "binder" / "postBuild").read_text()
    assert post.startswith("#!") and "set -e" in post and "interplab prepare" in post
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"


# ---------------------------------------------------------------------------------------------
# The rehearsal: what mybinder.org does, here. A fresh virtual environment gets binder/requirements.txt
# alone (not the dev extras), binder/postBuild prepares an empty cache, and the tour runs in that
# environment's own kernel within the memory bound. Two substitutions: this machine cannot reach the
# PyTorch CPU index, so the `--extra-index-url https://download.pytorch.org/whl/cpu` line is left out and
# pip finds the very same `torch==2.13.0+cpu` wheel on its configured find-links (/opt/wheels here); and
# pip does not byte-compile (PIP_NO_COMPILE). Every other line is used as written. About 4 minutes on
# 2 cores, most of it pip unpacking torch and preparing the two embedded models.

PYTORCH_CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"
TOUR_PEAK_LIMIT_GB = 1.4


LOCK_LINE = "-c ../constraints.txt"


def rehearsal_requirements(text: str) -> str:
    """binder/requirements.txt without the PyTorch CPU index line (the only line this machine cannot use), and
    the lock named by its absolute path (the rehearsal's copy of the file lives outside binder/)."""
    lines = text.splitlines()
    assert PYTORCH_CPU_INDEX in lines, "binder/requirements.txt must take torch from the PyTorch CPU index"
    lines = [f"-c {ROOT / 'constraints.txt'}" if line == LOCK_LINE else line for line in lines]
    return "\n".join(line for line in lines if line != PYTORCH_CPU_INDEX) + "\n"


def test_rehearsal_requirements_change_two_lines():
    text = (ROOT / "binder" / "requirements.txt").read_text()
    kept = rehearsal_requirements(text).splitlines()
    assert len(kept) == len(text.splitlines()) - 1 and "torch==2.13.0+cpu" in kept
    assert f"-c {ROOT / 'constraints.txt'}" in kept


def _run(cmd: list[str], timeout: int, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.binder
def test_binder_rehearsal(tmp_path):
    venv, cache = tmp_path / "binder-venv", tmp_path / "cache"
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(rehearsal_requirements((ROOT / "binder" / "requirements.txt").read_text()))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "INTERPLAB_CACHE")}
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        INTERPLAB_CACHE=str(cache),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        # The second substitution: no byte-compiling at install (a third of torch's install time); Python
        # compiles what the tour imports as it imports it.
        PIP_NO_COMPILE="1",
    )
    started = time.perf_counter()
    _run([sys.executable, "-m", "venv", str(venv)], 120)
    # "." in the file is the project: pip runs from the repository root, as repo2docker does.
    _run([str(venv / "bin" / "pip"), "install", "--quiet", "-r", str(requirements)], 900, cwd=ROOT, env=env)
    installed = _run([str(venv / "bin" / "pip"), "list", "--format=json"], 120, env=env).stdout
    names = {p["name"].lower() for p in json.loads(installed)}
    assert not names & {"pytest", "ruff", "sae-lens", "transformer-lens", "playwright"}, "dev extras leaked in"
    _run(["bash", str(ROOT / "binder" / "postBuild")], 900, cwd=ROOT, env=env)
    assert (cache / "gemma-3-270m" / "interplab-ready").exists() and not any(cache.glob(".gemma-3-270m.*tmp"))

    tour = json.loads((ROOT / "nbs" / "00_tour.ipynb").read_text())
    tour["cells"].append(
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": PEAK_CELL}
    )
    (tmp_path / "tour.ipynb").write_text(json.dumps(tour))
    # The Binder environment's own Jupyter and kernel run the tour, as a user's session would.
    _run(
        [
            str(venv / "bin" / "jupyter"),
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--output",
            "ran.ipynb",
            "--ExecutePreprocessor.timeout=600",
            str(tmp_path / "tour.ipynb"),
        ],
        900,
        cwd=tmp_path,
        env=env,
    )
    ran = json.loads((tmp_path / "ran.ipynb").read_text())
    text = "".join("".join(o.get("text", "")) for o in ran["cells"][-1]["outputs"])
    peak_gb = json.loads(text.split(MARK, 1)[1].splitlines()[0])["VmHWM"] / 1024**2
    elapsed = time.perf_counter() - started
    print(f"Binder rehearsal: {elapsed:.0f} s in all; the tour's kernel peaked at {peak_gb:.2f} GB")
    assert peak_gb < TOUR_PEAK_LIMIT_GB


def test_readme_launches_binder_on_the_tour():
    """The README's Binder badge opens JupyterLab on a notebook that exists."""
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\(https://mybinder\.org/v2/gh/[^/\s]+/[^/\s]+/[^?\s)]+\?labpath=([^)\s]+)\)", readme)
    assert links and all((ROOT / link).is_file() for link in links), links
    assert "nbs/00_tour.ipynb" in links
