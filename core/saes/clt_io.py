"""Cross-layer transcoder files: Gemma Scope 2's multi-layer layout and circuit-tracer's, read header first.

* **Gemma Scope 2** (``params_layer_L.safetensors`` per layer): ``w_enc`` [D, S], ``w_dec`` [S, L_all, D] (its
  slices before layer L unused), ``b_enc`` [S], ``b_dec`` [D], ``threshold`` [S], optionally
  ``affine_skip_connection`` [D, D]; a JumpReLU CLT.
* **circuit-tracer** (what :func:`save_clt` writes, with a ``config.json``): ``W_enc_L.safetensors`` holding
  ``W_enc_L`` [S, D], ``b_enc_L``, ``b_dec_L`` and ``threshold_L`` (JumpReLU), and ``W_dec_L.safetensors``
  holding ``W_dec_L`` [S, L_all - L, D]; interplab adds ``W_skip_L`` [D, D] to the encoder file for a skip.

Every header is checked (names, dtypes, shapes agreeing across layers) and the total weighed against the
memory budget before a tensor is read; pickles are never opened.

Example
-------
>>> clt = load_clt("gemma-scope-2-270m-pt/clt/width_262k_l0_medium_affine")
>>> save_clt(clt, "my_clt")                     # load_clt("my_clt") reads it back
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import torch

from ..memory.budget import check_memory
from ..storage.atomic import make_dirs, write_json, write_safetensors
from ..storage.readers.arrays import FLOATS, expect_arrays, safetensors_header
from ..storage.readers.errors import FileError
from .clt import CrossLayerTranscoder

_GS2 = re.compile(r"params_layer_(\d+)\.safetensors")
_CT = re.compile(r"W_enc_(\d+)\.safetensors")


def _layers(folder: Path, pattern: re.Pattern[str]) -> list[int]:
    found = sorted(int(m.group(1)) for f in os.listdir(folder) if (m := pattern.fullmatch(f)))
    if found and found != list(range(len(found))):
        raise FileError(folder, "layers", f"holds layers {found}, expected 0..{len(found) - 1} with none missing")
    return found


def load_clt(
    path: str | os.PathLike[str],
    sae_id: str | None = None,
    *,
    local_files_only: bool | None = None,
    device: str | torch.device = "cpu",
) -> CrossLayerTranscoder:
    """A cross-layer transcoder from a folder in Gemma Scope 2's or circuit-tracer's layout (see the module doc),
    or with ``sae_id`` from a Hugging Face repo (``path``) and the CLT's folder in it (``sae_id``), downloaded
    into the hub's cache or found there offline.

    >>> clt = load_clt("tests/reference/circuit_tracer_clt/gemma3/clt")
    >>> clt = load_clt("google/gemma-scope-2-270m-pt", "clt/width_262k_l0_medium_affine")
    """
    folder = Path(path) if sae_id is None else fetch_clt(str(path), sae_id, local_files_only)
    if not folder.is_dir():
        raise FileNotFoundError(f"No cross-layer transcoder folder at {str(folder)!r}.")
    gs2, ct = _layers(folder, _GS2), _layers(folder, _CT)
    if gs2:
        clt = _read_gemma_scope_2(folder, len(gs2))
    elif ct:
        clt = _read_circuit_tracer(folder, len(ct))
    else:
        raise FileError(folder, "files", "holds neither params_layer_L.safetensors (Gemma Scope 2) nor "
                        "W_enc_L.safetensors (circuit-tracer): not a cross-layer transcoder folder")  # fmt: skip
    return clt.to(device).eval()


def fetch_clt(repo_id: str, sae_id: str, local_files_only: bool | None = None) -> Path:
    """The local folder of CLT ``sae_id`` (its per-layer files) in Hugging Face repo ``repo_id``: downloaded when
    online, found in the hub's cache offline; a clear error naming what is missing otherwise."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    if not isinstance(sae_id, str) or not sae_id.strip("/") or ".." in sae_id.split("/"):
        raise ValueError(f"sae_id must be a CLT's folder in the repo, e.g. 'clt/width_262k_l0_medium_affine'; "
                         f"got {sae_id!r}.")  # fmt: skip
    sub = sae_id.strip("/")
    offline = bool(local_files_only) or os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
    patterns = [f"{sub}/*.safetensors", f"{sub}/*.json"]
    try:
        try:
            root = snapshot_download(repo_id, allow_patterns=patterns, local_files_only=offline)
        except (OSError, ValueError) as err:  # no network: what the cache holds
            if offline or isinstance(err, LocalEntryNotFoundError):
                raise
            root = snapshot_download(repo_id, allow_patterns=patterns, local_files_only=True)
    except LocalEntryNotFoundError:
        raise FileNotFoundError(f"{repo_id}/{sub} is not in the Hugging Face cache and the hub cannot be reached: "
                                "download it where there is a network, or set HF_HUB_CACHE.") from None  # fmt: skip
    folder = Path(root) / sub
    if not folder.is_dir():
        raise FileNotFoundError(f"{repo_id} has no folder {sub!r}.")
    return folder


