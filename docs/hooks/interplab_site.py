"""MkDocs hook of the documentation site (``mkdocs.yml``: ``hooks``).

Three jobs, each at its build event:

* ``on_config``: the link tree ``build/api-source/interplab/`` (links to ``interplab/*``, ``core/`` and
  ``widgets/``) that mkdocstrings reads as the ``interplab`` package: the source folders are installed under
  other names (``core/`` as ``interplab.core``), which griffe cannot map by itself.
* ``on_files``: every shipped notebook of ``nbs/`` (``lab/notebooks.py``'s list, not a user's scratch notebook)
  exported by :func:`interplab.export.export_html` (executed, so its widgets render offline) into
  ``notebooks/html/``, and one page per notebook framing it. The environment variable
  ``INTERPLAB_DOCS_EXECUTE`` chooses which notebooks run: unset or ``all`` every one, ``none`` none, or a comma
  separated list of names (``01_heatmaps,02_saes``); the others are exported with their code and text only.
* ``on_page_markdown``: the table of the face's names (``interplab.__all__``) on the page that asks for it with
  ``<!-- interplab-names -->``, each linked to the API page of the package that defines it.
* ``on_post_build``: what Material's search needs over ``file://``: the index as a script
  (``search/search_index.js``) and the search worker's source as a string
  (``assets/javascripts/search-worker-source.js``; ``docs/assets/javascripts/offline-search.js`` starts the worker
  from it).
"""

from __future__ import annotations

import json
import logging
import os
import runpy
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.interplab")

ROOT = Path(__file__).resolve().parents[2]
API_SOURCE = ROOT / "build" / "api-source"
#: Folders installed under the interplab package (setup.py's ROOTS) besides interplab/ itself.
SUBPACKAGES = {"core": ROOT / "core", "widgets": ROOT / "widgets"}
EXECUTE_VAR = "INTERPLAB_DOCS_EXECUTE"
NOTEBOOK_PAGES = "notebooks"
NOTEBOOK_HTML = "notebooks/html"
BINDER = "https://mybinder.org/v2/gh/interplab/interplab/HEAD?labpath=nbs/{name}"
WORKER_SOURCE = "assets/javascripts/search-worker-source.js"

_staging: list[Path] = []


# --- the API source tree ---------------------------------------------------------------------------------------


def link_api_source(root: Path = ROOT, dest: Path = API_SOURCE) -> Path:
    """Make ``dest/interplab/`` a package of links: ``interplab/*`` and the installed subpackages' folders.

    Returns the folder to give mkdocstrings as a search path (``dest``).
    """
    package = dest / "interplab"
    fresh = dest / ".interplab-new"
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    for entry in sorted((root / "interplab").iterdir()):
        if entry.name != "__pycache__" and entry.name not in SUBPACKAGES:
            (fresh / entry.name).symlink_to(os.path.relpath(entry, package))
    for name in SUBPACKAGES:
        (fresh / name).symlink_to(os.path.relpath(root / name, package))
    shutil.rmtree(package, ignore_errors=True)
    fresh.rename(package)
    return dest


@event_priority(100)  # before mkdocstrings reads its paths
def on_config(config: MkDocsConfig) -> MkDocsConfig:
    link_api_source()
    return config


# --- notebooks ---------------------------------------------------------------------------------------------------


def notebooks_to_execute(notebooks: list[Path], value: str | None) -> set[str]:
    """The names (stems) of ``notebooks`` that ``INTERPLAB_DOCS_EXECUTE``'s ``value`` asks to execute.

    >>> notebooks_to_execute([Path("nbs/00_tour.ipynb"), Path("nbs/01_heatmaps.ipynb")], "01_heatmaps")
    {'01_heatmaps'}
    """
    names = [p.stem for p in notebooks]
    if value is None or value.strip().lower() == "all":
        return set(names)
    if value.strip().lower() in ("", "none"):
        return set()
    asked = {part.strip().removesuffix(".ipynb") for part in value.split(",") if part.strip()}
    unknown = sorted(asked - set(names))
    if unknown:
        raise PluginError(
            f"{EXECUTE_VAR}={value!r} names {unknown}, not notebooks in nbs/: choose from {names}, all or none."
        )
    return asked


def notebook_title(path: Path) -> str:
    """The notebook's first markdown heading, else its file name."""
    cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    for cell in cells:
        if cell.get("cell_type") == "markdown":
            for line in "".join(cell.get("source", "")).splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return path.stem


def notebook_page(path: Path, executed: bool) -> str:
    """The Markdown of the page framing the exported notebook ``notebooks/html/NAME.html``."""
    html = f"html/{path.stem}.html"
    name = path.relative_to(path.parents[1]).as_posix() if path.parent.name != "nbs" else path.name  # nbs/papers/
    state = (
        "Executed for this build; its widgets run without a kernel."
        if executed
        else f"Not executed in this build ({EXECUTE_VAR}): code and text only; <code>make docs</code> runs them all."
    )
    return (
        "---\nhide:\n  - toc\n---\n\n"
        f"# {notebook_title(path)}\n\n"
        f'<p class="ilab-notebook-bar">{state} <a href="{html}">Open the page alone</a> · '
        f'<a href="{BINDER.format(name=name)}">Run it on Binder</a> · source: <code>nbs/{name}</code></p>\n\n'
        f'<iframe class="ilab-notebook" src="{html}" title="{path.stem}" loading="eager"></iframe>\n'
    )


