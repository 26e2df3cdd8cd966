"""Pretrained SAE releases by name and id, as SAELens names them (``gemma-scope-2-270m-pt-res``).

A :class:`Release` is one table entry: the Hugging Face repo, the model it reads, the kind of
sites (``res``, ``mlp``, ``att``; transcoders and cross-layer transcoders are more kinds), the
folder in the repo and the ids it holds. ``load_sae(release, sae_id)`` finds the id (an unknown
release or id is an error listing close matches, before any download), fetches the folder from the
hub when online (``huggingface_hub``, into its usual cache) or finds it there offline, validates
the files (:mod:`interplab.core.storage.readers`) and builds the SAE with the builder registered for the
release's kind (:func:`register_kind`).

The Gemma Scope 2 layout (``google/gemma-scope-2-270m-pt``)::

    resid_post/layer_5_width_16k_l0_medium/params.safetensors   w_enc [d_in, d_sae], w_dec [d_sae, d_out],
    resid_post/layer_5_width_16k_l0_medium/config.json          b_enc, b_dec, threshold (+ affine_skip_connection)

Example
-------
>>> sae = load_release("gemma-scope-2-270m-pt-res", "layer_5_width_16k_l0_medium")
>>> release_ids("gemma-scope-2-270m-pt-res-all")[:2]
['layer_0_width_16k_l0_big', 'layer_0_width_16k_l0_small']
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..storage.readers import (
    FLOATS,
    Fields,
    FileError,
    expect_arrays,
    in_folder,
    read_json,
    read_safetensors,
    safetensors_header,
)
from .base import SAE
from .io import assign_tensors, build_sae

PARAMS, CONFIG = "params.safetensors", "config.json"


@dataclass(frozen=True)
class Release:
    """One SAELens release: where its files are and which ids it holds (``ids[i]`` lives in ``folder + ids[i]``)."""

    name: str
    repo_id: str
    model: str
    kind: str  # res | mlp | att here; transcoder | clt once their builders are registered
    folder: str  # the prefix of every id's folder in the repo, e.g. "resid_post/"
    ids: tuple[str, ...]
    id_prefix: str = ""  # a prefix the ids carry that their folders do not repeat

    def path_of(self, sae_id: str) -> str:
        """The folder of ``sae_id`` inside the repo."""
        return self.folder + sae_id[len(self.id_prefix) :]


def grid(layers: Iterable[int], variants: Iterable[str], prefix: str = "") -> tuple[str, ...]:
    """Every ``{prefix}layer_{L}_{variant}`` id, layer by layer (the order SAELens lists them in)."""
    variants = tuple(variants)
    return tuple(f"{prefix}layer_{layer}_{v}" for layer in layers for v in variants)


def _variants(widths: Iterable[str], l0s: Iterable[str], extra: Iterable[str] = ()) -> tuple[str, ...]:
    return tuple(sorted([f"width_{w}_l0_{s}" for w in widths for s in l0s] + list(extra)))


RELEASES: dict[str, Release] = {}


def add_release(release: Release) -> Release:
    """Add a table entry (another kind, another model's release); a second entry under one name is refused."""
    known = RELEASES.get(release.name)
    if known is not None and known != release:
        raise ValueError(f"A release named {release.name!r} is already in the table ({known.repo_id}).")
    RELEASES[release.name] = release
    return release


_KIND_FOLDERS = {"res": "resid_post", "mlp": "mlp_out", "att": "attn_out"}
for _tune in ("pt", "it"):
    _repo, _model = f"google/gemma-scope-2-270m-{_tune}", "google/gemma-3-270m" + ("-it" if _tune == "it" else "")
    for _kind, _folder in _KIND_FOLDERS.items():
        _few = _variants(("16k", "262k", "65k"), ("big", "medium", "small"))
        if _kind == "res":
            _few = _variants(("16k", "1m", "262k", "65k"), ("big", "medium", "small"), ["width_262k_l0_medium_seed_1"])
        add_release(Release(f"gemma-scope-2-270m-{_tune}-{_kind}", _repo, _model, _kind, _folder + "/",
                            grid((5, 9, 12, 15), _few)))  # fmt: skip
        add_release(Release(f"gemma-scope-2-270m-{_tune}-{_kind}-all", _repo, _model, _kind, _folder + "_all/",
                            grid(range(18), _variants(("16k", "262k"), ("big", "small")))))  # fmt: skip

#: What each kind of folder reads: the site (and for transcoders the site they write).
SITES = {"res": "hook_resid_post", "mlp": "hook_mlp_out", "att": "attn.hook_z"}
#: Builders by kind: ``(release, sae_id, folder) -> object``; ``res``, ``mlp`` and ``att`` build a JumpReLU SAE.
BUILDERS: dict[str, Callable[[Release, str, Path], Any]] = {}


def register_kind(kind: str, builder: Callable[[Release, str, Path], Any]) -> None:
    """Say how folders of ``kind`` become an object (a transcoder module registers ``"transcoder"`` here)."""
    BUILDERS[kind] = builder


def _close(value: str, choices: Iterable[str], n: int = 5) -> str:
    choices = list(choices)
    close = difflib.get_close_matches(value, choices, n=n, cutoff=0.5)
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def find_release(name: Any) -> Release:
    """The table entry called ``name``; an error listing close names otherwise."""
    if not isinstance(name, str) or name not in RELEASES:
        hint = _close(str(name), RELEASES)
        raise ValueError(f"Unknown SAE release {name!r}.{hint} Known releases: {sorted(RELEASES)}.")
    return RELEASES[name]


def release_ids(name: str) -> list[str]:
    """Every SAE id of release ``name``."""
    return list(find_release(name).ids)


def find_id(release: Release, sae_id: Any) -> str:
    """``sae_id`` when ``release`` holds it; an error listing close ids otherwise."""
    if not isinstance(sae_id, str) or sae_id not in release.ids:
        hint = _close(str(sae_id), release.ids)
        layers = sorted({int(m.group(1)) for i in release.ids if (m := re.search(r"layer_(\d+)", i))})
        raise ValueError(
            f"{release.name!r} has no SAE id {sae_id!r}.{hint} It holds {len(release.ids)} ids on layers {layers}, "
            f"e.g. {list(release.ids[:3])}."
        )
    return sae_id


def fetch(release: Release, sae_id: str, local_files_only: bool | None = None) -> Path:
    """The local folder of ``sae_id``: downloaded from the hub when online, found in the hub's cache offline."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    path = release.path_of(sae_id)
    offline = bool(local_files_only) or os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
    try:
        try:
            root = snapshot_download(release.repo_id, allow_patterns=[f"{path}/*"], local_files_only=offline)
        except (OSError, ValueError) as err:  # no network: what the cache holds
            if offline or isinstance(err, LocalEntryNotFoundError):
                raise
            root = snapshot_download(release.repo_id, allow_patterns=[f"{path}/*"], local_files_only=True)
    except LocalEntryNotFoundError:
        raise FileNotFoundError(
            f"{release.name}/{sae_id} is not in the Hugging Face cache and the hub cannot be reached: it needs "
            f"{release.repo_id}/{path}/{PARAMS} (download it where there is a network, or set HF_HUB_CACHE)."
        ) from None
    folder = Path(root) / path
    if not (folder / PARAMS).is_file():
        held = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else "nothing"
        raise FileNotFoundError(f"{release.repo_id} has no {path}/{PARAMS} (the folder holds {held}).")
    return folder


def member(folder: Path, name: str) -> Path:
    """A file of a release folder, read only from inside the folder's Hugging Face cache repository.

    The hub's cache keeps a snapshot's files as symlinks into the repository's ``blobs/``, so the folder
    a file may lead into is the repository's (``models--org--name/``), found above ``snapshots/``.
    """
    repo = next((p.parent for p in folder.parents if p.name == "snapshots"), folder)
    return in_folder(folder, name, root=repo)


def read_params(folder: Path, d_out_same: bool = True) -> tuple[dict[str, torch.Tensor], int, int]:
    """The checked tensors of a Gemma Scope 2 ``params.safetensors`` (``W_enc``, ``W_dec``, ``b_enc``, ``b_dec``,
    ``threshold`` and any others), with ``d_in`` and ``d_sae``; shapes are checked before anything is read."""
    file = member(folder, PARAMS)
    header = safetensors_header(file)
    enc = header.tensors.get("w_enc")
    if enc is None or len(enc.shape) != 2:
        raise FileError(file, "w_enc", f"is missing or not 2-D (the file holds {sorted(header.tensors)})")
    d_in, d_sae = enc.shape
    dec = header.tensors.get("w_dec")
    d_out = dec.shape[-1] if dec is not None and len(dec.shape) == 2 and not d_out_same else d_in
    expect_arrays(file, header.tensors, {"w_enc": ((d_in, d_sae), FLOATS), "w_dec": ((d_sae, d_out), FLOATS),
                                         "b_enc": ((d_sae,), FLOATS), "b_dec": ((d_out,), FLOATS),
                                         "threshold": ((d_sae,), FLOATS)})  # fmt: skip
    _, raw = read_safetensors(file, " (an SAE of a release)")
    names = {"w_enc": "W_enc", "w_dec": "W_dec", "b_enc": "b_enc", "b_dec": "b_dec", "threshold": "threshold"}
    return {names.get(k, k): v for k, v in raw.items()}, d_in, d_sae


def read_config(folder: Path) -> dict[str, Any]:
    """The folder's ``config.json`` when it has one (checked field by field), else ``{}``."""
    file = member(folder, CONFIG)
    if not file.is_file():
        return {}
    raw = Fields(file, read_json(file, max_bytes=1024**2))
    arch = raw.str("architecture", "jump_relu")
    if arch != "jump_relu":
        raise FileError(file, "architecture", f"is {arch!r}; Gemma Scope 2 folders hold 'jump_relu' SAEs")
    return {"model_name": raw.str("model_name", ""), "hf_hook_point_in": raw.str("hf_hook_point_in", "")}


def layer_of(sae_id: str) -> int:
    match = re.search(r"layer_(\d+)", sae_id)
    if match is None:
        raise ValueError(f"SAE id {sae_id!r} names no layer (layer_N).")
    return int(match.group(1))


def build_jumprelu(release: Release, sae_id: str, folder: Path) -> SAE:
    """A JumpReLU SAE (``b_dec`` not subtracted from the input) from a release folder of kind res/mlp/att."""
    read_config(folder)
    tensors, d_in, d_sae = read_params(folder)
    site = f"blocks.{layer_of(sae_id)}.{SITES[release.kind]}"
    meta = {"release": release.name, "sae_id": sae_id, "repo_id": release.repo_id}
    sae = build_sae("jumprelu", d_in, d_sae, site, release.model, False, None, meta, str(folder / PARAMS))
    assign_tensors(sae, tensors, str(folder / PARAMS))
    return sae


for _kind in SITES:
    register_kind(_kind, build_jumprelu)


def load_release(name: str, sae_id: str, local_files_only: bool | None = None) -> Any:
    """``sae_id`` of release ``name`` (SAELens's names), downloaded or found in the hub cache.

    >>> sae = load_release("gemma-scope-2-270m-pt-res", "layer_5_width_16k_l0_medium")
    """
    release = find_release(name)
    sae_id = find_id(release, sae_id)
    if release.kind not in BUILDERS:
        raise ValueError(f"{name!r} holds {release.kind} folders, which nothing here builds yet "
                         f"(kinds with a builder: {sorted(BUILDERS)}).")  # fmt: skip
    folder = fetch(release, sae_id, local_files_only)
    obj = BUILDERS[release.kind](release, sae_id, folder)
    if isinstance(obj, SAE):
        obj.source_path = folder
    return obj
