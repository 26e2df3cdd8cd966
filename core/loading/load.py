"""load_model: the embedded model, a Hugging Face id or folder, a built model, or any module.

Example
-------
>>> import interplab as ilab
>>> model = ilab.load_model()                       # embedded Gemma 3 270M, offline
>>> chat = ilab.load_model("smollm2-135m-instruct")  # embedded SmolLM2-135M-Instruct, offline
>>> model = ilab.load_model("gpt2")                 # any HF id or local folder
>>> model = ilab.load_model(remote="local")         # nnsight's remote path, run in-process
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import weakref
from pathlib import Path
from typing import Any

import nnsight
import torch
from nnsight import TransformersModel

from ..checks import check_device
from ..memory.unembed import page_embedding, page_unembedding
from ..model.custom import SitedNNsight, custom_config, custom_family, sited_tokenizer, vocab_size
from ..model.model import Model, Remote
from ..model.remote import RemoteModelError, connect
from ..model.vision import VISION_TYPES, VisionModel
from .embedded import EMBEDDED, EMBEDDED_NAME, prepare_embedded_model

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: The embedded model's nnsight model per (dtype, device) while any Model uses it: a second
#: load_model() (remote="local", say) shares its memory-mapped weights and tokenizer.
_SHARED: weakref.WeakValueDictionary[tuple[str, str, str], TransformersModel] = weakref.WeakValueDictionary()


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
    if dtype is None:
        return dtype
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ValueError(f"dtype={dtype} is not a floating dtype: a model's weights are one of {sorted(_DTYPES)}.")
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
    sites: dict[str, str] | None = None,
) -> Model:
    """Load a language model and wrap it for tracing.

    Parameters
    ----------
    model
        ``None`` or ``"embedded"`` for the bundled Gemma 3 270M; ``"smollm2-135m-instruct"`` for the
        embedded chat model (SmolLM2-135M-Instruct, Llama family); a Hugging Face id or
        local folder; an already-built transformers model (give ``tokenizer``);
        or any ``torch.nn.Module`` (traced by nnsight; named sites with ``sites=``).
    tokenizer
        The tokenizer for a built model; loaded automatically for names and folders. With ``sites=``:
        a list of token names (texts are names separated by spaces), default ``"0" .. str(vocab - 1)``.
    dtype, device
        Weights' dtype and device for models loaded here. ``None`` keeps the dtype the weights
        are stored in: bfloat16 for the embedded model (Gemma's own dtype; its weights are then
        memory-mapped, not copied), what the checkpoint says for others. ``torch.float32``
        upcasts: twice the memory, about half the speed on CPU, logits closer to a float32 reference.
    remote
        ``True`` sends traces to NDIF; ``"local"`` runs nnsight's remote serialization
        path offline (how tests check remote safety); an ``http://`` URL names an NDIF host.
    sites
        For a plain ``torch.nn.Module`` that maps token ids [batch, pos] to logits: site names (``{L}`` for the
        block) to module paths, plus ``"unembed"``, ``"final_norm"``, ``"blocks"`` (:mod:`interplab.core.model.custom`),
        e.g. ``{"blocks.{L}.hook_resid_post": "layers.{L}", "blocks.{L}.mlp.hook_post": "layers.{L}.act",
        "unembed": "head"}``.
    """
    remote = _check_remote(remote)
    dtype = _check_dtype(dtype)
    check_device(device)
    if sites is not None and not isinstance(model, torch.nn.Module):
        raise ValueError(f"sites= maps a plain torch.nn.Module's parts; {model!r:.80} has its own site table.")
    if model is None or model == "embedded":
        if remote is True or (isinstance(remote, str) and remote != "local"):
            return _from_server(None, remote, tokenizer)
        return _embedded(EMBEDDED_NAME, dtype, device, remote)
    if isinstance(model, str) and model in EMBEDDED:
        if remote is True or (isinstance(remote, str) and remote != "local"):
            return _from_server(str(prepare_embedded_model(name=model)), remote, tokenizer)
        return _embedded(model, dtype, device, remote)
    if isinstance(model, (str, Path)):
        name = str(model)
        if remote is True or (isinstance(remote, str) and remote != "local"):
            return _from_server(name, remote, tokenizer)
        return _from_pretrained(name, name, dtype, device, remote)
    if isinstance(model, torch.nn.Module):
        return _from_module(model, tokenizer, remote, sites)
    raise TypeError(
        f"model must be None ('embedded'), a Hugging Face id, a folder, or a torch.nn.Module; "
        f"got {type(model).__name__}."
    )


def _embedded(name: str, dtype: torch.dtype | None, device: Any, remote: Remote) -> Model:
    """An embedded model, prepared once; its nnsight model shared while any Model uses it."""
    folder = prepare_embedded_model(name=name)
    key = (name, str(dtype), str(device))
    nn = _SHARED.get(key)
    if nn is None:
        nn = _SHARED[key] = _nnsight_model(str(folder), dtype, device)
    return Model(nn, nn.tokenizer, name=name, remote=remote)


def _nnsight_model(source: str, dtype: torch.dtype | None, device: Any) -> TransformersModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if Path(source).exists() and not (Path(source) / "config.json").exists():
        raise FileNotFoundError(f"{source!r} is a folder without config.json: not a transformers model.")
    hf_model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype or "auto").to(device).eval()
    head = hf_model.get_output_embeddings()
    if head is not None:
        page_unembedding(head)  # a memory-mapped unembedding is read a slice at a time (core/memory/unembed.py)
    page_embedding(hf_model.get_input_embeddings())  # and the embedding's pages dropped after each lookup
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
    vision = _vision_pretrained(source, dtype, device)
    if vision is not None:
        if remote:
            raise ValueError(f"remote={remote!r}: a vision model ({name}) runs locally only.")
        return vision
    nn = _nnsight_model(source, dtype, device)
    return Model(nn, nn.tokenizer, name=name, remote=remote)


def _vision_pretrained(source: str, dtype: torch.dtype | None, device: Any) -> Model | None:
    """A CLIP or ViT checkpoint as a :class:`VisionModel` with its processor; None for any other model."""
    config_file = Path(source) / "config.json"
    if Path(source).is_dir() and config_file.is_file():
        kind = json.loads(config_file.read_text()).get("model_type")
    elif Path(source).exists():
        return None
    else:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(source, "config.json")
        kind = json.loads(Path(cached).read_text()).get("model_type") if isinstance(cached, str) else None
    if kind not in VISION_TYPES:
        return None
    from transformers import AutoModel, AutoProcessor

    hf_model = AutoModel.from_pretrained(source, dtype=dtype or "auto").to(device).eval()
    try:
        processor = AutoProcessor.from_pretrained(source)
    except (OSError, ValueError, TypeError):
        processor = None  # a folder with weights only: pixel tensors in, no text tower's tokenizer
        logger.info("%s has no processor: give images as pixel tensors.", source)
    return VisionModel(hf_model, processor, name=source)


def _from_server(name: str | None, remote: Remote, tokenizer: Any) -> Model:
    """A model whose weights stay on the NDIF server; nnsight builds its skeleton on the meta device.

    Nothing is loaded or run here before the server answered: :func:`interplab.core.model.remote.connect`
    checks the host and the nnsight versions, and says which models it hosts and by what name. The
    embedded model and a local folder are found among them by their architecture (a self-hosted
    server knows a model by the folder it loads it from).
    """
    from transformers import AutoConfig, AutoTokenizer

    server = connect(remote)
    hosted = _hosted_for(server, name)
    # A folder or hub id gives the tokenizer (and the config when the server does not say); None: the embedded one.
    source = None if name is None else str(name)
    config = AutoConfig.for_model(**hosted.config) if hosted.config else None
    try:
        if source is not None and not Path(source).is_dir() and (config is None or tokenizer is None):
            _check_hub(source)
        if source is None:
            source = str(prepare_embedded_model())  # its tokenizer and config only; the weights stay unread
        if config is None:
            config = AutoConfig.from_pretrained(source)
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(source)
    except OSError as err:
        raise RemoteModelError(
            f"{server.host} hosts {hosted.name!r}, but its config and tokenizer come from the Hugging Face Hub, "
            f"which cannot be reached from here ({type(err).__name__}: {str(err).splitlines()[0][:200]}). Connect "
            f"to the network once (they are cached), or give tokenizer= and a local folder with its config.json."
        ) from None
    nnsight.modeling.huggingface._ID_CACHE[hosted.name] = hosted.name
    dtype = _DTYPES.get(hosted.dtype or "")
    kwargs = {"dtype": dtype} if dtype is not None else {}
    nn = TransformersModel(hosted.name, task="text-generation", tokenizer=tokenizer, config=config, **kwargs)
    if nn.to_model_key() != hosted.model_key and hosted.model_key:
        logger.warning("The server's key for %s is %s; this client built %s.", hosted.name, hosted.model_key,
                       nn.to_model_key())  # fmt: skip
    label = EMBEDDED_NAME if name is None else str(name)
    model = Model(nn, tokenizer, name=label, remote=remote, server=server)
    if label != hosted.name:
        logger.info("%s is %r on %s.", label, hosted.name, server.host)
    return model


def _check_hub(repo_id: str, timeout: float = 3.0) -> None:
    """Fail at once when ``repo_id``'s files are neither cached nor reachable (the Hub client retries for ~20 s)."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(repo_id, "config.json"), str) or constants.HF_HUB_OFFLINE:
        return
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
    except OSError as err:
        raise OSError(f"no network to reach {constants.ENDPOINT} ({err})") from None


