"""Meta-SAEs (Bussmann et al.): a BatchTopK SAE trained on another SAE's decoder rows.

Each latent's (unit-norm) decoder direction is written as a sparse sum of meta-latents; latents
that share a meta-latent share part of their meaning, which shows a latent is not atomic.

Example
-------
>>> meta = train_meta_sae(sae, width=256, k=4)
>>> decompose(meta, sae, 123)           # meta-latents of latent 123, with weights and siblings
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.nn.functional import normalize

from ..checks import check_int, check_latent
from ..saes import SAE
from ..saes.training.in_memory import fit_tensor


def decoder_rows(sae: SAE) -> torch.Tensor:
    """``sae``'s decoder rows at unit norm [M, D]: what a meta-SAE reads."""
    return normalize(sae.W_dec.detach().float(), dim=1)


def train_meta_sae(
    sae: SAE, width: int = 256, k: int = 4, steps: int = 2000, batch_size: int = 1024, lr: float = 1e-3,
    seed: int = 0, progress: bool = True,
) -> SAE:  # fmt: skip
    """A BatchTopK meta-SAE on ``sae``'s decoder rows (``k`` meta-latents per latent on average).

    >>> meta = ilab.matching.train_meta_sae(ilab.load_sae("embedded", layer=6), width=256, k=4)
    """
    if not isinstance(sae, SAE):
        raise TypeError(f"sae must be an interplab SAE, got {type(sae).__name__}.")
    width = check_int("width", width, 1, sae.d_sae)
    meta = fit_tensor(decoder_rows(sae), arch="batchtopk", width=width, k=check_int("k", k, 1, width), steps=steps,
                      batch_size=batch_size, lr=lr, seed=seed, site=f"meta:{sae.site}", progress=progress)  # fmt: skip
    meta.cfg.metadata["meta_of"] = sae.fingerprint()
    return meta


@torch.no_grad()
def meta_activations(meta: SAE, sae: SAE) -> torch.Tensor:
    """Meta-latent activations of every latent of ``sae`` [M, M_meta]."""
    if meta.d_in != sae.d_in:
        raise ValueError(f"meta reads d_in={meta.d_in}, but sae's decoder rows have width {sae.d_in}.")
    return meta.encode(decoder_rows(sae))


@torch.no_grad()
def decompose(meta: SAE, sae: SAE, latent: int, siblings: int = 5, labels: Any = None) -> list[dict[str, Any]]:
    """Latent ``latent``'s meta-latents, strongest first: weight, and the other latents that use it most.

    ``labels`` (``ilab.features`` labels: a dict latent -> text, or a Labels object) names the latents.
    """
    latent = check_latent(latent, sae.d_sae)
    siblings = check_int("siblings", siblings, minimum=0)
    acts = meta_activations(meta, sae)
    row = acts[latent]
    name = _namer(labels)
    out = []
    for m in torch.argsort(row, descending=True).tolist():
        if float(row[m]) <= 0:
            break
        col = acts[:, m].clone()
        col[latent] = 0
        top = [int(i) for i in torch.argsort(col, descending=True)[:siblings] if float(col[i]) > 0]
        out.append({"meta_latent": m, "weight": float(row[m]), "n_latents": int((acts[:, m] > 0).sum()),
                    "siblings": top, "sibling_labels": [name(i) for i in top]})  # fmt: skip
    return out


def _namer(labels: Any) -> Callable[[int], str]:
    if labels is None:
        return lambda i: ""
    getter = getattr(labels, "get", None)
    if getter is None:
        raise TypeError(f"labels must map latent ids to text (a dict or ilab.features labels), got {type(labels)}.")
    return lambda i: str(getter(i, "") or "")


@torch.no_grad()
def meta_table(meta: SAE, sae: SAE, labels: Any = None, latents: Any = None) -> Any:
    """One row per (latent, meta-latent) pair: the view a researcher browses (a DataFrame).

    Columns: ``latent``, ``label``, ``meta_latent``, ``weight``, ``meta_size`` (latents sharing it),
    ``shared_with`` (labels of the latents using it most).
    """
    import pandas as pd

    name = _namer(labels)
    acts = meta_activations(meta, sae)
    ids = range(sae.d_sae) if latents is None else [check_latent(i, sae.d_sae) for i in latents]
    sizes = (acts > 0).sum(0)
    rows = []
    for i in ids:
        for m in (acts[i] > 0).nonzero().flatten().tolist():
            col = acts[:, m].clone()
            col[i] = 0
            top = [int(j) for j in torch.argsort(col, descending=True)[:3] if float(col[j]) > 0]
            shared = ", ".join(name(j) or f"#{j}" for j in top)
            rows.append({"latent": i, "label": name(i), "meta_latent": m, "weight": float(acts[i, m]),
                         "meta_size": int(sizes[m]), "shared_with": shared})  # fmt: skip
    return pd.DataFrame(rows)
