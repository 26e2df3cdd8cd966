"""Every file interplab writes goes through core/storage/atomic/, and honours the user's umask.

The first test reads the source: a call that writes (``save_file``, ``np.save``, ``write_text``,
``open(..., "w")``, ``mkdir``, ``os.replace``, ``rmtree``...) is allowed only inside core/storage/atomic/ or
inside a ``with atomic_path(...)`` / ``with atomic_folder(...)`` block, whose temporary file or folder
it fills (an exemption names its reason). The others run each writer under two umasks and check
the modes of what it wrote: the ones the umask gives new files and folders (not 0600 and 0700 whatever the
umask), so shared stores, SAEs and labels are readable by the group when the umask says so.
"""

from __future__ import annotations

import ast
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from interplab.core.features import feature_data
from interplab.core.features.labels import set_label
from interplab.core.saes.training.trainer import CHECKPOINT, train_saes

import interplab as ilab
from tests.tiny import TEXTS, tiny_model

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*sorted((ROOT / "core").rglob("*.py")), *sorted((ROOT / "interplab").rglob("*.py")),
           *sorted((ROOT / "widgets").rglob("*.py"))]  # fmt: skip
#: Functions of these modules that write (called as ``module.name`` or imported by name).
MODULE_WRITERS = {
    "os": {"replace", "rename", "renames", "makedirs", "mkdir", "unlink", "remove", "rmdir", "removedirs", "chmod",
           "symlink", "link", "truncate", "write", "open"},
    "shutil": {"rmtree", "copy", "copy2", "copyfile", "copytree", "move", "copymode", "copystat"},
    "tempfile": {"mkstemp", "mkdtemp", "TemporaryDirectory", "NamedTemporaryFile", "TemporaryFile"},
    "numpy": {"save", "savez", "savez_compressed", "savetxt"},
    "torch": {"save"},
    "safetensors.torch": {"save_file"},
    "safetensors.numpy": {"save_file"},
}  # fmt: skip
#: Methods that write whatever object they are called on (pathlib paths, transformers models).
METHOD_WRITERS = {"write_text", "write_bytes", "mkdir", "touch", "unlink", "rmdir", "symlink_to", "hardlink_to",
                  "save_pretrained", "to_csv", "to_parquet"}  # fmt: skip
SAFE_CONTEXTS = {"atomic_path", "atomic_folder"}
#: (file, function called, why it may write outside the atomic helpers)
EXEMPT = {
    ("core/loading/embedded.py", "TemporaryDirectory"): "scratch for the GGUF while converting, removed on exit",
    ("core/data/corpus.py", "TemporaryDirectory"): "scratch for npm pack, removed on exit",
    ("interplab/web_assets.py", "TemporaryDirectory"): "scratch for npm pack, removed on exit",
    ("core/loading/embedded.py", "open"): "the conversion's lock file (flock), empty, never read as data",
    ("core/storage/locks.py", "open"): "opens folders read-only (O_RDONLY) to flock them; writes nothing",
    # convert_gguf writes into the folder its only caller (prepare_embedded_model) holds in atomic_folder
    ("core/loading/gguf.py", "save_pretrained"): "inside the caller's atomic_folder",
    ("core/loading/gguf.py", "write_text"): "inside the caller's atomic_folder",
    ("core/loading/gguf.py", "open"): "inside the caller's atomic_folder",
}


