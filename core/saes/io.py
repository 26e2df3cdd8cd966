"""Reading SAE files: SAELens folders, Gemma Scope ``params.npz``, dictionary_learning ``ae.pt`` (``writer.py`` writes).

Nothing here unpickles a user file: weights load from safetensors, from npz with
``allow_pickle=False``, or from ``ae.pt`` with ``torch.load(weights_only=True)``. Every file follows
the validation contract (:mod:`interplab.core.storage.readers`): configs are checked field by field, tensor
names, dtypes and shapes are read from headers (or a memory map) and checked against the config and
the memory budget before anything is allocated; errors name the file and the field.

Example
-------
>>> sae = load_path("my_sae/")              # any supported format, detected
>>> sae = load_saelens("my_sae/")           # a SAELens folder (cfg.json + sae_weights.safetensors)
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file

from ..memory.budget import check_memory
from ..storage.atomic import reading
from ..storage.readers import (
    FLOATS,
    Fields,
    FileError,
    expect_arrays,
    in_folder,
    load_npz,
    npz_headers,
    read_json,
    safetensors_header,
)
from .base import REGISTRY, SAE, arch_class
from .config import SAEConfig
from .writer import CFG, SPARSITY, WEIGHTS

_FORMATS = (
    "a SAELens folder (cfg.json + sae_weights.safetensors), a Gemma Scope params.npz, "
    "or a dictionary_learning folder (ae.pt + config.json)"
)


#: SAELens transcoder architectures -> (interplab architecture, whether it has the affine skip).
TRANSCODER_ARCHS = {
    "transcoder": ("standard", False),
    "skip_transcoder": ("standard", True),
    "jumprelu_transcoder": ("jumprelu", False),
    "jumprelu_skip_transcoder": ("jumprelu", True),
}


def _transcoder_archs() -> dict[str, tuple[str, bool]]:
    own = {f"{a}_transcoder": (a, False) for a, cls in REGISTRY.items() if not cls.saelens_transcoder_arch}
    own |= {f"{a}_skip_transcoder": (a, True) for a, cls in REGISTRY.items() if not cls.saelens_transcoder_arch}
    return {**TRANSCODER_ARCHS, **own}


def _saelens_config(file: Path) -> dict[str, Any]:
    """Read and check a SAELens cfg.json, v6 or older (flat, with hook_point / activation_fn_str).

    Every field is checked for its type (an int is an int: ``8.9`` and ``"8"`` are refused) and the
    error names the file and the field.
    """
    raw = Fields(file, read_json(file, max_bytes=16 * 1024**2))
    meta = raw.obj("metadata", {})
    arch = raw.str("architecture", None)
    if arch is None:  # configs older than SAELens 6
        fn = raw.str("activation_fn_str", "relu")
        arch = "topk" if fn == "topk" else "standard"
    transcoders = _transcoder_archs()
    supported = sorted({cls.saelens_arch for cls in REGISTRY.values()} | set(transcoders))
    if arch not in supported:
        raise FileError(file, "architecture", f"is {arch!r}, which is not supported (supported: {supported})")
    kwargs = raw.obj("activation_fn_kwargs", {})
    ours = meta.obj("interplab", {})
    k = raw.int("k", None, minimum=1)
    k = k if k is not None else kwargs.int("k", None, minimum=1)
    k = k if k is not None else ours.int("k", None, minimum=1)
    norm = raw.str("normalize_activations", "none")
    if norm != "none":
        raise FileError(
            file, "normalize_activations", f"is {norm!r}; interplab loads SAEs that read raw activations ('none'). "
            "Fold the normalisation into the weights first")  # fmt: skip
    site = meta.str("hook_name", None) or raw.str("hook_name", None) or raw.str("hook_point", "")
    model_name = meta.str("model_name", None) or raw.str("model_name", "")
    interplab_arch = meta.str("interplab_arch", None, choices=sorted(REGISTRY))
    transcoder = transcoders.get(arch)
    if transcoder is not None:
        arch = transcoder[0]
        if raw.bool("apply_b_dec_to_input", False):
            raise FileError(file, "apply_b_dec_to_input",
                            "is true, which a transcoder cannot have (b_dec is at its output)")  # fmt: skip
    widths = ours.raw("matryoshka_widths", None)
    if widths is not None and (not isinstance(widths, list) or not all(
            isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in widths)):  # fmt: skip
        raise FileError(file, "metadata.interplab.matryoshka_widths", f"must be a list of positive integers, got "
                                                                      f"{widths!r:.80}")  # fmt: skip
    return {
        "transcoder": transcoder is not None,
        "skip": bool(transcoder and transcoder[1]),
        "d_out": raw.int("d_out", minimum=1) if transcoder else None,
        "site_out": (meta.str("hook_name_out", None) or raw.str("hook_name_out", "") or "") if transcoder else "",
        "arch": interplab_arch or arch,
        "k": k,
        "site": site,
        "model_name": model_name,
        "meta": {key: v for key, v in meta.data.items() if key != "interplab"},
        "rescale_by_decoder_norm": raw.bool("rescale_acts_by_decoder_norm", False),
        "apply_b_dec_to_input": raw.bool("apply_b_dec_to_input", transcoder is None),
        "d_in": raw.int("d_in", minimum=1),
        "d_sae": raw.int("d_sae", minimum=1),
        "settings": {"matryoshka_widths": widths} if widths is not None and interplab_arch == "matryoshka" else {},
    }


def load_saelens(path: str | Path) -> SAE:
    """Load a SAELens folder (``cfg.json`` + ``sae_weights.safetensors``), checking everything before allocating."""
    with reading(path) as folder:  # the old version or the new one while a save races this load
        return _read_saelens(folder)


def _read_saelens(folder: Path) -> SAE:
    cfg = _saelens_config(in_folder(folder, CFG))
    weights = in_folder(folder, WEIGHTS)
    header = safetensors_header(weights)
    arch = cfg["arch"]
    if getattr(arch_class(arch), "batch_topk", False) and "threshold" not in header.tensors:
        arch = "topk"
    cls = arch_class(arch)
    shapes = cls.file_shapes(_shape_config(arch, cfg))
    expect_arrays(weights, header.tensors, {name: (shape, FLOATS) for name, shape in shapes.items()})
    n_values = sum(math.prod(s) for s in shapes.values())
    check_memory(f"Loading the SAE at {str(folder)!r}", 2 * header.nbytes + 4 * n_values)
    tensors = load_file(str(weights))
    if getattr(arch_class(arch), "batch_topk", False) and not bool(
            (tensors["threshold"] == tensors["threshold"][0]).all()):  # fmt: skip
        arch = "jumprelu"  # a per-latent threshold: a JumpReLU SAE, not a BatchTopK one
    settings = cfg["settings"] if arch == cfg["arch"] else {}
    sae = build_sae(arch, cfg["d_in"], cfg["d_sae"], cfg["site"], cfg["model_name"], cfg["apply_b_dec_to_input"],
                    cfg["k"], cfg["meta"], str(folder / CFG), {**settings, **_transcoder_fields(cfg)})  # fmt: skip
    assign_tensors(sae, tensors, str(weights))
    if cfg["rescale_by_decoder_norm"]:
        # SAELens scales latents by decoder norms; fold that into the weights (same outputs).
        with torch.no_grad():
            norms = sae.W_dec.norm(dim=1)
            sae.W_enc.mul_(norms)
            sae.b_enc.mul_(norms)
            sae.W_dec.div_(norms[:, None])
    sae.firing_rates = read_firing_rates(folder / SPARSITY, cfg["d_sae"])
    return sae


def read_firing_rates(file: Path, d_sae: int) -> torch.Tensor | None:
    """The fraction of tokens each latent fires on, from a SAELens ``sparsity.safetensors`` (log10 of the rates
    there, one value per latent); None when the folder has none. Its header is checked before anything is read."""
    if not file.is_file():
        return None
    header = safetensors_header(file)
    expect_arrays(file, header.tensors, {"sparsity": ((d_sae,), FLOATS)})
    log_rates = load_file(str(file))["sparsity"].float()
    if not bool((log_rates <= 0).all()):  # NaN and log10 rates above 1 alike
        raise FileError(file, "sparsity", "holds values above 0 or NaN: it is not log10 firing rates")
    return (10.0**log_rates).where(log_rates > -10, torch.zeros(()))  # SAELens writes log10(rate + 1e-10)


def _transcoder_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config fields of a transcoder read from a cfg.json ({} for an SAE)."""
    if not cfg.get("transcoder"):
        return {}
    return {"site_out": cfg["site_out"], "d_out": cfg["d_out"], "skip": cfg["skip"]}


