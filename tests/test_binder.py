"""Binder's pins must agree with pyproject.toml and the Makefile's torch pin."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pins(lines: list[str]) -> dict[str, str]:
    pins = {}
    for line in lines:
        match = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s;#]+).*", line)
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def test_binder_pins_agree_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _pins(project["dependencies"] + project["optional-dependencies"]["lab"])
    binder_lines = (ROOT / "binder" / "requirements.txt").read_text().splitlines()
    binder = _pins(binder_lines)
    assert declared, "pyproject.toml pins nothing"
    for name, version in declared.items():
        assert binder.get(name) == version, f"binder pins {name}=={binder.get(name)}, pyproject {version}"
    assert "." in [line.strip() for line in binder_lines], "binder must install the project itself"


def test_binder_torch_matches_makefile():
    make_pin = re.search(r"^TORCH := torch==(\S+)$", (ROOT / "Makefile").read_text(), re.M)
    binder = _pins((ROOT / "binder" / "requirements.txt").read_text().splitlines())
    assert make_pin and binder["torch"].split("+")[0] == make_pin.group(1)
    assert binder["torch"].endswith("+cpu"), "Binder must use the CPU-only torch build"


def test_binder_prepares_the_model_and_starts_on_python_311():
    post = (ROOT / "binder" / "postBuild").read_text()
    assert post.startswith("#!") and "set -e" in post and "interplab prepare" in post
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"
