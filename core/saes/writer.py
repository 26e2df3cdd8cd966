"""Writing an SAE as a SAELens v6 folder (``cfg.json`` + ``sae_weights.safetensors``), atomically.

The writer reads the SAE through :class:`SavedSAE`, the part of :class:`~interplab.core.saes.base.SAE` a file
holds, so ``SAE.save`` calls it while this module stays below the class. The readers are in ``io.py``.

Example
-------
>>> save_saelens(sae, "my_sae/")            # what sae.save("my_sae/") does
>>> saelens_arch_of(sae)                    # 'batchtopk', or e.g. 'jumprelu_skip_transcoder'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import torch

from ..storage.atomic import atomic_folder, write_safetensors

CFG, WEIGHTS, SPARSITY = "cfg.json", "sae_weights.safetensors", "sparsity.safetensors"
SAELENS_FORMAT_VERSION = "6.0.0"  # the config layout written here: SAELens reads it as a v6 config


class SavedSettings(Protocol):
    """The settings of an SAE's config that its cfg.json records (an :class:`~interplab.core.saes.config.SAEConfig`)."""

    @property
    def apply_b_dec_to_input(self) -> bool: ...
    @property
    def model_name(self) -> str: ...
    @property
    def k(self) -> int | None: ...
    @property
    def skip(self) -> bool: ...
    @property
    def metadata(self) -> dict[str, Any]: ...
    def to_dict(self) -> dict[str, Any]: ...


class SavedSAE(Protocol):
    """What the writer reads of an SAE: its names, sizes, sites, config and tensors (every interplab SAE)."""

    @property
    def arch(self) -> str: ...
    @property
    def saelens_arch(self) -> str: ...
    @property
    def saelens_transcoder_arch(self) -> str: ...
    @property
    def cfg(self) -> SavedSettings: ...
    @property
    def d_in(self) -> int: ...
    @property
    def d_sae(self) -> int: ...
    @property
    def d_out(self) -> int: ...
    @property
    def site(self) -> str: ...
    @property
    def site_out(self) -> str: ...
    @property
    def is_transcoder(self) -> bool: ...
    @property
    def W_enc(self) -> torch.Tensor: ...
    @property
    def b_enc(self) -> torch.Tensor: ...
    @property
    def W_dec(self) -> torch.Tensor: ...
    @property
    def b_dec(self) -> torch.Tensor: ...
    @property
    def W_skip(self) -> torch.Tensor: ...
    def extra_state(self) -> dict[str, torch.Tensor]: ...


def saelens_arch_of(sae: SavedSAE) -> str:
    """The architecture name a SAELens cfg.json gives ``sae``: its SAE class, or its transcoder class.

    Where SAELens 6.54 has no transcoder of that activation (TopK, gated) the name is interplab's own,
    ``topk_transcoder`` / ``gated_transcoder`` (with ``_skip_``), read back by :func:`~.io.load_saelens`.
    """
    if not sae.is_transcoder:
        return sae.saelens_arch
    base = sae.saelens_transcoder_arch or f"{sae.arch}_transcoder"
    return base.replace("transcoder", "skip_transcoder") if sae.cfg.skip else base


def saelens_config(sae: SavedSAE, dtype: torch.dtype) -> dict[str, Any]:
    """The cfg.json of ``sae`` saved in ``dtype`` (SAELens v6 fields, interplab's settings in its metadata)."""
    cfg: dict[str, Any] = {
        "architecture": saelens_arch_of(sae),
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
    if sae.is_transcoder:
        cfg["d_out"] = sae.d_out
        cfg["metadata"]["hook_name_out"] = sae.site_out
        cfg["metadata"]["hook_head_index_out"] = None
    return cfg


def saelens_tensors(sae: SavedSAE, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The tensors of ``sae`` by their SAELens names, on the CPU in ``dtype`` (``W_skip`` as SAELens keeps it)."""
    tensors = {"W_enc": sae.W_enc, "W_dec": sae.W_dec, "b_dec": sae.b_dec}
    if sae.is_transcoder and sae.cfg.skip:
        tensors["W_skip"] = sae.W_skip.T  # SAELens keeps it [d_out, d_in]
    extra = sae.extra_state()
    if "b_gate" not in extra:
        tensors["b_enc"] = sae.b_enc
    tensors.update(extra)
    return {k: v.detach().to("cpu", dtype).contiguous() for k, v in tensors.items()}


def save_saelens(
    sae: SavedSAE, path: str | Path, dtype: torch.dtype = torch.float32, sparsity: torch.Tensor | None = None
) -> Path:
    """Write ``sae`` as a SAELens v6 folder, atomically (a temporary folder renamed into place).

    >>> save_saelens(sae, "my_sae/", sparsity=firing_rates_M.log10())     # + sparsity.safetensors (log10 rates)
    """
    target = Path(path)
    cfg = saelens_config(sae, dtype)
    tensors = saelens_tensors(sae, dtype)
    with atomic_folder(target) as work:
        write_safetensors(work / WEIGHTS, tensors)
        if sparsity is not None:
            write_safetensors(work / SPARSITY, {"sparsity": sparsity.detach().to("cpu", torch.float32)})
        (work / CFG).write_text(json.dumps(cfg, indent=1))
    return target