def _shape_config(arch: str, cfg: dict[str, Any]) -> SAEConfig:
    """A config with just the sizes of a file's SAE, to compute the shapes its tensors must have."""
    return SAEConfig(arch=arch, d_in=cfg["d_in"], d_sae=cfg["d_sae"], apply_b_dec_to_input=False,
                     **_transcoder_fields(cfg))  # fmt: skip


def build_sae(
    arch: str,
    d_in: int,
    d_sae: int,
    site: str,
    model_name: str,
    apply_b_dec: bool,
    k: Any,
    meta: dict[str, Any],
    source: str = "",
    settings: dict[str, Any] | None = None,
) -> SAE:
    cls = arch_class(arch)
    cfg = SAEConfig(
        arch=arch,
        d_in=d_in,
        d_sae=d_sae,
        site=site,
        model_name=model_name,
        apply_b_dec_to_input=apply_b_dec,
        k=k if k else None,
        metadata=meta,
        **(settings or {}),
    )
    try:
        return cls(cfg)
    except (TypeError, ValueError) as err:
        if not source or isinstance(err, FileError):
            raise
        raise FileError(source, "config", f"does not describe a valid {arch} SAE: {err}") from None


def assign_tensors(sae: SAE, tensors: dict[str, torch.Tensor], source: str) -> None:
    """Copy tensors into the SAE, checking every name and shape against its architecture first."""
    t = {k.replace("w_", "W_") if k.startswith("w_") else k: v for k, v in tensors.items()}
    expected = type(sae).file_shapes(sae.cfg)
    for name, shape in expected.items():
        if name not in t:
            raise FileError(source, name, f"is missing (the file holds {sorted(t)}; a {sae.arch} SAE needs "
                                          f"{sorted(expected)})")  # fmt: skip
        if tuple(t[name].shape) != shape:
            raise FileError(source, name, f"has shape {list(t[name].shape)}, the config says {list(shape)}")
        if not t[name].dtype.is_floating_point:
            raise FileError(source, name, f"has dtype {t[name].dtype}, expected floating point")
        if not bool(torch.isfinite(t[name]).all()):
            raise FileError(source, name, "holds NaN or inf values")
    t = {k: v.float() for k, v in t.items() if k in expected}
    if "b_gate" in t:
        t["b_enc"] = t.pop("b_gate")
    with torch.no_grad():
        for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
            getattr(sae, name).copy_(t[name])
        if "W_skip" in expected:
            sae.W_skip.copy_(t["W_skip"].T)  # files hold it [d_out, d_in]
    sae.load_extra(t)
    sae.eval()


