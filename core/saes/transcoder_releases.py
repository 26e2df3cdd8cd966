"""Gemma Scope 2 transcoder releases: their table entries and the builder for ``transcoder`` folders.

A transcoder folder (``transcoder_all/layer_6_width_16k_l0_small_affine/params.safetensors``) holds a
JumpReLU transcoder from the MLP input (``blocks.L.hook_mlp_in``: the pre-feedforward norm's output)
to the MLP output (``blocks.L.hook_mlp_out``: the post-feedforward norm's output); ``_affine`` ids add
``affine_skip_connection`` [d_in, d_out]. sae-lens 6.54.12 lists no cross-layer transcoder release for
Gemma 3 270M, so none is in the table; a CLT folder loads by repo and id with ``ilab.circuits.load_clt``.

Example
-------
>>> tc = load_sae("gemma-scope-2-270m-pt-transcoders-all", "layer_6_width_16k_l0_small_affine")
>>> tc.site, tc.site_out, tc.cfg.skip
('blocks.6.hook_mlp_in', 'blocks.6.hook_mlp_out', True)
"""

from __future__ import annotations

from pathlib import Path

from ..storage.readers import FLOATS, FileError, expect_arrays, safetensors_header
from .base import SAE
from .io import assign_tensors, build_sae
from .releases import PARAMS, Release, add_release, grid, layer_of, member, read_config, read_params, register_kind


def _widths_l0s(widths: tuple[str, ...], l0s: tuple[str, ...]) -> list[str]:
    return sorted(f"width_{w}_l0_{s}" for w in widths for s in l0s)


_FEW = {  # the ids of the short transcoder releases, as sae-lens 6.54.12 lists them
    "pt": ("transcoder/layer_15_width_262k_l0_big_affine", "transcoder/layer_9_width_16k_l0_small_affine"),
    "it": tuple(f"transcoder/layer_{layer}_{v}" for layer in (12, 15, 5, 9)
                for v in _widths_l0s(("16k", "262k", "65k"), ("big", "medium", "small"))
                for v in (v, v + "_affine")),
}  # fmt: skip

for _tune in ("pt", "it"):
    _repo, _model = f"google/gemma-scope-2-270m-{_tune}", "google/gemma-3-270m" + ("-it" if _tune == "it" else "")
    _all = _widths_l0s(("16k", "262k"), ("big", "small"))
    add_release(Release(f"gemma-scope-2-270m-{_tune}-transcoders-all", _repo, _model, "transcoder", "transcoder_all/",
                        grid(range(18), tuple(v + a for v in _all for a in ("", "_affine")))))  # fmt: skip
    add_release(Release(f"gemma-scope-2-270m-{_tune}-transcoders", _repo, _model, "transcoder", "", _FEW[_tune]))


def build_transcoder(release: Release, sae_id: str, folder: Path) -> SAE:
    """A JumpReLU transcoder (MLP input -> MLP output, with the affine skip where the folder has one)."""
    read_config(folder)
    file = member(folder, PARAMS)
    header = safetensors_header(file)
    dec = header.tensors.get("w_dec")
    if dec is None or len(dec.shape) != 2:
        raise FileError(file, "w_dec", f"is missing or not 2-D (the file holds {sorted(header.tensors)})")
    affine = "affine_skip_connection" in header.tensors
    if affine:
        d_in = header.tensors["w_enc"].shape[0] if "w_enc" in header.tensors else 0
        expect_arrays(file, header.tensors, {"affine_skip_connection": ((d_in, dec.shape[1]), FLOATS)})
    tensors, d_in, d_sae = read_params(folder, d_out_same=False)
    layer = layer_of(sae_id)
    if affine:
        # the release's [d_in, d_out] into the orientation of SAELens files, [d_out, d_in]
        tensors["W_skip"] = tensors.pop("affine_skip_connection").T.contiguous()
    meta = {"release": release.name, "sae_id": sae_id, "repo_id": release.repo_id}
    settings = {"site_out": f"blocks.{layer}.hook_mlp_out", "d_out": int(dec.shape[1]), "skip": affine}
    tc = build_sae("jumprelu", d_in, d_sae, f"blocks.{layer}.hook_mlp_in", release.model, False, None, meta,
                   str(file), settings)  # fmt: skip
    assign_tensors(tc, tensors, str(file))
    return tc


register_kind("transcoder", build_transcoder)
