"""Run notebooks in a real JupyterLab (headless Chromium) and check every cell."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Page

if TYPE_CHECKING:
    from .conftest import LabServer, RunNotebook

pytestmark = pytest.mark.browser


def _notebook(*sources: str) -> dict[str, object]:
    return {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"c{i}",
                "metadata": {},
                "outputs": [],
                "source": src,
            }
            for i, src in enumerate(sources)
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def test_tour(page: Page, run_notebook: RunNotebook, lab_server: LabServer) -> None:
    relpath = "nbs/00_tour.ipynb"
    if not (lab_server.root / relpath).exists():
        pytest.fail(f"{relpath} does not exist yet", pytrace=False)
    cells = run_notebook(page, relpath, timeout_s=600)
    log = lab_server.log_tail()
    assert cells, f"no code cells in {relpath}"
    problems = [
        c
        for c in cells
        if c["execution_count"] is None
        or c["has_error"]
        or c["n_rendered"] != c["n_outputs"]
        or "Error displaying widget" in c["text"]
    ]
    assert not problems, (
        f"{len(problems)} bad cell(s) in {relpath}:\n"
        + json.dumps(problems, indent=1)
        + f"\n--- server log tail ---\n{log}"
    )


def test_error_is_detected(page: Page, run_notebook: RunNotebook, lab_server: LabServer, scratch_dir: Path) -> None:
    nb = scratch_dir / "raises.ipynb"
    nb.write_text(
        json.dumps(
            _notebook(
                "import sys\nprint('to stderr', file=sys.stderr)\nprint('to stdout')",
                "1 + 1",
                "raise ValueError('boom')",
                "print('never runs')",
            )
        )
    )
    relpath = nb.relative_to(lab_server.root).as_posix()
    cells = run_notebook(page, relpath, timeout_s=120)
    msg = json.dumps(cells, indent=1) + f"\n--- server log tail ---\n{lab_server.log_tail()}"
    assert [c["index"] for c in cells] == [0, 1, 2, 3], msg
    stderr, result, raises, after = cells
    assert not stderr["has_error"] and stderr["execution_count"] is not None, msg
    assert "to stderr" in stderr["text"] and "to stdout" in stderr["text"], msg
    assert stderr["n_rendered"] == stderr["n_outputs"] >= 1, msg
    assert not result["has_error"] and "2" in result["text"], msg
    assert raises["has_error"] and raises["error"] == "ValueError: boom", msg
    assert raises["execution_count"] is not None, msg
    assert after["execution_count"] is None and not after["has_error"], msg
    assert not nb.with_name(".ipynb_checkpoints").exists(), "checkpoint written next to notebook"
    assert json.loads(nb.read_text())["cells"][0]["outputs"] == [], "notebook was saved"
