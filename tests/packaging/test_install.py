"""The wheels as a user gets them: the library and its two data packages, built here, installed with the
``embedded`` extra into a fresh virtual environment outside the checkout, load the model, an SAE and the
cross-layer transcoder, and show a widget.

The fresh environment sees the dependencies already installed in this one (a ``.pth`` line to a folder of links
to them, interplab's own distributions left out), so pip resolves ``interplab[embedded]`` offline from the
three wheels and downloads nothing.
"""

from __future__ import annotations

import os
import site
import subprocess
import venv
from pathlib import Path

import pytest

from tests.packaging.wheels import DATA_PACKAGES, ROOT, build_wheel, copy_tree

SCRIPT = """
import interplab as ilab
from pathlib import Path
assert not Path(ilab.__file__).is_relative_to({root!r}), ilab.__file__
model = ilab.load_model()
sae = ilab.load_sae("embedded", layer=6)
clt = ilab.circuits.embedded_clt()  # the transcoders' data package carries the CLT too
assert clt.n_layers == model.n_layers, clt
acts = model.collect(["The cat sat on the mat."], sites=[sae.site])
widget = ilab.widgets.FeatureHeatmap(acts, sae, features=[1, 2])
bundle = widget._repr_mimebundle_()
assert "application/vnd.jupyter.widget-view+json" in bundle[0], bundle
print("shown", type(widget).__name__, Path(ilab.__file__).parent)
"""


def dependencies_view(folder: Path) -> Path:
    """A folder of links to this environment's installed packages, without interplab and its data packages."""
    folder.mkdir()
    for packages in map(Path, site.getsitepackages()):
        for entry in packages.iterdir():
            if not entry.name.startswith(("interplab", "__editable__")) and not (folder / entry.name).exists():
                (folder / entry.name).symlink_to(entry)
    return folder


def fresh_venv(folder: Path, deps: Path) -> Path:
    """A new virtual environment that also reads the packages in ``deps``."""
    venv.create(folder, with_pip=True)
    python = folder / "bin" / "python"
    target = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(target) / "deps.pth").write_text(f"{deps}\n")
    # the venv's own old setuptools would shadow the one torch requires
    subprocess.run([python, "-m", "pip", "uninstall", "--quiet", "--yes", "setuptools"], check=True)
    return python


@pytest.mark.embedded
def test_the_wheels_install_with_the_embedded_extra_and_show_a_widget(tmp_path):
    dist = tmp_path / "dist"
    build_wheel(copy_tree(tmp_path / "src"), dist)
    for package in DATA_PACKAGES:
        build_wheel(ROOT / "packages" / package, dist)
    python = fresh_venv(tmp_path / "venv", dependencies_view(tmp_path / "deps"))
    install = [python, "-m", "pip", "install", "--no-index", "--find-links", dist, "interplab[embedded]"]
    done = subprocess.run(install, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert all("Successfully installed" in done.stdout and p in done.stdout for p in DATA_PACKAGES), done.stdout
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run = subprocess.run(
        [python, "-c", SCRIPT.format(root=str(ROOT))], capture_output=True, text=True, cwd=tmp_path, env=env,
        timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "shown FeatureHeatmap" in run.stdout
