"""Linking a folder of ES modules into the one module anywidget loads: no build step, no npm at run time.

A widget's JavaScript is a folder of ES modules under ``js/`` that import each other by relative path
(``import { ilabEl } from "../shared/index.js";``). anywidget takes one module as a string, so
:func:`link` inlines every module the entry reaches, each once, dependencies first: each module body
runs inside its own function scope and hands its exports on as an object, and every ``import`` becomes
a ``const`` read from that object. The result holds no ``import`` statement, so it renders offline and
in exported HTML.

Supported forms (each statement starting at the beginning of a line):

* ``import { a, b as c } from "./x.js";``, ``import * as ns from "./x.js";``, ``import d from "./x.js";``,
  ``import d, { a } from "./x.js";``, ``import "./x.js";``
* ``export function f``, ``export async function f``, ``export class C``, ``export const x`` (one name)
* ``export { a, b as c };``, ``export { a } from "./x.js";``, ``export * from "./x.js";``
* ``export default <expression or declaration>``

Anything else (a package name, a missing file, a cycle, ``export let``, dynamic ``import()``) is a
:class:`LinkError` naming the file and line.

>>> from pathlib import Path
>>> text = link(Path("widgets/js/heatmap/index.js"))  # doctest: +SKIP
>>> "export default" in text and "import {" not in text  # doctest: +SKIP
True
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

_ID = r"[A-Za-z_$][\w$]*"
_SPEC = r"""(?P<q>["'])(?P<spec>[^"'\n]+)(?P=q)"""
_END = r"[ \t]*;?"
_NAMED = r"\{(?P<names>[^}]*)\}"
_IMPORT = re.compile(
    rf"import\s+(?:(?P<default>{_ID})\s*(?:,\s*)?)?(?:{_NAMED}|\*\s*as\s+(?P<ns>{_ID}))?\s*from\s+{_SPEC}{_END}"
)
_IMPORT_BARE = re.compile(rf"import\s+{_SPEC}{_END}")
_EXPORT_LIST = re.compile(rf"export\s+{_NAMED}(?:\s*from\s+{_SPEC})?{_END}")
_EXPORT_ALL = re.compile(rf"export\s+\*\s+from\s+{_SPEC}{_END}")
_EXPORT_DECL = re.compile(rf"export\s+(?P<kind>async\s+function\*?|function\*?|class|const)\s+(?P<name>{_ID})")
_EXPORT_DEFAULT_DECL = re.compile(rf"export\s+default\s+(?P<kind>async\s+function|function|class)\s+(?P<name>{_ID})")
_EXPORT_DEFAULT = re.compile(r"export\s+default\s+")
_STATEMENT = re.compile(r"^(?:import|export)\b(?!\s*[.(])", re.M)
_STRAY = re.compile(r"^[ \t]+(?:import|export)\s+[\w{*\"']", re.M)
_DYNAMIC = re.compile(r"\bimport\s*\(|\bimport\.meta\b")
FORMS = (
    'import { a, b as c } from "./x.js"; import * as ns from "./x.js"; import d from "./x.js"; '
    'export function/class/const NAME; export { a, b as c }; export { a } from "./x.js"; '
    'export * from "./x.js"; export default ...'
)


class LinkError(ValueError):
    """A widget's modules cannot be linked: the message names the file, the line and the problem."""


@dataclass
class Module:
    """One parsed module: its body with import/export syntax taken out, what it imports and exports."""

    path: Path
    body: str = ""
    #: (module it reads from, binding code), e.g. (path, "{ a, b: c }") or (path, "ns")
    imports: list[tuple[Path, str]] = field(default_factory=list)
    #: exported name -> ("local", name) | ("from", module path, name)
    exports: dict[str, tuple] = field(default_factory=dict)
    #: modules this one needs, in source order
    needs: list[Path] = field(default_factory=list)
    star: list[Path] = field(default_factory=list)
    #: (imported name, module it comes from, line) to check once every module is parsed
    wanted: list[tuple[str, Path, int]] = field(default_factory=list)


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _resolve(module: Module, spec: str, line: int) -> Path:
    """The file a relative specifier names, which must exist."""
    where = f"{module.path}:{line}"
    if not spec.startswith(("./", "../")):
        raise LinkError(
            f"{where}: imports {spec!r}; only relative paths to files beside it (./x.js, ../shared/index.js) "
            "are linked: widgets load no package or URL at run time."
        )
    if not spec.endswith(".js"):
        raise LinkError(f"{where}: imports {spec!r}; write the file's full name, ending in .js.")
    target = (module.path.parent / spec).resolve()
    if not target.is_file():
        raise LinkError(f"{where}: imports {spec!r}, which does not exist ({target}).")
    if target not in module.needs:
        module.needs.append(target)
    return target


def _names(text: str, where: str) -> list[tuple[str, str]]:
    """``a, b as c`` as [(a, a), (b, c)]: (name in the other module, name here)."""
    pairs = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        match = re.fullmatch(rf"({_ID}|default)(?:\s+as\s+({_ID}|default))?", part)
        if not match:
            raise LinkError(f"{where}: cannot read {part!r} in an import or export list.")
        pairs.append((match.group(1), match.group(2) or match.group(1)))
    return pairs


def _import(module: Module, match: re.Match, line: int) -> None:
    target = _resolve(module, match["spec"], line)
    where = f"{module.path}:{line}"
    if match["default"]:
        module.imports.append((target, f"{{ default: {match['default']} }}"))
        module.wanted.append(("default", target, line))
    if match["ns"]:
        module.imports.append((target, match["ns"]))
    if match["names"] is not None:
        pairs = _names(match["names"], where)
        binding = ", ".join(theirs if theirs == mine else f"{theirs}: {mine}" for theirs, mine in pairs)
        module.imports.append((target, f"{{ {binding} }}"))
        module.wanted += [(theirs, target, line) for theirs, _ in pairs]


def _export(module: Module, name: str, value: tuple, where: str) -> None:
    if name in module.exports:
        raise LinkError(f"{where}: exports {name!r} twice.")
    module.exports[name] = value


def _statement(module: Module, text: str, pos: int) -> tuple[int, str]:
    """Read the import or export statement at ``pos``: where it ends and the code that replaces it."""
    line = _line(text, pos)
    where = f"{module.path}:{line}"
    if match := _IMPORT.match(text, pos):
        if not (match["default"] or match["ns"] or match["names"] is not None):
            raise LinkError(f"{where}: cannot read this import; the forms linked are: {FORMS}")
        _import(module, match, line)
        return match.end(), ""
    if match := _IMPORT_BARE.match(text, pos):
        _resolve(module, match["spec"], line)
        return match.end(), ""
    if match := _EXPORT_ALL.match(text, pos):
        module.star.append(_resolve(module, match["spec"], line))
        return match.end(), ""
    if match := _EXPORT_LIST.match(text, pos):
        source = _resolve(module, match["spec"], line) if match["spec"] else None
        for theirs, mine in _names(match["names"], where):
            if source is None:
                _export(module, mine, ("local", theirs), where)
            else:
                _export(module, mine, ("from", source, theirs), where)
                module.wanted.append((theirs, source, line))
        return match.end(), ""
    if match := _EXPORT_DEFAULT_DECL.match(text, pos):
        _export(module, "default", ("local", match["name"]), where)
        return match.start("kind"), ""
    if match := _EXPORT_DEFAULT.match(text, pos):
        _export(module, "default", ("local", "__ilab_default"), where)
        return match.end(), "const __ilab_default = "
    if match := _EXPORT_DECL.match(text, pos):
        _export(module, match["name"], ("local", match["name"]), where)
        return match.start("kind"), ""
    raise LinkError(f"{where}: cannot read this import or export (export let/var or destructuring?); "
                    f"the forms linked are: {FORMS}")  # fmt: skip


def parse(path: Path) -> Module:
    """One module read from ``path``: its import and export statements taken out and recorded."""
    module = Module(path=Path(path).resolve())
    text = module.path.read_text(encoding="utf-8")
    if match := _DYNAMIC.search(text):
        raise LinkError(f"{module.path}:{_line(text, match.start())}: import() and import.meta are not linked: "
                        "widgets load nothing at run time.")  # fmt: skip
    if match := _STRAY.search(text):
        raise LinkError(f"{module.path}:{_line(text, match.start())}: an import or export must start its line.")
    out, done = [], 0
    for match in _STATEMENT.finditer(text):
        if match.start() < done:
            continue
        end, code = _statement(module, text, match.start())
        removed = text[match.start() : end]
        out += [text[done : match.start()], code, "\n" * removed.count("\n")]  # line numbers stay put
        done = end
    module.body = "".join([*out, text[done:]])
    return module


def _visit(path: Path, seen: dict[Path, Module], stack: list[Path], order: list[Module]) -> None:
    if path in stack:
        cycle = " -> ".join(p.name for p in [*stack[stack.index(path) :], path])
        raise LinkError(f"import cycle: {cycle} (in {path.parent}); move what both need into a third module.")
    if path in seen:
        return
    module = parse(path)
    seen[path] = module
    stack.append(path)
    for need in module.needs:
        _visit(need, seen, stack, order)
    stack.pop()
    order.append(module)


def modules(entry: Path) -> list[Module]:
    """Every module ``entry`` reaches, each once, dependencies before the modules that import them."""
    order: list[Module] = []
    _visit(Path(entry).resolve(), {}, [], order)
    return order


def _exported(module: Module, table: dict[Path, Module]) -> dict[str, tuple]:
    """Every name a module exports, ``export *`` followed (the default left out of those, as in ES)."""
    names = dict(module.exports)
    for source in module.star:
        for name, value in _exported(table[source], table).items():
            if name != "default" and name not in names:
                names[name] = ("from", source, name) if value[0] == "local" else value
    return names


def _check_wanted(module: Module, table: dict[Path, Module], root: Path) -> None:
    for name, source, line in module.wanted:
        have = _exported(table[source], table)
        if name not in have:
            raise LinkError(
                f"{module.path}:{line}: imports {name!r} from {_short(source, root)}, which exports only "
                f"{sorted(have)}."
            )


def _short(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _wrapped(module: Module, table: dict[Path, Module], var: dict[Path, str], root: Path) -> str:
    """One module as a function scope run once, its imports read first and its exports returned."""
    head = "".join(f"const {binding} = {var[source]};\n" for source, binding in module.imports)
    fields = []
    for name, value in sorted(_exported(module, table).items()):
        code = value[1] if value[0] == "local" else f"{var[value[1]]}.{value[2]}"
        fields.append(f"  {name}: {code},\n")
    return (
        f"// --- {_short(module.path, root)}\nconst {var[module.path]} = (() => {{\n{head}"
        f"{module.body.rstrip()}\nreturn Object.freeze({{\n{''.join(fields)}}});\n}})();\n"
    )


def link(entry: Path) -> str:
    """The one ES module anywidget loads, linked from ``entry`` and every module it imports.

    Raises :class:`LinkError` for a missing file, a package or URL import, an import cycle, a name a
    module does not export, or a form of ``import``/``export`` the linker does not read.
    """
    order = modules(entry)
    table = {m.path: m for m in order}
    root = Path(os.path.commonpath([m.path.parent for m in order]))  # names in the text: no local paths
    var = {m.path: f"__ilab_module_{i}" for i, m in enumerate(order)}
    parts = [f"// {_short(order[-1].path, root)} linked by interplab.widgets._bundle: edit the files, not this.\n"]
    for module in order:
        _check_wanted(module, table, root)
        parts.append(_wrapped(module, table, var, root))
    entry_var = var[order[-1].path]
    names = sorted(_exported(order[-1], table))
    if "default" in names:
        parts.append(f"export default {entry_var}.default;\n")
    if named := [n for n in names if n != "default"]:
        parts.append(f"export const {{ {', '.join(named)} }} = {entry_var};\n")
    return "".join(parts)
