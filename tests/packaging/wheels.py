"""Building interplab's wheels for the packaging tests: the library from a copy of the tree, the data packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What a source tree of the library holds (setup.py walks the three package roots).
TREE = ["core", "widgets", "interplab", "setup.py", "pyproject.toml", "README.md", "LICENSE"]
DATA_PACKAGES = ["interplab-saes-gemma-3-270m", "interplab-transcoders-gemma-3-270m"]


def copy_tree(dst: Path) -> Path:
    """The library's sources copied to ``dst`` (no caches, no weights), to build from."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "pretrained", "*.egg-info")
    for name in TREE:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=ignore)
        else:
            shutil.copy2(src, dst / name)
    return dst


def build_wheel(source: Path, out: Path) -> tuple[Path, str]:
    """One wheel built from ``source`` into ``out`` offline with the environment's own build tools; the wheel and
    everything the build printed."""
    run = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "--no-build-isolation", "-w", str(out),
         str(source)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    wheels = sorted(out.glob("*.whl"), key=lambda p: p.stat().st_mtime)
    return wheels[-1], run.stdout + run.stderr
