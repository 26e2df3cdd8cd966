"""The shipped notebooks (``lab/notebooks.py``): what the tests and ``make docs`` run, and how the lab saves them."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import nbformat

from lab.notebooks import ROOT, SHIPPED, pre_save_hook, shipped_notebooks
from tests.docs.test_site import load_hook


def test_the_shipped_notebooks_are_the_ones_git_tracks() -> None:
    """A notebook added to nbs/ and to git must be named in SHIPPED, or no test would run it."""
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "nbs/*.ipynb"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert sorted(str(Path(p).relative_to("nbs").with_suffix("")) for p in tracked) == sorted(SHIPPED)
    assert all(p.is_file() for p in shipped_notebooks()) and shipped_notebooks()[0].name == "00_tour.ipynb"


def _free_untitled() -> Path:
    """The name File > New Notebook would give next in nbs/ (Untitled.ipynb, Untitled1.ipynb, ...)."""
    n = 0
    while (path := ROOT / "nbs" / f"Untitled{n or ''}.ipynb").exists():
        n += 1
    return path


def test_a_scratch_notebook_in_nbs_is_not_collected_nor_published() -> None:
    scratch = _free_untitled()
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), scratch)
    try:
        collected = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
             "tests/notebooks/test_notebooks.py", "tests/docs/test_site.py"],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
        assert "test_notebook_runs[00_tour]" in collected.stdout  # the control: the shipped ones are collected
        assert scratch.stem not in collected.stdout
        site = load_hook("interplab_site")  # make docs executes and publishes these
        published = site.shipped_notebooks()
        assert scratch not in published and published == shipped_notebooks()
        assert scratch.stem not in site.notebooks_to_execute(published, None)
    finally:
        scratch.unlink()


def _ran(notebook: dict[str, Any]) -> dict[str, Any]:
    """``notebook`` as a run in JupyterLab leaves it: outputs, counts, timings, widget state, the kernel's details."""
    out = copy.deepcopy(notebook)
    for i, cell in enumerate(out["cells"]):
        if cell["cell_type"] == "code":
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "ran\n"}]
            cell["execution_count"] = i + 1
            cell["metadata"]["execution"] = {"iopub.status.busy": "2026-12-03T10:00:00Z"}
    out["metadata"]["language_info"] = {"name": "python", "version": "3.11.7", "mimetype": "text/x-python"}
    out["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    return out


def test_a_shipped_notebook_is_saved_as_it_is_in_git() -> None:
    path = ROOT / "nbs" / "00_tour.ipynb"
    on_disk = path.read_text(encoding="utf-8")
    model = {"type": "notebook", "content": _ran(json.loads(on_disk))}
    pre_save_hook(model=model, path="/nbs/00_tour.ipynb", contents_manager=SimpleNamespace(root_dir=str(ROOT)))
    saved = nbformat.writes(nbformat.from_dict(model["content"])) + "\n"  # what the server writes
    assert saved == on_disk


def test_other_notebooks_keep_their_outputs(tmp_path: Path) -> None:
    """The control: the same run of a notebook that is not shipped (elsewhere, or a copy in another root) is saved
    as it is."""
    ran = _ran(json.loads((ROOT / "nbs" / "00_tour.ipynb").read_text(encoding="utf-8")))
    for root, path in ((ROOT, "nbs/Untitled.ipynb"), (ROOT, "00_tour.ipynb"), (tmp_path, "nbs/00_tour.ipynb")):
        model = {"type": "notebook", "content": copy.deepcopy(ran)}
        pre_save_hook(model=model, path=path, contents_manager=SimpleNamespace(root_dir=str(root)))
        assert model["content"] == ran, (root, path)
    text = {"type": "file", "format": "text", "content": "notes"}
    pre_save_hook(model=text, path="nbs/00_tour.ipynb", contents_manager=SimpleNamespace(root_dir=str(ROOT)))
    assert text["content"] == "notes"
