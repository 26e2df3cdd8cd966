"""Bad inputs of ilab.export_html: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

import interplab as ilab
from tests.contracts.rows import Ctx, Row, T, V


def _notebook(c: Ctx) -> Path:
    path = c.tmp / "not-a-notebook.txt"
    path.write_text("hello")
    return path


def _real_notebook(c: Ctx) -> Path:
    path = c.tmp / "real.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), path)
    return path


ROWS: list[Row] = [
    Row(
        "ilab.export_html",
        lambda c: ilab.export_html(c.tmp / "none.ipynb", c.tmp),
        FileNotFoundError,
        r"none\.ipynb' does not exist",
    ),
    Row("ilab.export_html", lambda c: ilab.export_html(_notebook(c), c.tmp), V, "is not a notebook"),
    Row(
        "ilab.export_html",
        lambda c: ilab.export_html(_real_notebook(c), None),
        T,
        r"out_path must be a folder or an \.html file path, got NoneType",
    ),
]