#: The fields that identify an architecture (and so a hosted copy of a local model).
_SIGNATURE = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "vocab_size")  # fmt: skip
#: The embedded Gemma 3 270M's signature, known without preparing it.
EMBEDDED_SIGNATURE = ("gemma3_text", 640, 18, 4, 2048, 262144)


def _signature(config: dict[str, Any] | None) -> tuple[Any, ...] | None:
    if not config:
        return None
    config = config.get("text_config", config) if config.get("model_type") == "gemma3" else config
    return tuple(config.get(k) for k in _SIGNATURE)


def _hosted_for(server: Any, name: str | None) -> Any:
    """The hosted model that ``name`` means (None: the embedded one); an error listing the hosted names."""
    listed = ", ".join(repr(n) for n in server.names()) or "nothing"
    if name is not None and server.find(str(name)) is not None:
        return server.find(str(name))
    if name is None or Path(name).is_dir():
        wanted: tuple[Any, ...] | None
        if name is None:
            wanted, what = EMBEDDED_SIGNATURE, "The embedded Gemma 3 270M"
        else:
            wanted = _signature(json.loads((Path(name) / "config.json").read_text()))
            what = f"The model in {str(name)!r}"
        same = [h for h in server.hosted if _signature(h.config) == wanted]
        if same:
            return same[0]
        raise RemoteModelError(
            f"{what} is not hosted on {server.host}, which hosts {listed} (a server knows a model by its Hub id, "
            "or by the folder it loads it from). Load one of those by that name, "
            f"e.g. load_model({server.names()[0]!r}, remote=...), or serve this model: `make ndif` "
            "starts a server with the embedded model." if server.hosted else
            f"{what} is not hosted on {server.host}, which hosts {listed}. `make ndif` starts a server that does."
        )  # fmt: skip
    raise RemoteModelError(
        f"{name!r} is not hosted on {server.host}; it hosts {listed}. Use one of those names, or a server "
        "that hosts this model."
    )


