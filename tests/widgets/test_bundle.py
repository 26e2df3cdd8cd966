"""The widget linker (widgets/_bundle.py): each folder of ES modules becomes the one module anywidget loads."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from interplab.widgets._bundle import LinkError, link, modules
from interplab.widgets._kit import HERE, LinkedModule, css, esm

WIDGETS = sorted(p.name for p in HERE.iterdir() if (p / "index.js").is_file() and p.name != "shared")
NODE = shutil.which("node")


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def run_node(tmp_path: Path, module: str, check: str) -> object:
    """Run a linked module in Node with ``check`` (an expression) after it; what the expression gives, as JSON."""
    if NODE is None:
        pytest.skip("node is not installed")
    script = tmp_path / "run.mjs"
    script.write_text(f"{module}\nconsole.log(JSON.stringify({check}));\n")
    out = subprocess.run([NODE, str(script)], capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)


@pytest.mark.parametrize("widget", WIDGETS)
def test_each_widget_folder_links_into_one_module(widget: str) -> None:
    entry = HERE / widget / "index.js"
    text = link(entry)
    reached = [m.path for m in modules(entry)]
    own = sorted((HERE / widget).glob("*.js"))
    assert set(own) <= set(reached), f"files of js/{widget}/ no module imports: {set(own) - set(reached)}"
    assert (HERE / "shared" / "index.js") in reached
    for path in reached:  # each module once, under its name relative to js/
        assert text.count(f"// --- {path.relative_to(HERE).as_posix()}\n") == 1
    assert reached[-1] == entry.resolve()  # dependencies first, the entry last
    assert not re.search(r"^\s*import\b|\bimport\s*\(", text, re.M)  # every import resolved: none left
    assert re.findall(r"^export\b.*$", text, re.M) == [f"export default __ilab_module_{len(reached) - 1}.default;"]
    assert str(HERE.parent) not in text  # no local paths in what exported HTML carries


def test_every_shared_module_and_widget_part_is_used() -> None:
    reached = {m.path for w in WIDGETS for m in modules(HERE / w / "index.js")}
    assert {p.resolve() for p in HERE.rglob("*.js")} == reached


@pytest.mark.parametrize("path", sorted(HERE.rglob("*.js")), ids=lambda p: p.relative_to(HERE).as_posix())
def test_files_are_checked_small_and_set_text_only(path: Path) -> None:
    """What ESLint and tsc check (make lint), in the tests too: `// @ts-check` first, at most 250 lines, no markup."""
    text = path.read_text()
    assert text.startswith("// @ts-check\n")
    assert text.count("\n") <= 250
    assert not re.search(r"\.(innerHTML|outerHTML)\b|insertAdjacentHTML", text)


def test_the_python_side_links_its_folder_and_joins_its_styles() -> None:
    module = esm("heatmap")
    assert isinstance(module, LinkedModule) and str(module) == link(HERE / "heatmap" / "index.js")
    assert {p.name for p in module.paths} >= {"index.js", "draw.js", "decode.js", "scale.js"}
    styles = str(css("heatmap"))
    assert styles.index(".ilab-root") < styles.index(".ilab-heatmap")  # shared first
    with pytest.raises(ValueError, match=r"No widget module 'heatmap.js': js/heatmap.js/index.js does not exist; "
                                         r"widgets are \['attention', 'circuit', "):  # fmt: skip
        esm("heatmap.js")


def test_imports_exports_and_aliases_behave_as_modules(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "util/num.js": "const hidden = 40;\nexport const base = hidden + 1;\n"
            "export function plus(x) { return x + base; }\n",
            "util/text.js": 'export class Shout { say(s) { return s.toUpperCase(); } }\nexport default "text";\n',
            "util/index.js": 'export * from "./num.js";\nexport { Shout as Loud, default as name } from "./text.js";\n',
            "part.js": 'import * as u from "./util/index.js";\nconst hidden = 1;\nexport { hidden as one };\n'
            "export default function twice(x) { return u.plus(x) * 2; }\n",
            "index.js": 'import twice, { one } from "./part.js";\nimport {\n  Loud,\n  base as b,\n  name,\n}'
            ' from "./util/index.js";\nimport "./util/num.js";\n'
            "export default { value: twice(one), shout: new Loud().say(name), b };\n",
        },
    )
    text = link(tmp_path / "index.js")
    assert [line for line in text.splitlines() if line.startswith("// --- ")] == [
        "// --- util/num.js", "// --- util/text.js", "// --- util/index.js", "// --- part.js", "// --- index.js",
    ]  # fmt: skip
    got = run_node(tmp_path, text, "__ilab_module_4.default")
    assert got == {"value": 84, "shout": "TEXT", "b": 41}  # each module's own `hidden` kept to itself


def test_a_module_without_exports_runs_as_a_plain_script(tmp_path: Path) -> None:
    write(tmp_path, {"a.js": "export const a = 1;\n", "main.js": 'import { a } from "./a.js";\nglobalThis.seen = a;\n'})
    text = link(tmp_path / "main.js")
    assert "export" not in text.split("// --- main.js")[1]
    if NODE is None:
        pytest.skip("node is not installed")
    script = tmp_path / "run.cjs"  # CommonJS: a module would refuse `export`
    script.write_text(f"{text}\nconsole.log(globalThis.seen);\n")
    assert subprocess.run([NODE, str(script)], capture_output=True, text=True, check=True).stdout == "1\n"


def test_an_import_cycle_is_named(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "index.js": 'import { a } from "./a.js";\nexport default { a };\n',
            "a.js": 'import { b } from "./b.js";\nexport const a = 1;\n',
            "b.js": 'import { a } from "./a.js";\nexport const b = a;\n',
        },
    )
    with pytest.raises(LinkError, match=r"import cycle: a\.js -> b\.js -> a\.js .*move what both need into a third"):
        link(tmp_path / "index.js")


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"index.js": 'import { a } from "./gone.js";\n'}, r"index\.js:1: imports './gone\.js', which does not exist"),
        ({"index.js": '\n\nimport { a } from "d3";\n'}, r"index\.js:3: imports 'd3'; only relative paths"),
        ({"index.js": 'import { a } from "./a";\n', "a": ""}, r"imports './a'; write the file's full name, ending in"),
        (
            {"index.js": 'import { nope } from "./a.js";\n', "a.js": "export const a = 1;\n"},
            r"index\.js:1: imports 'nope' from a\.js, which exports only \['a'\]",
        ),
        ({"index.js": "export let x = 1;\n"}, r"index\.js:1: cannot read this import or export \(export let/var"),
        ({"index.js": "export const x = 1;\nexport { x };\n"}, r"index\.js:2: exports 'x' twice"),
        ({"index.js": 'const m = import("./a.js");\n'}, r"index\.js:1: import\(\) and import\.meta are not linked"),
        ({"index.js": 'if (1) {\n  import { a } from "./a.js";\n}\n'}, r"index\.js:2: an import or export must start"),
    ],
    ids=["missing-file", "package", "no-extension", "unknown-name", "export-let", "twice", "dynamic", "indented"],
)
def test_what_cannot_be_linked_is_a_clear_error(tmp_path: Path, files: dict[str, str], message: str) -> None:
    write(tmp_path, files)
    with pytest.raises(LinkError, match=message):
        link(tmp_path / "index.js")


def wait_for(condition: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "no reload"
        time.sleep(0.05)


def test_linked_module_follows_edits_of_any_module_it_reaches(tmp_path: Path) -> None:
    """With hot reload, an edit of an imported file relinks the module; an edit that does not link keeps the last."""
    write(
        tmp_path, {"a.js": "export const a = 1;\n", "index.js": 'import { a } from "./a.js";\nexport default { a };\n'}
    )
    seen: list[str] = []
    module = LinkedModule(tmp_path / "index.js", hot_reload=True)
    module.changed.connect(seen.append)
    try:
        assert "const a = 1;" in str(module)
        time.sleep(0.3)  # let the watchers start
        (tmp_path / "a.js").write_text("export const a = 2;\n")
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen and "const a = 2;" in seen[-1] and seen[-1] == str(module)
        write(tmp_path, {"b.js": "export const b = 1;\n"})
        (tmp_path / "a.js").write_text('import { b } from "./b.js";\nexport const a = b;\n')  # a new module
        wait_for(lambda: "const b = 1;" in str(module))
        time.sleep(0.3)  # let the new watcher's thread start
        (tmp_path / "b.js").write_text("export const b = 5;\n")  # ... is watched from then on
        wait_for(lambda: "const b = 5;" in str(module))
        (tmp_path / "a.js").write_text('import { z } from "./gone.js";\nexport const a = 3;\n')
        time.sleep(1.5)
        assert "const b = 5;" in str(module) and "gone" not in str(module)  # logged; the last good module kept
    finally:
        module.stop()


def test_a_module_an_edit_starts_importing_is_watched_before_the_new_module_is_published(tmp_path: Path) -> None:
    """An edit of the new module made as soon as the relinked module appears is not missed."""
    write(
        tmp_path, {"a.js": "export const a = 1;\n", "index.js": 'import { a } from "./a.js";\nexport default { a };\n'}
    )
    module = LinkedModule(tmp_path / "index.js", hot_reload=True)
    watched_when_published: list[list[str]] = []
    module.changed.connect(lambda _text: watched_when_published.append([p.name for p in module.paths]))
    try:
        time.sleep(0.3)  # let the watchers start
        write(tmp_path, {"b.js": "export const b = 1;\n"})
        (tmp_path / "a.js").write_text('import { b } from "./b.js";\nexport const a = b;\n')
        wait_for(lambda: "const b = 1;" in str(module))
        assert "b.js" in watched_when_published[-1]
    finally:
        module.stop()
