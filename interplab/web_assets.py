"""The three browser files that make exported notebooks render their widgets offline.

They come from pinned npm packages, fetched once with ``npm pack`` (``make`` or
``python -m interplab prepare`` does it) into ``$INTERPLAB_CACHE/web/``; nothing is
committed to the repository and nothing is fetched when a page is opened.

- ``require.js``: the AMD loader the widget renderer needs (npm ``requirejs``);
- ``embed-amd.js``: the Jupyter widgets HTML manager (npm ``@jupyter-widgets/html-manager``),
  which bundles ``@jupyter-widgets/base``, ``controls`` and ``output``;
- ``anywidget.js``: anywidget's AMD module (npm ``anywidget``, ``dist/index.js``).

Example
-------
>>> from interplab.web_assets import prepare_web_assets, web_assets
>>> folder = prepare_web_assets()   # once, needs npm and the npm registry
>>> web_assets()["anywidget.js"]    # later: the cached file, offline
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from interplab.core.storage.atomic import make_dirs, remove, write_bytes, write_json
from interplab.core.storage.cache import cache_dir

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WebPackage:
    spec: str  # npm package@version
    member: str  # the file taken from the tarball
    integrity: str  # the registry's sha512 of the tarball (npm view SPEC dist.integrity)


#: Cached file name -> where it comes from. Versions are pinned to what the Python side speaks:
#: html-manager 1.0.15 depends on @jupyter-widgets/base ^6.0.12 / controls ^5.0.13, the same as
#: the jupyterlab-manager 5.0.16 that ipywidgets 8.1.9 ships; anywidget 0.11.0 is the Python
#: anywidget's own version; requirejs 2.3.8 is the current 2.x (nbconvert's CDN default is 2.1.10,
#: older than the 2.3.7 prototype-pollution fix).
PACKAGES: dict[str, WebPackage] = {
    "require.js": WebPackage(
        "requirejs@2.3.8",
        "package/require.js",
        "sha512-7/cTSLOdYkNBNJcDMWf+luFvMriVm7eYxp4BcFCsAX0wF421Vyce5SXP17c+Jd5otXKGNehIonFlyQXSowL6Mw==",
    ),
    "embed-amd.js": WebPackage(
        "@jupyter-widgets/html-manager@1.0.15",
        "package/dist/embed-amd.js",
        "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA==",
    ),
    "anywidget.js": WebPackage(
        "anywidget@0.11.0",
        "package/dist/index.js",
        "sha512-LHZgW2j5UjyerZSZcO+BtZPXGMSORQV2bUT480hOR5x/BXS8sOradi/71amJfMueSEnKX0dqPwTfsOGHTsyZpQ==",
    ),
}
_MANIFEST = "manifest.json"
PREPARE_HINT = "run `python -m interplab prepare` (or `make`) once, with npm and the npm registry reachable"


class WebAssetsError(RuntimeError):
    """The web assets are missing, or could not be fetched."""


def web_dir() -> Path:
    """Where the web assets live: ``$INTERPLAB_CACHE/web``."""
    return cache_dir() / "web"


def _wanted_manifest() -> dict[str, str]:
    return {name: pkg.spec for name, pkg in PACKAGES.items()}


def web_assets_ready() -> bool:
    """Whether all pinned files are in the cache (the manifest is written last)."""
    folder = web_dir()
    try:
        manifest = json.loads((folder / _MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return manifest == _wanted_manifest() and all((folder / name).is_file() for name in PACKAGES)


def web_assets() -> dict[str, Path]:
    """The cached files by name; raises :class:`WebAssetsError` saying how to prepare them."""
    if not web_assets_ready():
        specs = ", ".join(pkg.spec for pkg in PACKAGES.values())
        raise WebAssetsError(
            f"The offline web assets for HTML export ({specs}) are not prepared in {web_dir()}: {PREPARE_HINT}."
        )
    return {name: web_dir() / name for name in PACKAGES}


def _integrity(path: Path) -> str:
    digest = hashlib.sha512(path.read_bytes()).digest()
    return "sha512-" + base64.b64encode(digest).decode("ascii")


def _npm_pack(specs: list[str], work: Path) -> dict[str, Path]:
    """``npm pack`` the specs into ``work``; returns spec -> tarball."""
    npm = shutil.which("npm")
    if npm is None:
        raise WebAssetsError(
            f"npm (Node.js) is needed once to fetch {specs} for offline HTML export: "
            f"install Node.js and {PREPARE_HINT}."
        )
    # A private npm cache and log folder: nothing is written to ~/.npm.
    cmd = [
        npm, "pack", *specs, "--json", "--pack-destination", str(work),
        "--cache", str(work / "npm-cache"), "--logs-dir", str(work / "npm-logs"),
        "--no-update-notifier", "--no-fund", "--no-audit",
    ]  # fmt: skip
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=work, timeout=600)
    except subprocess.CalledProcessError as exc:
        raise WebAssetsError(f"`npm pack {' '.join(specs)}` failed:\n{exc.stderr.strip()[-2000:]}") from exc
    except subprocess.TimeoutExpired as exc:
        raise WebAssetsError(f"`npm pack {' '.join(specs)}` took over {exc.timeout:.0f} s") from exc
    return {f"{e['name']}@{e['version']}": work / e["filename"] for e in json.loads(out.stdout)}


def prepare_web_assets(force: bool = False) -> Path:
    """Fetch the pinned npm packages once and extract the three files into :func:`web_dir`.

    Idempotent (does nothing when the manifest matches the pins); each file is written
    to a temporary name and renamed into place, and the manifest is written last.
    """
    folder = web_dir()
    if web_assets_ready() and not force:
        return folder
    logger.warning("Preparing the offline web assets in %s (npm pack, once).", folder)
    make_dirs(folder)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".web-") as tmp:
        work = Path(tmp)
        tarballs = _npm_pack([pkg.spec for pkg in PACKAGES.values()], work)
        staged: dict[str, bytes] = {}
        for name, pkg in PACKAGES.items():
            tarball = tarballs.get(pkg.spec)
            if tarball is None or not tarball.is_file():
                raise WebAssetsError(f"npm pack {pkg.spec} left no tarball in {work}")
            got = _integrity(tarball)
            if got != pkg.integrity:
                raise WebAssetsError(f"{pkg.spec}: tarball integrity {got} differs from the pinned {pkg.integrity}")
            with tarfile.open(tarball) as tar:
                member = tar.extractfile(pkg.member)
                if member is None:
                    raise WebAssetsError(f"{pkg.spec} has no file {pkg.member}")
                staged[name] = member.read()
        remove(folder / _MANIFEST)  # not ready while files change
        for name, data in staged.items():
            write_bytes(folder / name, data)
        write_json(folder / _MANIFEST, _wanted_manifest())
    return folder
