"""The shared widget layer: binary array payloads, display options, the base widget class and its colour options.

Every widget is a thin Python class plus a folder of ES modules under ``js/<widget>/`` (``index.js``
its entry, importing ``js/shared/`` and its own parts by relative path) and the stylesheets beside
them. :func:`esm` links the folder into the one module anywidget loads (``_bundle.link``) and
:func:`css` joins the stylesheets, so there is no build step and no network import at run time. With
``ANYWIDGET_HMR=1`` (anywidget's hot reload) both follow edits to any of their files.

Arrays travel as raw bytes with their dtype and shape (``{"view": memoryview, "dtype":
"float32", "shape": [n, f]}``), never as JSON lists.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anywidget
import numpy as np
import traitlets
from anywidget._file_contents import FileContents, VirtualFileContents
from interplab.core.views.colors import check_scale_options

from ._bundle import LinkError, link, modules

logger = logging.getLogger(__name__)

HERE = Path(__file__).parent / "js"
_DTYPES = {"float32": np.float32, "int32": np.int32, "uint8": np.uint8}

#: Display options shared by every widget; ``%interplab`` shows and sets them.
OPTIONS: dict[str, Any] = {
    "scheme": "auto",  # colour scheme: auto (follow JupyterLab), light or dark
    "max_values": 4_000_000,  # cap on token x feature values sent at once; more are fetched on demand
    "page_tokens": 2_000,  # tokens drawn per page of a heatmap
}
SCHEMES = ("auto", "light", "dark")


def array_payload(array: Any, dtype: str) -> dict[str, Any]:
    """Pack an array as a binary payload for a widget trait."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {sorted(_DTYPES)}.")
    arr = np.ascontiguousarray(np.asarray(array, dtype=_DTYPES[dtype]))
    return {"view": memoryview(arr.tobytes()), "dtype": dtype, "shape": list(arr.shape)}


def payload_array(payload: dict[str, Any]) -> np.ndarray:
    """Unpack a payload made by :func:`array_payload` (used by tests and the Python side)."""
    raw = payload["view"]
    buf = raw.tobytes() if isinstance(raw, memoryview) else bytes(raw)
    return np.frombuffer(buf, dtype=_DTYPES[payload["dtype"]]).reshape(payload["shape"])


class Bundle(VirtualFileContents):
    """The text of several files joined in order: what anywidget sends as a widget's ``_esm`` or ``_css``.

    With ``hot_reload`` (default: ``ANYWIDGET_HMR=1``) each file is watched and every live widget
    gets the new bundle when one changes, as anywidget does for a single file path.
    """

    def __init__(self, paths: list[Path], hot_reload: bool | None = None):
        self.paths = [Path(p) for p in paths]
        super().__init__(self.join())
        self._watchers: list[FileContents] = []
        if os.environ.get("ANYWIDGET_HMR") == "1" if hot_reload is None else hot_reload:
            for path in self.paths:
                self._watch(path)

    def _watch(self, path: Path) -> None:
        watcher = FileContents(path, start_thread=True)
        watcher.changed.connect(self._reload)
        self._watchers.append(watcher)

    def join(self) -> str:
        return "\n".join(p.read_text(encoding="utf-8") for p in self.paths)

    def _reload(self, _new: str) -> None:
        self._publish(self.join())

    def _publish(self, contents: str) -> None:
        logger.info("interplab widgets: reloading %s", [p.name for p in self.paths])
        self.contents = contents

    def stop(self) -> None:
        """Stop watching the files."""
        for watcher in self._watchers:
            watcher.stop_thread()


class LinkedModule(Bundle):
    """The ES module linked from ``entry`` and every module it imports (see :mod:`._bundle`).

    With hot reload every module it reaches is watched (a module an edit starts importing too); an edit
    that does not link (a half-typed import) is logged and the last good module kept.
    """

    def __init__(self, entry: Path, hot_reload: bool | None = None):
        self.entry = Path(entry)
        super().__init__([m.path for m in modules(self.entry)], hot_reload)

    def join(self) -> str:
        return link(self.entry)

    def _reload(self, _new: str) -> None:
        try:
            contents = self.join()
            reached = [m.path for m in modules(self.entry)]
        except LinkError as exc:
            logger.warning("interplab widgets: %s", exc)
            return
        for path in reached:  # watched before the new module is published, so no edit of them falls between
            if path not in self.paths:
                self.paths.append(path)
                self._watch(path)
        self._publish(contents)


def _folder(name: str) -> Path:
    folder = HERE / name
    if not (folder / "index.js").is_file():
        widgets = sorted(p.name for p in HERE.iterdir() if (p / "index.js").is_file())
        raise ValueError(f"No widget module {name!r}: js/{name}/index.js does not exist; widgets are {widgets}.")
    return folder


def esm(name: str) -> LinkedModule:
    """A widget's ES module: ``js/<name>/index.js`` linked with every module it imports (``js/shared/`` too)."""
    return LinkedModule(_folder(name) / "index.js")


def css(name: str) -> Bundle:
    """The shared stylesheets (``js/shared/*.css``) followed by the widget's own (``js/<name>/*.css``)."""
    return Bundle(sorted((HERE / "shared").glob("*.css")) + sorted(_folder(name).glob("*.css")))


class ScaleOptions:
    """The colour options ``scale``/``vmin``/``vmax``/``center`` checked together, for a widget that declares them.

    Each option set alone is checked against the others (a ``TraitError`` names the bad value);
    :meth:`_set_scale_options` sets several at once, checked once.
    """

    if TYPE_CHECKING:  # given by the traitlets widget this is mixed into

        def hold_trait_notifications(self) -> Any: ...

    def _set_scale_options(
        self, scale: str, vmin: float | None, vmax: float | None, center: float | None, **more: Any
    ) -> None:
        scale, vmin, vmax, center = check_scale_options(scale, vmin, vmax, center)
        with self.hold_trait_notifications():  # validated together when the block ends
            self.scale, self.vmin, self.vmax, self.center = scale, vmin, vmax, center
            for name, value in more.items():
                setattr(self, name, value)

    @traitlets.validate("vmin", "vmax", "center", "scale")
    def _check_scale_option(self, proposal: dict[str, Any]) -> Any:
        options = {"scale": self.scale, "vmin": self.vmin, "vmax": self.vmax, "center": self.center}
        options[proposal["trait"].name] = proposal["value"]
        try:
            check_scale_options(**options)
        except ValueError as exc:
            raise traitlets.TraitError(f"{exc} Use set_scale(...) to change several options at once.") from None
        return proposal["value"]


class Widget(anywidget.AnyWidget):
    """Base class: a scheme trait that follows the ``%interplab`` options."""

    scheme = traitlets.Unicode("auto").tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("scheme", OPTIONS["scheme"])
        super().__init__(**kwargs)