_GEMMA_SCOPE_SITES = {"res": "hook_resid_post", "mlp": "hook_mlp_out", "att": "attn.hook_z"}


def load_gemma_scope(path: str | Path, site: str | None = None) -> SAE:
    """Load a Gemma Scope ``params.npz`` (JumpReLU; ``b_dec`` not subtracted from the input).

    The site is read from the path (``.../gemma-scope-2b-pt-res/layer_12/...``) unless given.
    Array headers are checked (plain numeric arrays, shapes that agree) before any is read.
    """
    file = Path(path)
    infos = {k.replace("w_", "W_") if k.startswith("w_") else k: v for k, v in npz_headers(file).items()}
    if "W_enc" not in infos or len(infos["W_enc"].shape) != 2:
        raise FileError(file, "W_enc", f"is missing or not 2-D (the file holds {sorted(infos)}). Expected {_FORMATS}")
    d_in, d_sae = infos["W_enc"].shape
    if d_in < 1 or d_sae < 1:
        raise FileError(file, "W_enc", f"has an empty shape {[d_in, d_sae]}")
    cls = arch_class("jumprelu")
    expect_arrays(file, infos, {name: (shape, FLOATS) for name, shape in cls.tensor_shapes(d_in, d_sae).items()})
    if site is None:
        layer = re.search(r"layer_(\d+)", str(file))
        kind = re.search(r"-(res|mlp|att)(?:[-/]|$)", str(file))
        site = f"blocks.{layer.group(1)}.{_GEMMA_SCOPE_SITES[kind.group(1)]}" if layer and kind else ""
    sae = build_sae("jumprelu", d_in, d_sae, site, "", False, None, {"source": "gemma-scope"}, str(file))
    arrays = {k: torch.from_numpy(np.asarray(v, dtype=np.float32)) for k, v in load_npz(file).items()}
    assign_tensors(sae, arrays, str(file))
    return sae


_DL_ARCH = {
    "AutoEncoder": "standard",
    "AutoEncoderTopK": "topk",
    "BatchTopKSAE": "batchtopk",
    "JumpReluAutoEncoder": "jumprelu",
    "GatedAutoEncoder": "gated",
}