def _imports(tree: ast.AST) -> tuple[dict[str, str], dict[str, str]]:
    """Module aliases (``np`` -> numpy) and names imported from modules (``save_file`` -> safetensors.torch)."""
    modules, names = {}, {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return modules, names


def _write_call(call: ast.Call, modules: dict[str, str], names: dict[str, str]) -> str | None:
    """The name of what a call writes with, or None when it writes nothing."""
    func = call.func
    if isinstance(func, ast.Name):
        if func.id == "open":
            mode = call.args[1] if len(call.args) > 1 else next(
                (k.value for k in call.keywords if k.arg == "mode"), None)  # fmt: skip
            text = mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else ""
            return "open" if any(c in text for c in "wax+") else None
        full = names.get(func.id, "")
        module, _, name = full.rpartition(".")
        return full if name in MODULE_WRITERS.get(module, ()) else None
    if isinstance(func, ast.Attribute):
        owner = func.value
        if isinstance(owner, ast.Name) and owner.id in modules:
            module = modules[owner.id]
            return f"{module}.{func.attr}" if func.attr in MODULE_WRITERS.get(module, ()) else None
        if isinstance(owner, ast.Name) and owner.id in names:  # e.g. `from safetensors import torch as st`
            module = names[owner.id]
            return f"{module}.{func.attr}" if func.attr in MODULE_WRITERS.get(module, ()) else None
        return f".{func.attr}" if func.attr in METHOD_WRITERS else None
    return None


def _unsafe_writes(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    modules, names = _imports(tree)
    safe_nodes: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.With):
            managers = [item.context_expr for item in node.items]
            if any(isinstance(m, ast.Call) and isinstance(m.func, ast.Name) and m.func.id in SAFE_CONTEXTS
                   for m in managers):  # fmt: skip
                for inner in [*node.body, *managers]:  # `with atomic_path(p) as t, open(t, "w")` too
                    safe_nodes.update(id(n) for n in ast.walk(inner))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and id(node) not in safe_nodes:
            what = _write_call(node, modules, names)
            if what:
                yield node.lineno, what


def test_every_write_goes_through_the_atomic_helpers() -> None:
    found = []
    for path in SOURCES:
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("core/storage/atomic/"):
            continue
        for line, call in _unsafe_writes(path):
            if (rel, call.rsplit(".", 1)[-1]) not in EXEMPT:
                found.append(f"{rel}:{line}: {call}")
    assert not found, (
        "writes outside interplab.core.storage.atomic (use atomic_path/atomic_folder/write_*/make_dirs):\n"
        + ("\n".join(found))
    )


def test_the_source_check_sees_a_bare_write(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import numpy as np\nfrom safetensors.torch import save_file\ndef f(p):\n    np.save(p, 1)\n"
                   "    with atomic_path(p) as t:\n        np.save(t, 1)\n    open(p, 'w')\n    open(p)\n"
                   "    p.mkdir()\n    save_file({}, p)\n    'a'.replace('a', 'b')\n")  # fmt: skip
    assert sorted(_unsafe_writes(bad)) == [
        (4, "numpy.save"),
        (7, "open"),
        (9, ".mkdir"),
        (10, "safetensors.torch.save_file"),
    ]


# ------------------------------------------------------------------- umask
def _modes(root: Path) -> dict[str, int]:
    out = {".": stat.S_IMODE(root.stat().st_mode)}
    for p in root.rglob("*"):
        out[p.relative_to(root).as_posix()] = stat.S_IMODE(p.stat().st_mode)
    return out


@pytest.fixture(params=[0o002, 0o027], ids=["umask002", "umask027"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _check_modes(root: Path, mask: int) -> None:
    modes = _modes(root)
    for name, mode in modes.items():
        is_dir = (root / name).is_dir()
        want = (0o777 if is_dir else 0o666) & ~mask
        assert mode == want, f"{name}: {oct(mode)} under umask {oct(mask)}, expected {oct(want)} ({modes})"


def test_writers_honour_the_umask(tmp_path: Path, umask: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERPLAB_CACHE", str(tmp_path / "cache"))
    model = tiny_model("gpt2")
    site = "blocks.1.hook_resid_post"
    out = tmp_path / "out"
    store = model.cache(TEXTS * 20, site, out / "store", n_tokens=200, context_size=8, shard_tokens=64)
    sae = train_saes(store, [{"arch": "topk", "width": 16, "k": 2}], n_tokens=128, batch_size=64,
                     checkpoint_dir=out / "ckpt", checkpoint_every=1, progress=False)[0]  # fmt: skip
    assert (out / "ckpt" / CHECKPOINT).exists()
    sae.save(out / "sae")
    sae.save(out / "sae")  # replacing an existing folder keeps the modes too
    loaded = ilab.load_sae(out / "sae")
    set_label(loaded, 1, "one")  # labels.json beside the SAE
    set_label(sae, 2, "two")  # no folder known: the cache's labels/ folder
    data = feature_data(sae, model, TEXTS, n_top=2, n_quantile=2, context=4, seq_len=8, batch_size=2,
                        path=out / "dash", max_batches=1, progress=False)  # fmt: skip
    assert not data.complete  # the checkpoint file is there
    feature_data(sae, model, TEXTS, n_top=2, n_quantile=2, context=4, seq_len=8, batch_size=2, path=out / "dash",
                 progress=False)  # fmt: skip
    pairs = ilab.patching.prompt_pairs(model, ["the cat sat"], ["the dog sat"], ["on"], ["to"])
    ilab.patching.grid(model, pairs, site="resid_pre").save(out / "grid.npz")
    ilab.steering.SteeringVector(site, torch.ones(32)).save(out / "vec.safetensors")
    np.testing.assert_array_equal(ilab.steering.SteeringVector.load(out / "vec.safetensors").direction, np.ones(32))
    _check_modes(out, umask)
    _check_modes(tmp_path / "cache" / "labels", umask)


def test_exported_html_honours_the_umask(tmp_path: Path, umask: int) -> None:
    import nbformat

    from tests.export.test_export import ensure_web_assets, write_notebook

    ensure_web_assets()
    nb = write_notebook(tmp_path / "nb.ipynb", [nbformat.v4.new_markdown_cell("# hi")])
    ilab.export_html(nb, tmp_path / "site" / "nb.html", execute=False)
    _check_modes(tmp_path / "site", umask)
