"""load_model: the embedded model, a Hugging Face id or folder, a built model, or any module.

Example
-------
>>> import interplab as ilab
>>> model = ilab.load_model()                       # embedded Gemma 3 270M, offline
>>> model = ilab.load_model("gpt2")                 # any HF id or local folder
>>> model = ilab.load_model(remote="local")         # nnsight's remote path, run in-process
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import weakref
from pathlib import Path
from typing import Any

import nnsight
import torch
from nnsight import TransformersModel

from .embedded import EMBEDDED_NAME, prepare_embedded_model
from .model import Model, Remote

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: The embedded model's nnsight model per (dtype, device) while any Model uses it: a second
#: load_model() (remote="local", say) shares its memory-mapped weights and tokenizer.
_SHARED: weakref.WeakValueDictionary[tuple[str, str], TransformersModel] = weakref.WeakValueDictionary()


def _check_remote(remote: Remote) -> Remote:
    if remote is False or remote is True or remote == "local":
        return remote
    if isinstance(remote, str) and remote.startswith(("http://", "https://")):
        return remote
    raise ValueError(
        f"remote={remote!r} is not valid: use False (local), True (NDIF), "
        "'local' (nnsight's remote serialization path, in-process) or an NDIF URL."
    )


def _check_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype in _DTYPES:
        return _DTYPES[dtype]
    raise ValueError(
        f"dtype={dtype!r} is not valid; choose one of {sorted(_DTYPES)}, a torch.dtype, "
        "or None (the dtype the weights are stored in)."
    )


def load_model(
    model: str | Path | torch.nn.Module | None = None,
    *,
    tokenizer: Any = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device = "cpu",
    remote: Remote = False,
) -> Model:
    """Load a language model and wrap it for tracing.

    Parameters
    ----------
    model
        ``None`` or ``"embedded"`` for the bundled Gemma 3 270M; a Hugging Face id or
        local folder; an already-built transformers model (give ``tokenizer``);
        or any ``torch.nn.Module`` (traced by nnsight, without named sites).
    tokenizer
        The tokenizer for a built model; loaded automatically for names and folders.
    dtype, device
        Weights' dtype and device for models loaded here. ``None`` keeps the dtype the weights
        are stored in: bfloat16 for the embedded model (Gemma's own dtype; its weights are then
        memory-mapped, not copied), what the checkpoint says for others. ``torch.float32``
        upcasts: twice the memory, about half the speed on CPU, logits closer to a float32 reference.
    remote
        ``True`` sends traces to NDIF; ``"local"`` runs nnsight's remote serialization
        path offline (how tests check remote safety); an ``http://`` URL names an NDIF host.
    """
    remote = _check_remote(remote)
    dtype = _check_dtype(dtype)
    if model is None or model == "embedded":
        folder = prepare_embedded_model()
        key = (str(dtype), str(device))
        nn = _SHARED.get(key)
        if nn is None:
            nn = _SHARED[key] = _nnsight_model(str(folder), dtype, device)
        return Model(nn, nn.tokenizer, name=EMBEDDED_NAME, remote=remote)
    if isinstance(model, (str, Path)):
        name = str(model)
        if remote is True or (isinstance(remote, str) and remote != "local"):
            return _remote_only(name, remote)
        return _from_pretrained(name, name, dtype, device, remote)
    if isinstance(model, torch.nn.Module):
        return _from_module(model, tokenizer, remote)
    raise TypeError(
        f"model must be None ('embedded'), a Hugging Face id, a folder, or a torch.nn.Module; "
        f"got {type(model).__name__}."
    )


def _nnsight_model(source: str, dtype: torch.dtype | None, device: Any) -> TransformersModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if Path(source).exists() and not (Path(source) / "config.json").exists():
        raise FileNotFoundError(f"{source!r} is a folder without config.json: not a transformers model.")
    hf_model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype or "auto").to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(source)
    _release_freed_heap()
    return TransformersModel(hf_model, tokenizer=tokenizer)


def _release_freed_heap() -> None:
    """Give memory freed while parsing the tokenizer back to the OS (glibc keeps it otherwise).

    Parsing the embedded model's 33 MB tokenizer.json leaves about 200 MB of freed small blocks
    in the process; ``malloc_trim`` returns them. A no-op where glibc is not the allocator.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _from_pretrained(source: str, name: str, dtype: torch.dtype | None, device: Any, remote: Remote) -> Model:
    nn = _nnsight_model(source, dtype, device)
    return Model(nn, nn.tokenizer, name=name, remote=remote)


def _remote_only(name: str, remote: Remote) -> Model:
    """A model whose weights stay on NDIF: nnsight builds it on the meta device."""
    if Path(name).exists():
        # A self-hosted NDIF serving a local folder knows it by its path.
        nnsight.modeling.huggingface._ID_CACHE[name] = name
    nn = TransformersModel(name)
    return Model(nn, nn.tokenizer, name=name, remote=remote)


def _from_module(module: torch.nn.Module, tokenizer: Any, remote: Remote) -> Model:
    from transformers import PreTrainedModel

    if isinstance(module, PreTrainedModel):
        if tokenizer is None:
            raise ValueError(
                "A built transformers model needs its tokenizer: load_model(hf_model, tokenizer=tok)."
            )
        name = getattr(module.config, "_name_or_path", "") or type(module).__name__
        if remote is True or (isinstance(remote, str) and remote != "local"):
            raise ValueError(
                f"remote={remote!r} needs a model NDIF hosts, named by its Hugging Face id: "
                f"load_model('org/name', remote=True), not a model built in this process."
            )
        nn = TransformersModel(module.eval(), tokenizer=tokenizer)
        return Model(nn, tokenizer, name=name, remote=remote)
    if remote:
        # nnsight would silently run a plain module locally: refuse instead.
        raise ValueError(
            f"remote={remote!r} is not possible for a plain {type(module).__name__}: "
            "only Hugging Face language models can run remotely."
        )
    return Model(nnsight.NNsight(module), tokenizer, name=type(module).__name__)
