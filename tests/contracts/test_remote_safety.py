"""No trace body in the engine names a Model (or an SAE, or ``self``): a server has no interplab.

nnsight sends what a trace body uses with the request; a Model in there is pickled along (and, since
``Model.lock`` exists, cannot be: ``cannot pickle '_thread.RLock'``). Found this way: ``model.device`` inside
the bodies of ``evaluate``'s spliced runs, the per-site gradient runs and the cached grid's base run.
"""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "core"
FORBIDDEN = {"model", "self", "sae", "source"}  # the names interplab objects go by in the engine


def _trace_bodies(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.With):
            opened = " ".join(ast.unparse(item.context_expr) for item in node.items)
            if any(call in opened for call in (".trace(", ".generate(", ".invoke(", ".session(")):
                yield node


def test_trace_bodies_hold_no_interplab_object():
    found = []
    for path in sorted(CORE.rglob("*.py")):
        for with_node in _trace_bodies(ast.parse(path.read_text(encoding="utf-8"))):
            for stmt in with_node.body:
                for name in ast.walk(stmt):
                    if isinstance(name, ast.Name) and name.id in FORBIDDEN:
                        found.append(f"{path.relative_to(CORE.parent)}:{name.lineno}: {name.id}")
    assert not found, "trace bodies naming an interplab object:\n" + "\n".join(found)


def test_the_scan_sees_trace_bodies():
    bodies = [b for p in CORE.rglob("*.py") for b in _trace_bodies(ast.parse(p.read_text(encoding="utf-8")))]
    assert len(bodies) > 10
