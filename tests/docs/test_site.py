"""The documentation site's configuration, without building it (tests/browser/test_docs_site.py builds it).

Every subpackage of ``core/`` (a folder with an ``__init__.py``), the widgets and the face have an API page in the
navigation, so a new capability without a page fails here; every notebook has its page; every page of ``docs/`` is in
the navigation; the paths the pages cite exist; and the site is configured to work offline over ``file://``. The
hooks' own helpers (``docs/hooks/``) are checked on small inputs.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from lab.notebooks import shipped_notebooks

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CONFIG = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
NOTEBOOKS = shipped_notebooks()  # the shipped ones, not a scratch notebook a user made in nbs/


def nav_pages(nav: Any) -> list[str]:
    """Every page path named in a MkDocs ``nav`` (nested lists of ``{title: path or list}``)."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return []


PAGES = nav_pages(CONFIG["nav"])


def rendered_modules() -> set[str]:
    """The modules the navigation's pages render with mkdocstrings (``::: module`` lines)."""
    found = set()
    for page in PAGES:
        path = DOCS / page
        if path.is_file():
            found |= set(re.findall(r"^::: ([\w.]+)\s*$", path.read_text(encoding="utf-8"), re.M))
    return found


def load_hook(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"docs_hooks_{name}", DOCS / "hooks" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "package", sorted(p.parent.name for p in (ROOT / "core").glob("*/__init__.py")), ids=lambda name: name
)
def test_every_core_subpackage_has_an_api_page(package):
    assert f"interplab.core.{package}" in rendered_modules(), (
        f"core/{package}/ has no API page: add docs/api/{package}.md with '::: interplab.core.{package}' and name it "
        "in mkdocs.yml's nav (API reference)"
    )


@pytest.mark.parametrize("module", ["interplab", "interplab.widgets", "interplab.core"])
def test_the_face_the_widgets_and_the_engine_have_api_pages(module):
    assert module in rendered_modules()


def test_every_notebook_has_a_page():
    missing = [p.name for p in NOTEBOOKS if f"notebooks/{p.stem}.md" not in PAGES]
    assert NOTEBOOKS and not missing, f"name notebooks/NAME.md in mkdocs.yml's nav for {missing}"


def test_every_page_exists_and_every_page_is_in_the_nav():
    generated = {f"notebooks/{p.stem}.md" for p in NOTEBOOKS}
    absent = [page for page in PAGES if page not in generated and not (DOCS / page).is_file()]
    assert not absent, f"the nav names pages that do not exist: {absent}"
    sources = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    orphans = sorted(sources - set(PAGES))
    assert not orphans, f"pages not in mkdocs.yml's nav: {orphans}"


def test_paths_the_pages_cite_exist():
    """A repository path in backquotes (``folder/file.ext``) in a page exists (as tests/test_notebooks.py checks for
    the notebooks, README.md and ARCHITECTURE.md)."""
    cited = re.compile(r"`((?:core|interplab|widgets|nbs|tests|bench|binder|docs|ndif-local|packages)/[\w./-]+\.\w+)`")
    missing = [
        (page.relative_to(DOCS).as_posix(), m.group(1).split("::")[0])
        for page in DOCS.rglob("*.md")
        for m in cited.finditer(page.read_text(encoding="utf-8"))
        if not (ROOT / m.group(1).split("::")[0]).exists()
    ]
    assert not missing, missing


def test_the_site_works_offline_over_file_urls():
    assert CONFIG["use_directory_urls"] is False  # page.html, not page/ (a folder over file://)
    assert CONFIG["theme"]["font"] is False  # no Google Fonts
    assets = [*CONFIG.get("extra_css", []), *CONFIG.get("extra_javascript", []), *CONFIG["extra"]["polyfills"]]
    assert not [a for a in assets if "://" in str(a)], assets
    assert "repo_url" not in CONFIG  # Material would fetch the repository's stars
    assert CONFIG["site_dir"] == "build/site"


def test_docstrings_are_rewritten_for_the_site():
    rewrite = load_hook("docstrings").rewrite
    text = "Load it.\n\nExample\n-------\n>>> load()\n\nUse :func:`~interplab.core.x.load` or :class:`Other`."
    out = rewrite(text, resolve=lambda name: name if name.startswith("interplab.") else None)
    assert "Examples\n--------\n>>> load()" in out  # numpy's section: its >>> lines render as code
    assert '<autoref identifier="interplab.core.x.load" optional><code>load</code></autoref>' in out
    assert "`Other`" in out  # not found: plain code, never a broken link
    assert rewrite("The layout::\n\n    a/b.json") == "The layout:\n\n    a/b.json"  # reST literal block
    bare = rewrite("Sites.\n    >>> a = 1\n    >>> a\n    1\nThen more.")
    assert bare.splitlines() == ["Sites.", "", "    ```pycon", "    >>> a = 1", "    >>> a", "    1", "    ```", "",
                                 "Then more."]  # fmt: skip


def test_the_notebooks_to_execute_are_chosen_by_name():
    hook = load_hook("interplab_site")
    paths = [Path("nbs/00_tour.ipynb"), Path("nbs/01_heatmaps.ipynb")]
    assert hook.notebooks_to_execute(paths, None) == {"00_tour", "01_heatmaps"}
    assert hook.notebooks_to_execute(paths, "all") == {"00_tour", "01_heatmaps"}
    assert hook.notebooks_to_execute(paths, "none") == set()
    assert hook.notebooks_to_execute(paths, " 01_heatmaps.ipynb ,") == {"01_heatmaps"}
    with pytest.raises(Exception, match=r"02_saes.*00_tour.*01_heatmaps"):
        hook.notebooks_to_execute(paths, "00_tour,02_saes")


def test_every_name_of_the_face_is_on_an_api_page():
    import interplab

    hook = load_hook("interplab_site")
    table = hook.face_names_table()
    for name in interplab.__all__:
        if name != "__version__":
            assert f"`{name}`" in table, name
    pages = set(re.findall(r"\]\((\w+\.md)\)", table))
    assert pages <= {Path(p).name for p in PAGES if p.startswith("api/")}, pages
