"""Labels for SAE latents: set by the user, kept beside the SAE, suggested from the data.

Labels live in ``labels.json`` in the SAE's folder when it is known and writable (and not inside
the installed interplab package), else in ``$INTERPLAB_CACHE/labels/<sae id>.json`` (default
``~/.cache/interplab``), where the id is a hash of the SAE's weights and site, so the same SAE
finds its labels again in any session.

Example
-------
>>> set_label(sae, 123, "French city names")
>>> load_labels(sae)
{123: 'French city names'}
>>> suggest_label(data, 123)
"' Paris'/' Lyon' → ' is', ','"
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..checks import check_unicode
from ..saes.base import sae_fingerprint
from ..storage.atomic import write_json
from ..storage.cache import cache_dir
from ..storage.readers import Fields, FileError, in_folder, read_json

if TYPE_CHECKING:
    from ..saes.base import SAE

FILE = "labels.json"
#: Folder of the cache where labels of SAEs without a writable folder are kept, one file per fingerprint.
LABELS_DIR = "labels"
#: Labels longer than this are refused (a label is a short name).
MAX_LABEL = 2000
#: The installed engine (``interplab/core``, or ``core/`` of a checkout installed in editable mode): SAEs
#: shipped inside it (the packaged suite) keep their labels in the cache, never in the package.
_ENGINE = Path(__file__).resolve().parents[1]


def sae_folder(sae: SAE) -> Path | None:
    """The folder an SAE was loaded from, when known (``sae.source_path`` or ``cfg.metadata['source_path']``)."""
    where = getattr(sae, "source_path", None) or sae.cfg.metadata.get("source_path")
    if not where:
        return None
    p = Path(where)
    return p if p.is_dir() else p.parent


def labels_path(sae: SAE) -> Path:
    """Where this SAE's labels are kept (see the module docstring)."""
    if not hasattr(sae, "cfg") or not hasattr(sae, "W_dec"):
        raise TypeError(f"Labels belong to an interplab SAE, got {type(sae).__name__}: {sae!r:.60}.")
    folder = sae_folder(sae)
    writable = folder is not None and folder.exists() and os.access(folder, os.W_OK)
    if writable and folder is not None and not folder.resolve().is_relative_to(_ENGINE):
        return in_folder(folder, FILE)
    return cache_dir() / LABELS_DIR / f"{sae_fingerprint(sae)}.json"


def read_labels(path: Path, d_sae: int | None = None) -> dict[int, str]:
    """Labels from a JSON file ({"123": "text"}), every id and text checked; an empty dict when there is none."""
    if not path.exists():
        return {}
    raw = Fields(path, read_json(path, max_bytes=64 * 1024**2))
    return check_labels(path, raw.str_map_all(), d_sae)


def check_labels(file: Path, labels: dict[int, str], d_sae: int | None = None, where: str = "") -> dict[int, str]:
    """``labels`` read from ``file`` (``where``: their field in it), each id a latent and each text at most
    :data:`MAX_LABEL` characters; a :class:`FileError` naming the first that is not. Every labels reader uses it."""
    for k, v in labels.items():
        if k < 0 or (d_sae is not None and k >= d_sae):
            bound = f"0..{d_sae - 1}" if d_sae is not None else ">= 0"
            raise FileError(file, f"{where}[{k!r}]", f"is not a latent id ({bound})")
        if len(v) > MAX_LABEL:
            raise FileError(file, f"{where}[{k!r}]", f"is a label of {len(v)} characters (at most {MAX_LABEL})")
    return labels


def write_labels(path: Path, labels: dict[int, str]) -> Path:
    """Write labels atomically (temp file, then rename)."""
    return write_json(path, {str(k): v for k, v in sorted(labels.items())})


def update_label(path: Path, i: int, text: str) -> dict[int, str]:
    """Set (or, with an empty text, remove) one label in a labels file, keeping the others."""
    check_label(text)
    labels = read_labels(path)
    if text.strip():
        labels[int(i)] = text.strip()
    else:
        labels.pop(int(i), None)
    write_labels(path, labels)
    return labels


def load_labels(sae: SAE) -> dict[int, str]:
    """This SAE's saved labels ({latent id: text})."""
    return read_labels(labels_path(sae))


def check_label(text: Any) -> str:
    """A label text (a string of at most :data:`MAX_LABEL` characters), or a clear error."""
    if not isinstance(text, str):
        raise TypeError(f"A label is a string, got {type(text).__name__}: {text!r:.60}.")
    if len(text) > MAX_LABEL:
        raise ValueError(f"A label is at most {MAX_LABEL} characters; this one has {len(text)}.")
    return check_unicode("The label", text)


def set_label(sae: SAE, i: int, text: str, data: Any = None) -> Path:
    """Label latent ``i`` of ``sae`` and save; an empty text removes the label. Updates ``data`` too."""
    sae.direction(i)  # validates i
    check_label(text)
    path = labels_path(sae)
    labels = update_label(path, i, text)
    if data is not None:
        data.labels = dict(labels)
    return path


def suggest_label(data: Any, i: int) -> str:
    """A label suggested from the tokens latent ``i`` fires on most and the tokens it promotes."""
    return data.suggest_label(i)


def label_of(labels: dict[int, str], i: int) -> str:
    """``"123"`` or ``"123 · French city names"``: how a latent id is shown wherever it appears."""
    text = labels.get(int(i), "")
    return f"{i} · {text}" if text else str(i)


def as_dict(labels: Any) -> dict[int, str]:
    """Labels given as a dict, a FeatureData or None, as a plain dict."""
    if labels is None:
        return {}
    if isinstance(labels, dict):
        return {int(k): str(v) for k, v in labels.items()}
    return dict(getattr(labels, "labels", {}))
