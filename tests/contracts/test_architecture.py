"""ARCHITECTURE.md's layers, enforced: no import cycles, no import up or sideways, no private names across modules.

Every import of every module under core/, widgets/ and interplab/ counts (module level, inside
functions, under TYPE_CHECKING). The layers are read from the ``layers`` block of ARCHITECTURE.md.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"interplab.core": ROOT / "core", "interplab.widgets": ROOT / "widgets", "interplab": ROOT / "interplab"}


def read_layers(text: str) -> dict[str, int]:
    """Unit name -> layer number, from the ```layers block."""
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "ARCHITECTURE.md has no ```layers block"
    layers = {}
    for line in block.group(1).splitlines():
        number, *units = line.split()
        for unit in units:
            layers[unit] = int(number)
    return layers


def module_files(folders: dict[str, Path]) -> dict[str, Path]:
    """Module name -> file, for every .py under the folders (``__init__`` is its package)."""
    out = {}
    for package, folder in folders.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((package, *parts))] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> list[tuple[str, list[str], int]]:
    """(target module, imported names, line) for each import of a known module in one file."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [alias.name for alias in node.names]
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in known]
            out += [(s, [], node.lineno) for s in submodules]
            rest = [n for n in names if f"{target}.{n}" not in known]
            if rest or not submodules:
                out.append((target, rest, node.lineno))
    return [(t, n, line) for t, n, line in out if t in known]


def unit_of(module: str, layers: dict[str, int]) -> str:
    """The longest unit name that is the module or a package above it."""
    best = ""
    for unit in layers:
        if (module == unit or module.startswith(unit + ".")) and len(unit) > len(best):
            best = unit
    assert best, f"{module} is in no layer of ARCHITECTURE.md"
    return best


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first repeated at the end), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def violations(folders: dict[str, Path], layers: dict[str, int]) -> tuple[list[str], dict[str, set[str]]]:
    """Broken layer rules and private imports, and the module import graph."""
    files = module_files(folders)
    known = set(files)
    graph: dict[str, set[str]] = {m: set() for m in files}
    problems = []
    for module, path in sorted(files.items()):
        src_unit = unit_of(module, layers)
        for target, names, line in imports_of(module, path, known):
            if target == module:
                continue
            graph[module].add(target)
            dst_unit = unit_of(target, layers)
            where = f"{path.relative_to(ROOT)}:{line}"
            if src_unit != dst_unit and layers[dst_unit] >= layers[src_unit]:
                problems.append(f"{where}: {module} (layer {layers[src_unit]}) imports {target} "
                                f"(layer {layers[dst_unit]})")  # fmt: skip
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                problems.append(f"{where}: {module} imports private {private} from {target}")
    return problems, graph


def test_layers_and_cycles():
    layers = read_layers((ROOT / "ARCHITECTURE.md").read_text())
    problems, graph = violations(FOLDERS, layers)
    assert not problems, "\n".join(problems)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_every_module_is_in_a_layer():
    layers = read_layers((ROOT / "ARCHITECTURE.md").read_text())
    for module in module_files(FOLDERS):
        unit_of(module, layers)


def test_core_never_imports_widgets():
    layers = read_layers((ROOT / "ARCHITECTURE.md").read_text())
    assert layers["interplab.widgets"] > max(v for k, v in layers.items() if k.startswith("interplab.core"))


# ------------------------------------------------------- the checker itself catches what it must
def write_tree(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return {"interplab.core": root / "core"}


LAYERS = {"interplab.core.low": 0, "interplab.core.high": 1, "interplab.core.side": 1, "interplab.core": 2}


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        # a function-level import going up the layers
        (
            {"core/low.py": "def f():\n    from .high import g\n", "core/high.py": "from .low import f\n"},
            "low (layer 0) imports interplab.core.high (layer 1)",
        ),
        # sideways, between two units of one layer, under TYPE_CHECKING
        (
            {
                "core/high.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .side import X\n",
                "core/side.py": "",
            },
            "high (layer 1) imports interplab.core.side (layer 1)",
        ),
        # a private name from another module
        ({"core/low.py": "_x = 1\n", "core/high.py": "from .low import _x\n"}, "imports private ['_x']"),
    ],
)
def test_the_checker_catches_layer_breaks(tmp_path, files, expected):
    folders = write_tree(tmp_path, {"core/__init__.py": "", **files})
    problems, _ = violations_in(folders)
    assert any(expected in p for p in problems), problems


def test_the_checker_catches_a_cycle_inside_one_unit(tmp_path):
    folders = write_tree(tmp_path, {
        "core/__init__.py": "",
        "core/high/__init__.py": "",
        "core/high/a.py": "from .b import y\n",
        "core/high/b.py": "def y():\n    from . import a\n",
    })  # fmt: skip
    problems, graph = violations_in(folders)
    assert not problems
    assert find_cycle(graph) == ["interplab.core.high.a", "interplab.core.high.b", "interplab.core.high.a"]


def violations_in(folders: dict[str, Path]) -> tuple[list[str], dict[str, set[str]]]:
    global ROOT
    saved, ROOT = ROOT, next(iter(folders.values())).parent
    try:
        return violations(folders, LAYERS)
    finally:
        ROOT = saved
