"""export_html: executed widget state in the page, local relative scripts only, clear errors.

The browser half (the page really renders over file:// with the network cut) is in
tests/browser/test_export_html.py.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest

from interplab import web_assets
from interplab.__main__ import _prepare_web
from interplab.__main__ import main as cli
from interplab.export import STATIC_DIR, export_html, has_widget_state, page_path
from interplab.web_assets import PACKAGES, WebAssetsError, prepare_web_assets

TOKENS = ["a", " <img src=x onerror=alert(1)>", "\n", " b"]
VALUES = [0.0, 1.0, -1.0, 2.0]
# A token that would end the state's <script> element if the page did not escape it.
SCRIPT_TOKENS = ["</script><script>alert(2)</script>", " ok"]
HEATMAP_CELL = f"import interplab as ilab\n\nilab.widgets.TokenHeatmap({TOKENS!r}, {VALUES!r})"
SCRIPT_CELL = f"ilab.widgets.TokenHeatmap({SCRIPT_TOKENS!r}, [1.0, 0.0])"


def write_notebook(path: Path, cells: list[Any]) -> Path:
    """Write nbformat cells as a python3 notebook (not executed)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = cells
    nbformat.write(nb, path)
    return path


def write_small_notebook(folder: Path) -> Path:
    """A two-cell notebook with untrusted-looking tokens (not executed)."""
    cells = [
        nbformat.v4.new_markdown_cell("# Tokens"),
        nbformat.v4.new_code_cell(HEATMAP_CELL),
        nbformat.v4.new_code_cell(SCRIPT_CELL),
    ]
    return write_notebook(folder / "small.ipynb", cells)


def export_code(folder: Path, name: str, source: str) -> Path:
    """Run one code cell in a real kernel and export it to ``folder/built/NAME.html`` (web assets prepared)."""
    ensure_web_assets()
    path = write_notebook(folder / f"{name}.ipynb", [nbformat.v4.new_code_cell(source)])
    with kernel_home(folder / "home"):
        return export_html(path, folder / "built" / f"{name}.html", execute=True)


def ensure_web_assets() -> None:
    """Prepare the pinned web assets once (npm); skip when that is impossible here."""
    try:
        prepare_web_assets()
    except WebAssetsError as exc:
        pytest.skip(f"web assets unavailable: {exc}")


