"""The shared widget layer: binary array payloads, display options, and the base widget class.

Every widget is a thin Python class plus its own ``.js`` (and ``.css``) file. The JS
of ``_shared.js`` (decoding, colour scales, number formatting, safe text) is prepended
to each widget's module, so there is no build step and no network import at run time.

Arrays travel as raw bytes with their dtype and shape (``{"view": memoryview, "dtype":
"float32", "shape": [n, f]}``), never as JSON lists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anywidget
import numpy as np
import traitlets

HERE = Path(__file__).parent
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


def esm(name: str) -> str:
    """A widget's ES module: the shared helpers followed by its own file."""
    return (HERE / "_shared.js").read_text() + "\n" + (HERE / name).read_text()


def css(name: str) -> str:
    """The shared stylesheet followed by the widget's own."""
    own = HERE / name
    return (HERE / "_shared.css").read_text() + ("\n" + own.read_text() if own.exists() else "")


class Widget(anywidget.AnyWidget):
    """Base class: a scheme trait that follows the ``%interplab`` options."""

    scheme = traitlets.Unicode("auto").tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("scheme", OPTIONS["scheme"])
        super().__init__(**kwargs)