def _read_gemma_scope_2(folder: Path, n_layers: int) -> CrossLayerTranscoder:
    files = [folder / f"params_layer_{layer}.safetensors" for layer in range(n_layers)]
    headers = [safetensors_header(f) for f in files]
    d_model, d_sae = headers[0].tensors["w_enc"].shape if "w_enc" in headers[0].tensors else (0, 0)
    skip = "affine_skip_connection" in headers[0].tensors
    for header in headers:
        expect_arrays(header.file, header.tensors, {
            "w_enc": ((d_model, d_sae), FLOATS), "w_dec": ((d_sae, n_layers, d_model), FLOATS),
            "b_enc": ((d_sae,), FLOATS), "b_dec": ((d_model,), FLOATS), "threshold": ((d_sae,), FLOATS),
            **({"affine_skip_connection": ((d_model, d_model), FLOATS)} if skip else {}),
        })  # fmt: skip
    check_memory(f"Reading the cross-layer transcoder {str(folder)!r}", sum(h.nbytes for h in headers)
                 + CrossLayerTranscoder.estimate_bytes(n_layers, d_model, d_sae, skip=skip))  # fmt: skip
    clt = CrossLayerTranscoder(n_layers, d_model, d_sae, "jumprelu", skip=skip)
    from safetensors import safe_open

    with torch.no_grad():
        for layer, f in enumerate(files):
            with safe_open(str(f), framework="pt") as st:
                clt.W_enc[layer].copy_(st.get_tensor("w_enc"))
                clt.b_enc[layer].copy_(st.get_tensor("b_enc"))
                clt.b_dec[layer].copy_(st.get_tensor("b_dec"))
                clt.log_threshold[layer].copy_(st.get_tensor("threshold").float().clamp_min(1e-12).log())
                clt.W_dec[layer].copy_(st.get_slice("w_dec")[:, layer:, :])
                if skip and clt.W_skip is not None:
                    clt.W_skip[layer].copy_(st.get_tensor("affine_skip_connection"))
    return clt


