"""Griffe extension (``mkdocs.yml``: mkdocstrings' ``extensions``): interplab's docstrings as the site renders them.

The docstrings are written for ``help()`` and doctest: a numpy-style ``Example`` heading, bare ``>>>`` blocks in the
text, and Sphinx roles (``:func:`name```). Before mkdocstrings parses them, each docstring's text is rewritten:

* the ``Example`` heading becomes numpy's ``Examples`` section, whose ``>>>`` lines render as code;
* a ``>>>`` block elsewhere in the text becomes a fenced ``pycon`` block (Markdown would read ``>>>`` as quotes);
* reStructuredText's ``::`` before an indented literal block becomes ``:`` (the indented block is Markdown code);
* a Sphinx role becomes a cross-reference to the object it names, resolved in the docstring's scope, shown as code
  when the object has no page (``~`` shows the last name only).

A package's names imported from its own submodules (``from .model import Model``) are dropped from the package: its
submodules document them, once. The source files are not changed.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:func|meth|class|attr|mod|data|obj|exc):`(~?)([^`]+)`")
SECTION_UNDERLINE = re.compile(r"^\s*-{3,}\s*$")
EXAMPLE_HEADING = re.compile(r"^(\s*)Example\s*$")


def rewrite(text: str, resolve: Any = None) -> str:
    """A docstring's text as mkdocstrings should parse it (see the module's docstring).

    ``resolve(name)`` gives the full path of a role's target or None.

    >>> rewrite("Sites.\\n\\n>>> 1 + 1\\n2").splitlines()
    ['Sites.', '', '```pycon', '>>> 1 + 1', '2', '```']
    >>> rewrite("Example\\n-------\\n>>> f()").splitlines()[:2]
    ['Examples', '--------']
    """
    lines = text.splitlines()
    out: list[str] = []
    in_examples = False
    i = 0
    while i < len(lines):
        line = lines[i]
        underline = i + 1 < len(lines) and SECTION_UNDERLINE.match(lines[i + 1])
        if underline and line.strip():
            heading = EXAMPLE_HEADING.match(line)
            title = f"{heading.group(1)}Examples" if heading else line
            in_examples = title.strip() == "Examples"
            out += [title, title.replace(title.strip(), "-" * len(title.strip()))]
            i += 2
            continue
        if not in_examples and line.lstrip().startswith(">>>"):
            i = _fence(lines, i, out)
            continue
        out.append(line[:-1] if line.endswith("::") and line.strip() != "::" else line)
        i += 1
    return ROLE.sub(lambda m: _reference(m.group(2), short=bool(m.group(1)), resolve=resolve), "\n".join(out))


def _fence(lines: list[str], start: int, out: list[str]) -> int:
    """Append the doctest block starting at ``lines[start]`` as a fenced block; the index after it."""
    indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    end = start
    while end < len(lines) and lines[end].strip() and lines[end].startswith(indent):
        end += 1
    if out and out[-1].strip():
        out.append("")
    out += [f"{indent}```pycon", *lines[start:end], f"{indent}```"]
    if end < len(lines) and lines[end].strip():
        out.append("")
    return end


def _reference(target: str, short: bool, resolve: Any) -> str:
    title = target.rsplit(".", 1)[-1] if short else target.lstrip(".")
    path = resolve(target) if resolve else None
    if not path:
        return f"`{title}`"
    return f'<autoref identifier="{path}" optional><code>{title}</code></autoref>'


def scope_resolver(obj: griffe.Object, canonical: Any = None) -> Any:
    """``resolve(name)`` for the roles of ``obj``'s docstring: a full path, or None when the name is unknown.

    ``canonical(path)`` maps a path to where the object is defined (through imports).
    """

    def resolve(name: str) -> str | None:
        found = _in_scope(obj, name)
        return canonical(found) if canonical and found else found

    return resolve


def _in_scope(obj: griffe.Object, name: str) -> str | None:
    if name.startswith("interplab."):
        return name
    if name.startswith("."):
        package = obj.module if obj.module.is_init_module else obj.module.parent
        base = package.path if package else obj.module.path
        return f"{base}.{name.lstrip('.')}"
    first, _, rest = name.partition(".")
    for scope in (obj, obj.module):
        try:
            found = scope.resolve(first)
        except (griffe.NameResolutionError, AttributeError, KeyError):
            continue
        return f"{found}.{rest}" if rest else found
    return None


def canonical_path(pkg: griffe.Module) -> Any:
    """``canonical(path)``: the path where the object at ``path`` is defined, following imports within ``pkg``."""

    def canonical(path: str) -> str:
        for _ in range(8):  # an import of an import ...
            if not path.startswith(f"{pkg.path}."):
                return path
            try:
                found = pkg[path.removeprefix(f"{pkg.path}.")]
            except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
                return path
            if not found.is_alias:
                return path
            path = found.target_path
        return path

    return canonical


def _walk(obj: griffe.Object) -> Any:
    yield obj
    for member in list(obj.members.values()):
        if not member.is_alias:
            yield from _walk(member)


def drop_own_imports(obj: griffe.Object) -> None:
    """Remove from a package the names it imports from its own submodules."""
    if isinstance(obj, griffe.Module) and obj.is_init_module:
        for name, member in list(obj.members.items()):
            if member.is_alias and member.target_path.startswith(f"{obj.path}."):
                del obj.members[name]


class InterplabDocstrings(griffe.Extension):
    """Rewrite every docstring of a loaded package and drop packages' own imports (see the module's docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        canonical = canonical_path(pkg)
        objects = list(_walk(pkg))
        for obj in objects:
            if obj.docstring is not None:
                obj.docstring.value = rewrite(obj.docstring.value, scope_resolver(obj, canonical))
        for obj in objects:
            drop_own_imports(obj)