@contextlib.contextmanager
def kernel_home(folder: Path) -> Iterator[None]:
    """Keep the kernel's runtime, config and IPython files out of the home folder."""
    with pytest.MonkeyPatch.context() as mp:
        for var in ("JUPYTER_RUNTIME_DIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "IPYTHONDIR", "MPLCONFIGDIR"):
            path = folder / var.lower()
            path.mkdir(parents=True, exist_ok=True)
            mp.setenv(var, str(path))
        yield


def widget_state(html: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/vnd\.jupyter\.widget-state\+json">(.*?)</script>', html, re.S)
    assert m, "no widget-state script in the page"
    return json.loads(m.group(1))


def script_srcs(html: str) -> list[str]:
    return re.findall(r"<script\b[^>]*\bsrc=\"([^\"]*)\"", html)


@pytest.fixture(scope="module")
def small_export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, bytes]:
    """(notebook, html, the notebook's bytes before export): one kernel run for the module."""
    ensure_web_assets()
    folder = tmp_path_factory.mktemp("export")
    nb = write_small_notebook(folder)
    before = nb.read_bytes()
    with kernel_home(folder / "home"):
        html = export_html(nb, folder / "site" / "small.html")
    return nb, html, before


def test_state_holds_the_heatmap_with_binary_buffers(small_export: tuple[Path, Path, bytes]) -> None:
    _, html_path, _ = small_export
    state = widget_state(html_path.read_text(encoding="utf-8"))
    assert state["version_major"] == 2
    heatmaps = [m for m in state["state"].values() if m["model_module"] == "anywidget"]
    assert len(heatmaps) == 2
    heatmap = next(m for m in heatmaps if m["state"]["vocab"][0] == "a")
    assert "ilab-heatmap" in heatmap["state"]["_esm"]
    assert sorted(heatmap["state"]["vocab"]) == sorted(set(TOKENS))
    buffers = {tuple(b["path"]): b for b in heatmap["buffers"]}
    for trait in ("values", "token_ids", "doc_starts"):
        assert (trait, "view") in buffers, f"{trait} is not a binary buffer"
        assert buffers[trait, "view"]["encoding"] == "base64"
    values = np.frombuffer(base64.b64decode(buffers["values", "view"]["data"]), dtype=np.float32)
    assert values.tolist() == VALUES
    vocab = heatmap["state"]["vocab"]
    ids = np.frombuffer(base64.b64decode(buffers["token_ids", "view"]["data"]), dtype=np.int32)
    assert [vocab[i] for i in ids] == TOKENS


def test_scripts_are_local_relative_files(small_export: tuple[Path, Path, bytes]) -> None:
    _, html_path, _ = small_export
    html = html_path.read_text(encoding="utf-8")
    srcs = script_srcs(html)
    assert f"{STATIC_DIR}/require.js" in srcs
    assert not [s for s in srcs if "://" in s or s.startswith("/")], srcs
    assert not re.search(r"<script\b[^>]*\bsrc=[\"']?(https?:)?//", html)
    # the renderer is added by an inline script, and require is told where anywidget lives
    assert f"'{STATIC_DIR}/embed-amd.js'" in html
    assert f'"anywidget": "{STATIC_DIR}/anywidget"' in html
    for name in PACKAGES:
        copied = html_path.parent / STATIC_DIR / name
        assert copied.is_file() and copied.read_bytes() == (web_assets.web_dir() / name).read_bytes()
    assert "cdnjs.cloudflare.com" not in html and "unpkg.com" not in html and "cdn.jsdelivr.net" not in html


def test_untrusted_tokens_cannot_end_the_state_script(small_export: tuple[Path, Path, bytes]) -> None:
    _, html_path, _ = small_export
    html = html_path.read_text(encoding="utf-8")
    assert "</script><script>alert(2)" not in html
    state = widget_state(html)  # still parses, with the token intact
    vocabs = [m["state"].get("vocab", []) for m in state["state"].values()]
    assert any(SCRIPT_TOKENS[0] in v for v in vocabs)


def test_source_notebook_is_left_alone(small_export: tuple[Path, Path, bytes]) -> None:
    nb, _, before = small_export
    assert nb.read_bytes() == before
    assert not has_widget_state(nbformat.read(nb, as_version=4))
    assert not list(nb.parent.glob("*.html")), "nothing is written beside the notebook"


def test_export_into_a_folder_and_without_execution(tmp_path: Path) -> None:
    ensure_web_assets()
    nb = write_small_notebook(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    html = export_html(nb, out, execute=False)  # no kernel: code only, no widget state
    assert html == out / "small.html"
    text = html.read_text(encoding="utf-8")
    assert "widget-state+json" not in text
    assert (out / STATIC_DIR / "require.js").is_file()
    assert not list(out.glob(".*partial")) and not list((out / STATIC_DIR).glob(".*partial"))


def test_a_trailing_slash_means_a_folder_and_a_file_gets_html(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's ``export_html(nb, "out/")`` writes ``out/NAME.html`` with its scripts inside ``out/``."""
    ensure_web_assets()
    nb = write_small_notebook(tmp_path)
    monkeypatch.chdir(tmp_path)
    html = export_html(nb, "out/", execute=False)
    assert html == Path("out") / "small.html" and html.is_file()
    assert (tmp_path / "out" / STATIC_DIR / "require.js").is_file()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [STATIC_DIR, "small.html"]
    assert not (tmp_path / STATIC_DIR).exists(), "no scripts beside the folder"
    page = export_html(nb, tmp_path / "report", execute=False)  # a file path without .html
    assert page == tmp_path / "report.html" and page.is_file() and not (tmp_path / "report").exists()


@pytest.mark.parametrize(("out", "page"), [
    ("out/", "out/small.html"), ("deep/er/", "deep/er/small.html"), ("existing", "existing/small.html"),
    ("page.html", "page.html"), ("Page.HTM", "Page.HTM"), ("report", "report.html"), ("v1.2", "v1.2.html"),
])  # fmt: skip
def test_where_the_page_goes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, out: str, page: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "existing").mkdir()
    assert page_path(Path("nbs/small.ipynb"), out) == Path(page)
    with pytest.raises(TypeError, match=r"out_path must be a folder or an \.html file path, got NoneType"):
        page_path(Path("nbs/small.ipynb"), None)  # type: ignore[arg-type]


def test_cli_export(tmp_path: Path) -> None:
    ensure_web_assets()
    nb = write_small_notebook(tmp_path)
    assert cli(["export", str(nb), "--out", str(tmp_path / "docs"), "--no-execute"]) == 0
    assert (tmp_path / "docs" / "small.html").is_file()
    assert (tmp_path / "docs" / STATIC_DIR / "anywidget.js").is_file()
    with pytest.raises(SystemExit, match="give a folder"):
        cli(["export", str(nb), str(nb), "--out", str(tmp_path / "one.html")])


def test_missing_notebook_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.ipynb"
    with pytest.raises(FileNotFoundError, match=r"nope\.ipynb"):
        export_html(missing, tmp_path / "x.html")


@pytest.mark.parametrize("name", ["notes.txt", "folder.ipynb"])
def test_not_a_notebook(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    if name.endswith(".ipynb"):
        path.mkdir()
    else:
        path.write_text("hello")
    with pytest.raises(ValueError, match=r"not a notebook.*\.ipynb"):
        export_html(path, tmp_path / "x.html")


def test_missing_web_assets_say_how_to_prepare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERPLAB_CACHE", str(tmp_path / "cache"))
    nb = write_small_notebook(tmp_path)
    with pytest.raises(WebAssetsError, match=r"python -m interplab prepare"):
        export_html(nb, tmp_path / "x.html")  # raised before any kernel starts
    assert not (tmp_path / "x.html").exists()


def test_prepare_without_npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("INTERPLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(web_assets.shutil, "which", lambda _name: None)
    with pytest.raises(WebAssetsError, match="npm"):
        prepare_web_assets()
    with caplog.at_level(logging.WARNING):
        _prepare_web()  # what `python -m interplab prepare` does: warn, do not fail
    assert "Skipped the web assets" in caplog.text


def test_prepare_is_idempotent(monkeypatch: pytest.MonkeyPatch) -> None:
    ensure_web_assets()

    def no_npm(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("npm ran although the assets were ready")

    monkeypatch.setattr(web_assets.subprocess, "run", no_npm)
    assert prepare_web_assets() == web_assets.web_dir()
    manifest = json.loads((web_assets.web_dir() / "manifest.json").read_text())
    assert manifest == {name: pkg.spec for name, pkg in PACKAGES.items()}


def test_exported_state_holds_no_markup_whatever_the_strings(tmp_path):
    cell = (
        "import interplab as ilab\n"
        "ilab.widgets.TokenHeatmap(['<!--', '<script', '</script>', ']]>', ' ok'], [1, 2, 3, 4, 5])"
    )
    html = export_code(tmp_path, "inject", cell)
    text = html.read_text()
    tag = '<script type="application/vnd.jupyter.widget-state+json">'
    start = text.index(tag) + len(tag)
    body = text[start : text.index("</script>", start)]
    assert "<" not in body and ">" not in body, "markup inside the embedded state"
    vocab = [m["state"].get("vocab") for m in json.loads(body)["state"].values()]
    assert ["<!--", "<script", "</script>", "]]>", " ok"] in vocab, "the strings are kept exactly"