def _read_circuit_tracer(folder: Path, n_layers: int) -> CrossLayerTranscoder:
    enc = [safetensors_header(folder / f"W_enc_{layer}.safetensors") for layer in range(n_layers)]
    dec = [safetensors_header(folder / f"W_dec_{layer}.safetensors") for layer in range(n_layers)]
    first = enc[0].tensors.get("W_enc_0")
    if first is None:
        raise FileError(enc[0].file, "W_enc_0", "is missing")
    d_sae, d_model = first.shape
    jump, skip = "threshold_0" in enc[0].tensors, "W_skip_0" in enc[0].tensors
    for layer in range(n_layers):
        expect_arrays(enc[layer].file, enc[layer].tensors, {
            f"W_enc_{layer}": ((d_sae, d_model), FLOATS), f"b_enc_{layer}": ((d_sae,), FLOATS),
            f"b_dec_{layer}": ((d_model,), FLOATS), **({f"threshold_{layer}": ((d_sae,), FLOATS)} if jump else {}),
            **({f"W_skip_{layer}": ((d_model, d_model), FLOATS)} if skip else {}),
        })  # fmt: skip
        expect_arrays(dec[layer].file, dec[layer].tensors, {f"W_dec_{layer}": ((d_sae, n_layers - layer, d_model),
                                                                                FLOATS)})  # fmt: skip
    config = _config(folder)
    activation = str(config.get("activation", "jumprelu" if jump else "relu"))
    k = config.get("k")
    if k is not None and (not isinstance(k, int) or isinstance(k, bool)):
        raise FileError(folder / "config.json", "k", f"must be an integer or null, got {k!r}")
    check_memory(f"Reading the cross-layer transcoder {str(folder)!r}",
                 2 * CrossLayerTranscoder.estimate_bytes(n_layers, d_model, d_sae, skip=skip))  # fmt: skip
    clt = CrossLayerTranscoder(n_layers, d_model, d_sae, activation, k=k, skip=skip)
    from safetensors.torch import load_file

    with torch.no_grad():
        for layer in range(n_layers):
            e = load_file(str(enc[layer].file))
            clt.W_enc[layer].copy_(e[f"W_enc_{layer}"].T)
            clt.b_enc[layer].copy_(e[f"b_enc_{layer}"])
            clt.b_dec[layer].copy_(e[f"b_dec_{layer}"])
            if jump:
                clt.log_threshold[layer].copy_(e[f"threshold_{layer}"].float().clamp_min(1e-12).log())
            if skip and clt.W_skip is not None:
                clt.W_skip[layer].copy_(e[f"W_skip_{layer}"])
            clt.W_dec[layer].copy_(load_file(str(dec[layer].file))[f"W_dec_{layer}"])
    return clt


def _config(folder: Path) -> dict[str, object]:
    file = folder / "config.json"
    if not file.exists():
        return {}
    try:
        config = json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise FileError(file, "json", f"is not valid JSON ({err.msg})") from None
    if not isinstance(config, dict):
        raise FileError(file, "json", "is not a JSON object")
    return config


def save_clt(clt: CrossLayerTranscoder, path: str | os.PathLike[str]) -> Path:
    """Write ``clt`` in circuit-tracer's layout (``load_clt`` of circuit-tracer reads it; a skip as ``W_skip_L``).

    >>> save_clt(clt, "my_clt")
    """
    if not isinstance(clt, CrossLayerTranscoder):
        raise TypeError(f"save_clt writes a CrossLayerTranscoder, got {type(clt).__name__}.")
    folder = Path(path)
    make_dirs(folder)
    with torch.no_grad():
        for layer in range(clt.n_layers):
            enc = {f"W_enc_{layer}": clt.W_enc[layer].T, f"b_enc_{layer}": clt.b_enc[layer],
                   f"b_dec_{layer}": clt.b_dec[layer]}  # fmt: skip
            threshold = clt.threshold
            if threshold is not None:
                enc[f"threshold_{layer}"] = threshold[layer]
            if clt.W_skip is not None:
                enc[f"W_skip_{layer}"] = clt.W_skip[layer]
            write_safetensors(folder / f"W_enc_{layer}.safetensors",
                              {k: v.detach().cpu().contiguous() for k, v in enc.items()})  # fmt: skip
            write_safetensors(folder / f"W_dec_{layer}.safetensors",
                              {f"W_dec_{layer}": clt.W_dec[layer].detach().cpu().contiguous()})  # fmt: skip
    write_json(folder / "config.json", {"architecture": "cross_layer_transcoder", "activation": clt.activation,
                                        "k": clt.k, "n_layers": clt.n_layers, "d_model": clt.d_model,
                                        "d_sae": clt.d_sae, "skip": clt.skip})  # fmt: skip
    return folder
