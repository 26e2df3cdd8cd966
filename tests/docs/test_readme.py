"""README.md is the front door: short, and every relative link in it leads somewhere in the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_BYTES = 8 * 1024
#: Markdown links and images, ``[text](target)``, and HTML ``href``/``src`` attributes.
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|(?:href|src)=\"([^\"]+)\"")


def relative_links(text: str) -> list[str]:
    """The targets of ``text``'s links that point into the repository (no scheme, no bare anchor).

    >>> relative_links("[a](docs/x.md#y) [b](https://e.org) [c](#top) <a href=\\"LICENSE\\">")
    ['docs/x.md#y', 'LICENSE']
    """
    targets = [m.group(1) or m.group(2) for m in LINK.finditer(text)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_readme_is_at_most_8_kb():
    size = len(README.read_bytes())
    assert size <= MAX_BYTES, f"README.md is {size} bytes; keep it under {MAX_BYTES} (details go to docs/)"


def test_every_relative_link_in_the_readme_resolves():
    links = relative_links(README.read_text(encoding="utf-8"))
    assert links, "the README links into the docs"
    missing = [link for link in links if not (ROOT / link.split("#", 1)[0]).exists()]
    assert not missing, f"README.md links to paths that do not exist: {missing}"


def test_the_readme_names_the_commands_and_the_docs():
    text = README.read_text(encoding="utf-8")
    for command in ("make lab", "make test", "make docs"):
        assert command in text, command
    assert "docs/performance.md" in text and "CHANGELOG.md" in text
