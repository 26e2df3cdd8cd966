"""The library wheel holds exactly the tree's modules and data files, found without a package list."""

from __future__ import annotations

import zipfile
from pathlib import Path

from tests.packaging.wheels import ROOT, build_wheel, copy_tree

ROOTS = {"core": "interplab/core", "widgets": "interplab/widgets", "interplab": "interplab"}
SHIPPED = {".py", ".js", ".css", ".json", ".typed"}


def tree_files(root: Path) -> set[str]:
    """The files of the three package roots, under their installed names (weights left out)."""
    out = set()
    for folder, installed in ROOTS.items():
        for path in (root / folder).rglob("*"):
            rel = path.relative_to(root / folder)
            left_out = {"__pycache__", "pretrained"} & set(rel.parts)
            if path.is_file() and path.suffix in SHIPPED and not left_out:
                out.add(f"{installed}/{rel.as_posix()}")
    return out


def test_a_new_subpackage_is_in_the_wheel_without_a_package_list(tmp_path):
    tree = copy_tree(tmp_path / "src")
    new = tree / "core" / "brand_new"
    new.mkdir()
    (new / "__init__.py").write_text('"""A capability the build has never heard of."""\n')
    (new / "part.py").write_text("X = 1\n")
    (new / "table.json").write_text("{}\n")
    wheel, printed = build_wheel(tree, tmp_path / "dist")
    names = {n for n in zipfile.ZipFile(wheel).namelist() if ".dist-info/" not in n}
    assert names == tree_files(tree)
    assert {"interplab/core/brand_new/part.py", "interplab/core/brand_new/table.json"} <= names
    assert "warning" not in printed.lower(), printed


def test_the_library_wheel_is_small_and_carries_no_weights(tmp_path):
    wheel, _ = build_wheel(copy_tree(tmp_path / "src"), tmp_path / "dist")
    assert wheel.stat().st_size < 2 * 1024**2, f"{wheel.name} is {wheel.stat().st_size / 1e6:.1f} MB"
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".safetensors")]


def test_pyproject_lists_no_packages():
    text = (ROOT / "pyproject.toml").read_text()
    assert "[tool.setuptools]" not in text and "packages = [" not in text