def _from_module(module: torch.nn.Module, tokenizer: Any, remote: Remote, sites: dict[str, str] | None) -> Model:
    from transformers import PreTrainedModel

    if sites is not None and isinstance(module, PreTrainedModel):
        raise ValueError(f"sites= maps a plain torch.nn.Module's parts; a {type(module).__name__} has its own site "
                         "table (load_model(hf_model, tokenizer=tok)).")  # fmt: skip
    if isinstance(module, PreTrainedModel) and getattr(module.config, "model_type", None) in VISION_TYPES:
        if remote:
            raise ValueError(f"remote={remote!r}: a vision model ({type(module).__name__}) runs locally only.")
        return VisionModel(module, tokenizer)
    if isinstance(module, PreTrainedModel):
        if tokenizer is None:
            raise ValueError("A built transformers model needs its tokenizer: load_model(hf_model, tokenizer=tok).")
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
    if sites is not None:
        return _sited_module(module, tokenizer, sites)
    return Model(nnsight.NNsight(module), tokenizer, name=type(module).__name__)


def _sited_module(module: torch.nn.Module, tokenizer: Any, sites: dict[str, str]) -> Model:
    """A plain module with the sites that ``sites`` maps (:mod:`interplab.core.model.custom`)."""
    family = custom_family(module, sites)
    vocab = vocab_size(module, family)
    tokenizer = sited_tokenizer(tokenizer, vocab)
    config = custom_config(module.eval(), family, vocab or len(tokenizer), getattr(module, "max_positions", None))
    nn = SitedNNsight(module)
    nn.config = config
    return Model(nn, tokenizer, name=type(module).__name__, family=family)
