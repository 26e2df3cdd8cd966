"""SAE files: SAELens folders (read and write), Gemma Scope ``params.npz``, dictionary_learning ``ae.pt``.

Nothing here unpickles a user file: weights load from safetensors, from npz with
``allow_pickle=False``, or from ``ae.pt`` with ``torch.load(weights_only=True)``.

Example
-------
>>> save_saelens(sae, "my_sae/")            # cfg.json + sae_weights.safetensors
>>> sae = load_sae("my_sae/")               # any supported format, detected
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..atomic import atomic_folder
from .base import REGISTRY, SAE, SAEConfig, arch_class, provide

CFG, WEIGHTS, SPARSITY = "cfg.json", "sae_weights.safetensors", "sparsity.safetensors"
SAELENS_FORMAT_VERSION = "6.0.0"  # the config layout written here: SAELens reads it as a v6 config
_FORMATS = (
    "a SAELens folder (cfg.json + sae_weights.safetensors), a Gemma Scope params.npz, "
    "or a dictionary_learning folder (ae.pt + config.json)"
)


def save_saelens(
    sae: SAE, path: str | Path, dtype: torch.dtype = torch.float32, sparsity: torch.Tensor | None = None
) -> Path:
    """Write ``sae`` as a SAELens v6 folder, atomically (a temporary folder renamed into place)."""
    target = Path(path)
    cfg = {
        "architecture": sae.saelens_arch,
        "d_in": sae.d_in,
        "d_sae": sae.d_sae,
        "dtype": str(dtype).replace("torch.", ""),
        "device": "cpu",
        "apply_b_dec_to_input": sae.cfg.apply_b_dec_to_input,
        "normalize_activations": "none",
        "reshape_activations": "none",
        "metadata": {
            **sae.cfg.metadata,
            "model_name": sae.cfg.model_name,
            "hook_name": sae.site,
            "hook_head_index": None,
            "prepend_bos": True,
            "sae_lens_version": SAELENS_FORMAT_VERSION,
            "interplab_arch": sae.arch,
            "interplab": {k: v for k, v in sae.cfg.to_dict().items() if k not in ("metadata",)},
        },
    }
    if sae.saelens_arch == "topk":
        cfg["k"] = sae.cfg.k
        cfg["rescale_acts_by_decoder_norm"] = False
    tensors = {"W_enc": sae.W_enc, "W_dec": sae.W_dec, "b_dec": sae.b_dec}
    extra = sae.extra_state()
    if "b_gate" not in extra:
        tensors["b_enc"] = sae.b_enc
    tensors.update(extra)
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in tensors.items()}
    with atomic_folder(target) as work:
        save_file(tensors, str(work / WEIGHTS))
        if sparsity is not None:
            save_file({"sparsity": sparsity.detach().to("cpu", torch.float32).contiguous()}, str(work / SPARSITY))
        (work / CFG).write_text(json.dumps(cfg, indent=1))
    return target


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        with open(path, "rb") as f:
            head = f.read(4)
        pickled = head[:1] == b"\x80" or head == b"PK\x03\x04"  # pickle protocol 2+, or torch.save's zip
        what = " It looks like a pickle (e.g. torch.save output), which interplab never loads." if pickled else ""
        raise ValueError(f"{str(path)!r} is not a valid safetensors file.{what} ({err})") from None


def _saelens_config(raw: dict[str, Any]) -> dict[str, Any]:
    """Normalise a SAELens cfg.json, v6 or older (flat, with hook_point / activation_fn_str)."""
    meta = dict(raw.get("metadata") or {})
    arch = raw.get("architecture")
    if arch is None:  # configs older than SAELens 6
        fn = raw.get("activation_fn_str", "relu")
        arch = "topk" if fn == "topk" else "standard"
    k = raw.get("k") or (raw.get("activation_fn_kwargs") or {}).get("k") or (meta.get("interplab") or {}).get("k")
    site = meta.get("hook_name") or raw.get("hook_name") or raw.get("hook_point") or ""
    model_name = meta.get("model_name") or raw.get("model_name") or ""
    norm = raw.get("normalize_activations", "none") or "none"
    if norm not in ("none", None):
        raise ValueError(
            f"This SAE expects normalize_activations={norm!r}; interplab loads SAEs that read raw activations "
            "('none'). Fold the normalisation into the weights first."
        )
    supported = sorted({cls.saelens_arch for cls in REGISTRY.values()})
    if arch not in supported:
        raise ValueError(f"SAELens architecture {arch!r} is not supported; supported: {', '.join(supported)}.")
    return {
        "arch": arch,
        "k": k,
        "site": site,
        "model_name": model_name,
        "meta": meta,
        "rescale_by_decoder_norm": bool(raw.get("rescale_acts_by_decoder_norm", False)),
        "apply_b_dec_to_input": bool(raw.get("apply_b_dec_to_input", True)),
        "d_in": int(raw["d_in"]),
        "d_sae": int(raw["d_sae"]),
    }


def load_saelens(path: str | Path) -> SAE:
    """Load a SAELens folder (``cfg.json`` + ``sae_weights.safetensors``)."""
    folder = Path(path)
    try:
        raw = json.loads((folder / CFG).read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{str(folder / CFG)!r} is not valid JSON: {err}") from None
    cfg = _saelens_config(raw)
    tensors = _load_safetensors(folder / WEIGHTS)
    arch = cfg["meta"].get("interplab_arch") or cfg["arch"]
    if (
        arch == "batchtopk"
        and "threshold" in tensors
        and not bool((tensors["threshold"] == tensors["threshold"][0]).all())
    ):
        arch = "jumprelu"
    sae = _build(
        arch,
        cfg["d_in"],
        cfg["d_sae"],
        cfg["site"],
        cfg["model_name"],
        cfg["apply_b_dec_to_input"],
        cfg["k"],
        {k: v for k, v in cfg["meta"].items() if k not in ("interplab",)},
    )
    _assign(sae, tensors, str(folder / WEIGHTS))
    if cfg["rescale_by_decoder_norm"]:
        # SAELens scales latents by decoder norms; fold that into the weights (same outputs).
        with torch.no_grad():
            norms = sae.W_dec.norm(dim=1)
            sae.W_enc *= norms
            sae.b_enc *= norms
            sae.W_dec /= norms[:, None]
    return sae


def _build(
    arch: str, d_in: int, d_sae: int, site: str, model_name: str, apply_b_dec: bool, k: Any, meta: dict[str, Any]
) -> SAE:
    cls = arch_class(arch)
    cfg = SAEConfig(
        arch=arch,
        d_in=d_in,
        d_sae=d_sae,
        site=site,
        model_name=model_name,
        apply_b_dec_to_input=apply_b_dec,
        k=int(k) if k else None,
        metadata=meta,
    )
    return cls(cfg)


def _assign(sae: SAE, tensors: dict[str, torch.Tensor], source: str) -> None:
    """Copy tensors into the SAE, checking every shape against its config."""
    t = {k.replace("w_", "W_") if k.startswith("w_") else k: v.float() for k, v in tensors.items()}
    if "b_gate" in t:
        t["b_enc"] = t.pop("b_gate")
    expected = {
        "W_enc": (sae.d_in, sae.d_sae),
        "W_dec": (sae.d_sae, sae.d_in),
        "b_enc": (sae.d_sae,),
        "b_dec": (sae.d_in,),
    }
    for name, shape in expected.items():
        if name not in t:
            raise ValueError(f"{source!r} has no {name!r}; it holds {sorted(t)}.")
        if tuple(t[name].shape) != shape:
            raise ValueError(f"{source!r}: {name} has shape {tuple(t[name].shape)}, the config says {shape}.")
    with torch.no_grad():
        for name in expected:
            getattr(sae, name).copy_(t[name])
    sae.load_extra(t)
    sae.eval()


_GEMMA_SCOPE_SITES = {"res": "hook_resid_post", "mlp": "hook_mlp_out", "att": "attn.hook_z"}


def load_gemma_scope(path: str | Path, site: str | None = None) -> SAE:
    """Load a Gemma Scope ``params.npz`` (JumpReLU; ``b_dec`` not subtracted from the input).

    The site is read from the path (``.../gemma-scope-2b-pt-res/layer_12/...``) unless given.
    """
    file = Path(path)
    try:
        with np.load(file, allow_pickle=False) as npz:
            arrays = {k: torch.from_numpy(np.asarray(npz[k], dtype=np.float32)) for k in npz.files}
    except ValueError as err:
        raise ValueError(f"{str(file)!r} is not a plain npz of arrays (pickled objects are refused): {err}") from None
    if site is None:
        layer = re.search(r"layer_(\d+)", str(file))
        kind = re.search(r"-(res|mlp|att)(?:[-/]|$)", str(file))
        site = f"blocks.{layer.group(1)}.{_GEMMA_SCOPE_SITES[kind.group(1)]}" if layer and kind else ""
    W_enc = arrays.get("W_enc", arrays.get("w_enc"))
    if W_enc is None:
        raise ValueError(f"{str(file)!r} has no W_enc; it holds {sorted(arrays)}. Expected {_FORMATS}.")
    sae = _build("jumprelu", W_enc.shape[0], W_enc.shape[1], site, "", False, None, {"source": "gemma-scope"})
    _assign(sae, arrays, str(file))
    return sae


_DL_ARCH = {
    "AutoEncoder": "standard",
    "AutoEncoderTopK": "topk",
    "BatchTopKSAE": "batchtopk",
    "JumpReluAutoEncoder": "jumprelu",
    "GatedAutoEncoder": "gated",
}


def load_dictionary_learning(path: str | Path) -> SAE:
    """Load a dictionary_learning folder: ``ae.pt`` (read with ``weights_only=True``) and ``config.json``."""
    folder = Path(path)
    config = json.loads((folder / "config.json").read_text())
    trainer = config.get("trainer", config)
    dict_class = trainer.get("dict_class", "AutoEncoder")
    if dict_class not in _DL_ARCH:
        raise ValueError(f"dictionary_learning class {dict_class!r} is not supported; supported: {sorted(_DL_ARCH)}.")
    try:
        state = torch.load(folder / "ae.pt", map_location="cpu", weights_only=True)
    except Exception as err:
        raise ValueError(f"{str(folder / 'ae.pt')!r} is not a plain state dict of tensors: {err}") from None
    arch = _DL_ARCH[dict_class]
    t: dict[str, torch.Tensor] = {}
    if "encoder.weight" in state:
        t["W_enc"] = state["encoder.weight"].T
        t["b_enc"] = state["encoder.bias"]
        t["W_dec"] = state["decoder.weight"].T
        t["b_dec"] = state.get("b_dec", state.get("bias", torch.zeros(t["W_enc"].shape[0])))
    else:
        t.update({k: state[k] for k in ("W_enc", "b_enc", "W_dec", "b_dec") if k in state})
    if "threshold" in state:
        thr = state["threshold"]
        t["threshold"] = thr.expand(t["W_enc"].shape[1]) if thr.ndim == 0 else thr
    if arch == "batchtopk" and "threshold" not in t:
        arch = "topk"
    d_in, d_sae = t["W_enc"].shape
    k = trainer.get("k") or (int(state["k"]) if "k" in state else None)
    site = ""
    if trainer.get("layer") is not None:
        site = f"blocks.{trainer['layer']}.hook_resid_post"
    sae = _build(arch, d_in, d_sae, site, trainer.get("lm_name", ""), True, k, {"source": "dictionary_learning"})
    _assign(sae, t, str(folder / "ae.pt"))
    return sae


def load_sae(path: str | Path, site: str | None = None) -> SAE:
    """Load an SAE from any supported file or folder, detecting the format."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"No SAE at {str(p)!r}. Expected {_FORMATS}.")
    if p.is_file() and p.suffix == ".npz":
        sae = load_gemma_scope(p, site)
    elif p.is_dir() and (p / CFG).exists() and (p / WEIGHTS).exists():
        sae = load_saelens(p)
    elif p.is_dir() and (p / "params.npz").exists():
        sae = load_gemma_scope(p / "params.npz", site)
    elif p.is_dir() and (p / "ae.pt").exists() and (p / "config.json").exists():
        sae = load_dictionary_learning(p)
    else:
        raise ValueError(f"{str(p)!r} is not an SAE. Expected {_FORMATS}.")
    if site is not None:
        sae.cfg.site = site
    sae.source_path = p  # labels and dashboards are kept beside it when the folder is writable
    return sae


provide("load", load_sae)
provide("save", save_saelens)