def load_dictionary_learning(path: str | Path) -> SAE:
    """Load a dictionary_learning folder: ``ae.pt`` (``weights_only=True``, memory-mapped) and ``config.json``."""
    folder = Path(path)
    config_file, weights = in_folder(folder, "config.json"), in_folder(folder, "ae.pt")
    config = Fields(config_file, read_json(config_file, max_bytes=16 * 1024**2))
    trainer = config.obj("trainer") if config.has("trainer") else config
    dict_class = trainer.str("dict_class", "AutoEncoder")
    if dict_class not in _DL_ARCH:
        raise FileError(config_file, trainer.name("dict_class"),
                        f"is {dict_class!r}, which is not supported (supported: {sorted(_DL_ARCH)})")  # fmt: skip
    try:  # memory-mapped: nothing is allocated before the shapes are checked
        state = torch.load(weights, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:
        raise FileError(weights, "content", f"is not a plain state dict of tensors: {err}") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise FileError(weights, "content", "is not a dict of tensors")
    arch = _DL_ARCH[dict_class]
    t: dict[str, torch.Tensor] = {}
    if "encoder.weight" in state:
        for key in ("encoder.weight", "encoder.bias", "decoder.weight"):
            if key not in state:
                raise FileError(weights, key, f"is missing (the file holds {sorted(state)})")
        t["W_enc"] = state["encoder.weight"].T
        t["b_enc"] = state["encoder.bias"]
        t["W_dec"] = state["decoder.weight"].T
        if t["W_enc"].ndim != 2:
            raise FileError(weights, "encoder.weight", f"must be 2-D, got shape {list(state['encoder.weight'].shape)}")
        bias: torch.Tensor = state.get("bias", torch.zeros(t["W_enc"].shape[0]))
        t["b_dec"] = state.get("b_dec", bias)
    else:
        t.update({k: state[k] for k in ("W_enc", "b_enc", "W_dec", "b_dec") if k in state})
    if "W_enc" not in t or t["W_enc"].ndim != 2:
        raise FileError(weights, "W_enc", f"is missing or not 2-D (the file holds {sorted(state)})")
    d_in, d_sae = t["W_enc"].shape
    if "threshold" in state:
        thr = state["threshold"]
        if thr.ndim > 1 or (thr.ndim == 1 and thr.shape[0] != d_sae):
            raise FileError(weights, "threshold", f"has shape {list(thr.shape)}, expected [] or [{d_sae}]")
        t["threshold"] = thr.expand(d_sae) if thr.ndim == 0 else thr
    if arch == "batchtopk" and "threshold" not in t:
        arch = "topk"
    k = trainer.int("k", None, minimum=1)
    if k is None and "k" in state:
        if state["k"].numel() != 1 or state["k"].dtype.is_floating_point:
            raise FileError(weights, "k", f"must be one integer, got {state['k']!r:.60}")
        k = int(state["k"])
    site = ""
    layer = trainer.int("layer", None, minimum=0)
    if layer is not None:
        site = f"blocks.{layer}.hook_resid_post"
    sae = build_sae(arch, d_in, d_sae, site, trainer.str("lm_name", ""), True, k, {"source": "dictionary_learning"},
                 str(config_file))  # fmt: skip
    assign_tensors(sae, t, str(weights))
    return sae


def _load_detected(p: Path, site: str | None) -> SAE:
    """The SAE at ``p`` in whichever supported format it is (the caller holds the folder still)."""
    if not p.exists():
        raise FileNotFoundError(f"No SAE at {str(p)!r}. Expected {_FORMATS}.")
    if p.is_file() and p.suffix == ".npz":
        return load_gemma_scope(p, site)
    if p.is_dir() and (p / CFG).exists() and (p / WEIGHTS).exists():
        return _read_saelens(p)
    if p.is_dir() and (p / "params.npz").exists():
        return load_gemma_scope(in_folder(p, "params.npz"), site)
    if p.is_dir() and (p / "ae.pt").exists() and (p / "config.json").exists():
        return load_dictionary_learning(p)
    raise ValueError(f"{str(p)!r} is not an SAE. Expected {_FORMATS}.")


def load_path(path: str | Path, site: str | None = None) -> SAE:
    """Load an SAE from any supported file or folder, detecting the format (``site`` replaces the file's)."""
    with reading(path) as p:  # a folder being saved is read whole, old or new, never half-swapped
        sae = _load_detected(p, site)
    if site is not None:
        sae.cfg.site = site
    sae.source_path = p  # labels and dashboards are kept beside it when the folder is writable
    return sae
