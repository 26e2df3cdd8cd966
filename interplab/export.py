"""export_html: a notebook as a standalone HTML page whose widgets render with no kernel and no network.

Widget state is what makes a static page interactive-looking: nbclient stores it in the
notebook's metadata when it executes the notebook, and nbconvert writes it into the page.
The page's scripts (require.js, the Jupyter widgets HTML manager, anywidget) are copied
from the interplab cache (see :mod:`interplab.web_assets`) into ``interplab-static/``
beside the HTML and referenced by relative URLs, so the page works over ``file://`` and
from any web server, and keeps working when the folder is moved as a whole.

Example
-------
>>> from interplab import export_html
>>> export_html("nbs/01_heatmaps.ipynb", "out/01_heatmaps.html")    # executes it if needed
PosixPath('out/01_heatmaps.html')
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

from interplab.core.storage.atomic import make_dirs, write_bytes
from interplab.web_assets import web_assets

logger = logging.getLogger(__name__)

#: Folder beside the HTML holding its scripts (shared by all pages exported to one folder).
STATIC_DIR = "interplab-static"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
#: Widget modules the vendored scripts provide; any other one cannot render offline.
PROVIDED_MODULES = frozenset(
    {"@jupyter-widgets/base", "@jupyter-widgets/controls", "@jupyter-widgets/output", "anywidget"}
)

# nbconvert's "lab" template with every CDN script replaced by a local one or dropped:
# - require.js from STATIC_DIR, and require told where the `anywidget` AMD module is. The
#   widget renderer (embed-amd.js) asks require for a widget's module first and only falls
#   back to a CDN on failure; data-jupyter-widgets-cdn points that fallback at a folder that
#   does not exist, so a module that is not provided fails locally instead of going online.
# - MathJax and mermaid are CDN-only in nbconvert: left out (maths shows as TeX source).
_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}
<script src="STATIC/require.js" data-jupyter-widgets-cdn="STATIC/no-cdn/"></script>
<script>requirejs.config({paths: {"anywidget": "STATIC/anywidget"}});</script>
{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
""".replace("STATIC", STATIC_DIR)

_MATH = re.compile(r"\$[^$\n]+\$|\\\(|\\\[")


def script_safe_json(text: str) -> str:
    """JSON text safe inside an HTML ``<script>`` element, whatever strings it holds.

    nbconvert only escapes ``/``, so a string holding ``<!--`` then ``<script`` (a prompt that quotes
    HTML) switches the HTML parser into a state where ``</script>`` no longer ends the element, and
    the page's widget state (every widget, not only that one) never parses. Escaping ``<``, ``>``
    and ``&`` as ``\\u003c``-style JSON escapes (and the two JavaScript line separators) leaves the
    same JSON value and no markup at all. Applied to the widget state and the widget views.

    >>> script_safe_json('{"a": "<!--<script>"}')
    '{"a": "\\u003c!--\\u003cscript\\u003e"}'
    """
    return (
        text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    )  # fmt: skip


def has_widget_state(nb: Any) -> bool:
    """Whether a notebook node carries stored widget state (with at least one model)."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {})
    return bool(state.get("state"))


def export_html(
    notebook_path: str | Path, out_path: str | Path, execute: bool | None = None, *, timeout: int = 600
) -> Path:
    """Write ``notebook_path`` as HTML to ``out_path`` with its widgets rendering offline.

    Parameters
    ----------
    notebook_path
        An ``.ipynb`` file. It is read, never written.
    out_path
        A folder when it ends with ``/`` or is an existing folder: the page is then ``NAME.html`` in it
        (``NAME`` the notebook's), the folder made if missing. Otherwise the page's file, ``.html``
        appended when its name does not end in ``.html`` or ``.htm`` (``"report"`` writes
        ``report.html``). The scripts go to ``interplab-static/`` beside the page.
    execute
        Run the notebook first (in a ``python3`` kernel from its own folder) so that its
        outputs and widget state are fresh. ``None``: only when it has no stored widget state.
    timeout
        Seconds allowed per cell when executing.

    Returns
    -------
    Path
        The HTML file written.
    """
    import nbformat
    from nbconvert import HTMLExporter

    src = Path(notebook_path)
    if not src.exists():
        raise FileNotFoundError(f"Notebook {str(src)!r} does not exist.")
    if not src.is_file() or src.suffix != ".ipynb":
        raise ValueError(f"{str(src)!r} is not a notebook: give an .ipynb file.")
    out = page_path(src, out_path)
    assets = web_assets()  # fail before a long execution if the scripts are missing

    nb = nbformat.read(src, as_version=4)
    if execute is None:
        execute = not has_widget_state(nb)
    if execute:
        _execute(nb, src, timeout)
    _warn_about_limits(nb, src)

    exporter = HTMLExporter(
        template_name="lab",
        raw_template=_TEMPLATE,
        require_js_url=f"{STATIC_DIR}/require.js",
        widget_renderer_url=f"{STATIC_DIR}/embed-amd.js",
        # the lab template pipes the widget state and views through this filter, after json_dumps
        filters={"escape_html_script": script_safe_json},
    )
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": src.stem}})

    make_dirs(out.parent)
    _copy_assets(assets, out.parent / STATIC_DIR)
    write_bytes(out, body.encode("utf-8"))
    return out


def page_path(notebook: Path, out_path: str | os.PathLike[str]) -> Path:
    """Where :func:`export_html` writes the page of ``notebook`` for ``out_path`` (see its ``out_path``).

    >>> page_path(Path("nbs/01_heatmaps.ipynb"), "out/")
    PosixPath('out/01_heatmaps.html')
    """
    if not isinstance(out_path, (str, os.PathLike)):
        raise TypeError(f"out_path must be a folder or an .html file path, got {type(out_path).__name__}.")
    text = os.fspath(out_path)
    out = Path(text)
    if text.endswith(("/", os.sep)) or out.is_dir():
        return out / f"{notebook.stem}.html"
    return out if out.suffix.lower() in (".html", ".htm") else out.with_name(f"{out.name}.html")


def _execute(nb: Any, src: Path, timeout: int) -> None:
    """Run ``nb`` in place with nbclient (widget state stored in its metadata)."""
    from nbclient import NotebookClient

    folder = src.resolve().parent
    # The python3 kernel spec may launch a bare `python`: make it this interpreter's.
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(folder)}},
        store_widget_state=True,
    )
    try:
        client.execute(cwd=str(folder), env=env)
    except Exception as exc:
        exc.add_note(f"(while executing {src} for HTML export)")
        raise


def _warn_about_limits(nb: Any, src: Path) -> None:
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    missing = sorted({m.get("model_module", "?") for m in state.values()} - PROVIDED_MODULES)
    if missing:
        logger.warning("%s: widgets from %s are not bundled and will not render offline.", src, missing)
    if any(c.cell_type == "markdown" and _MATH.search(c.source) for c in nb.cells):
        logger.info("%s: maths in markdown is shown as TeX source (MathJax needs the network).", src)


def _copy_assets(assets: dict[str, Path], folder: Path) -> None:
    make_dirs(folder)
    for name, path in assets.items():
        data = path.read_bytes()
        dest = folder / name
        if dest.is_file() and dest.stat().st_size == len(data) and dest.read_bytes() == data:
            continue
        write_bytes(dest, data)