def shipped_notebooks(root: Path = ROOT) -> list[Path]:
    """The shipped notebooks of ``root/nbs`` in order: ``lab/notebooks.py``'s list, loaded by path (the hook is not
    run from a package), so a notebook a user makes in ``nbs/`` is neither executed nor published."""
    paths: list[Path] = runpy.run_path(str(root / "lab" / "notebooks.py"))["shipped_notebooks"](root)
    return paths


def export_notebooks(out: Path, execute: set[str]) -> dict[Path, bool]:
    """Export every shipped notebook into ``out`` (scripts in ``out/interplab-static``); which ran."""
    from interplab.export import export_html

    done: dict[Path, bool] = {}
    for path in shipped_notebooks():
        run = path.stem in execute
        started = time.perf_counter()
        try:
            export_html(path, out / f"{path.stem}.html", execute=run)
        except Exception as exc:
            raise PluginError(f"Exporting {path.relative_to(ROOT)} failed: {exc}") from exc
        log.info(
            "%s %s in %.0f s", "executed and exported" if run else "exported", path.name, time.perf_counter() - started
        )
        done[path] = run
    return done


def on_files(files: Files, config: MkDocsConfig) -> Files:
    execute = notebooks_to_execute(shipped_notebooks(), os.environ.get(EXECUTE_VAR))
    staging = Path(tempfile.mkdtemp(prefix="interplab-docs-"))
    _staging.append(staging)
    for path, executed in export_notebooks(staging, execute).items():
        files.append(File.generated(config, f"{NOTEBOOK_PAGES}/{path.stem}.md", content=notebook_page(path, executed)))
    for exported in sorted(p for p in staging.rglob("*") if p.is_file()):
        uri = f"{NOTEBOOK_HTML}/{exported.relative_to(staging).as_posix()}"
        files.append(File.generated(config, uri, abs_src_path=str(exported)))
    return files


# --- the face's names ----------------------------------------------------------------------------------------------

NAMES_MARKER = "<!-- interplab-names -->"
FACE_MODULES = ("interplab.export", "interplab.extension", "interplab.web_assets", "interplab.__main__")


def api_page(module: str) -> str:
    """The API page (relative to ``api/``) documenting objects of ``module``.

    >>> api_page("interplab.core.saes.base"), api_page("interplab.widgets.heatmap"), api_page("interplab.export")
    ('saes.md', 'widgets.md', 'interplab.md')
    """
    parts = module.split(".")
    if parts[:2] == ["interplab", "core"]:
        return f"{parts[2]}.md" if len(parts) > 2 and parts[2] != "checks" else "core.md"
    if parts[:2] == ["interplab", "widgets"]:
        return "widgets.md"
    return "interplab.md"


def face_names_table() -> str:
    """A Markdown table: each name of ``interplab.__all__``, what it is and the page documenting it."""
    import inspect

    import interplab

    by_page: dict[str, list[str]] = {}
    for name in sorted(interplab.__all__, key=str.lower):
        obj = getattr(interplab, name)
        module = obj.__name__ if inspect.ismodule(obj) else getattr(obj, "__module__", None)
        if not module:
            continue  # a constant (__version__)
        by_page.setdefault(api_page(module), []).append(f"`{name}`")
    rows = [f"| {', '.join(names)} | [{page.removesuffix('.md')}]({page}) |" for page, names in sorted(by_page.items())]
    return "\n".join(["| names | API page |", "|---|---|", *rows])


def on_page_markdown(markdown: str, page: Any, config: MkDocsConfig, files: Files) -> str:
    if NAMES_MARKER in markdown:
        markdown = markdown.replace(NAMES_MARKER, face_names_table())
    return markdown


# --- search over file:// -----------------------------------------------------------------------------------------


def write_offline_search(site_dir: Path) -> None:
    """The search index as ``search/search_index.js`` and the search worker's source as a script string."""
    index = site_dir / "search" / "search_index.json"
    workers = sorted((site_dir / "assets" / "javascripts" / "workers").glob("search.*.min.js"))
    if not index.is_file() or len(workers) != 1:
        raise PluginError(f"Material's search index or worker is missing from {site_dir} (found workers {workers}).")
    (index.parent / "search_index.js").write_text(f"var __index = {index.read_text(encoding='utf-8')};\n", "utf-8")
    source = json.dumps(workers[0].read_text(encoding="utf-8"))
    (site_dir / WORKER_SOURCE).write_text(f"window.__ilabSearchWorkerSource = {source};\n", encoding="utf-8")


@event_priority(-100)  # after the search plugin wrote its index
def on_post_build(config: MkDocsConfig) -> None:
    write_offline_search(Path(config.site_dir))
    _remove_staging()


def on_build_error(error: Exception, **kwargs: Any) -> None:
    _remove_staging()


def _remove_staging() -> None:
    while _staging:
        shutil.rmtree(_staging.pop(), ignore_errors=True)
