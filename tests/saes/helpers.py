"""What the SAE tests share: activations with planted sparse features, a real on-disk store of them,
the fraction of variance unexplained, random weights and weight comparisons, pre-activations by hand.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from interplab.core.data.store import ActivationStore
from interplab.core.saes import SAE, BatchTopKSAE, GatedSAE, JumpReLUSAE, StandardSAE, TopKSAE
from safetensors.torch import save_file

ARCHS = ["standard", "topk", "batchtopk", "jumprelu", "gated"]
CLASSES = {
    "standard": StandardSAE,
    "topk": TopKSAE,
    "batchtopk": BatchTopKSAE,
    "jumprelu": JumpReLUSAE,
    "gated": GatedSAE,
}
SITE_A, SITE_B = "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"
D_A, D_B = 32, 16
N_STORE = 8192
BATCH = 256
RAW_SCALE = 25.0  # far from the training scale E||x|| = sqrt(d), so an unfolded scale shows up


def planted(n: int, d: int, m: int = 64, active: int = 3, seed: int = 100) -> torch.Tensor:
    """``n`` tokens, each a nonnegative combination of ``active`` of ``m`` unit directions, plus an offset.

    The seed must differ from the SAE initialisation seeds (0, 1, ...): with seed 0 the planted
    directions would be exactly the initial decoder rows and training would have nothing to find.
    """
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(m, d, generator=g)
    feats /= feats.norm(dim=1, keepdim=True)
    idx = torch.rand(n, m, generator=g).argsort(1)[:, :active]
    coef = torch.rand(n, active, generator=g) + 0.5
    x = torch.zeros(n, m).scatter_(1, idx, coef) @ feats
    offset = torch.randn(d, generator=g) * 0.3
    return RAW_SCALE * (x + offset)


def write_store(path: Path, data: dict[str, torch.Tensor], shard: int = 2048) -> ActivationStore:
    """A real activation store folder written the way core/data/store/ writes one (manifest + shards)."""
    path.mkdir(parents=True)
    n = len(next(iter(data.values())))
    shards = []
    for i, start in enumerate(range(0, n, shard)):
        name = f"shard_{i:05d}.safetensors"
        tensors = {k: v[start : start + shard].contiguous() for k, v in data.items()}
        tensors["tokens"] = torch.arange(start, min(n, start + shard))
        save_file(tensors, str(path / name))
        shards.append({"file": name, "n_tokens": len(tensors["tokens"])})
    manifest = {
        "format": "interplab-activations",
        "version": 1,
        "model": "planted",
        "sites": list(data),
        "d": {k: v.shape[1] for k, v in data.items()},
        "dtype": "float32",
        "context_size": 16,
        "skipped_prefix": 1,
        "n_tokens": n,
        "windows_done": 0,
        "shards": shards,
        "complete": True,
    }
    (path / "manifest.json").write_text(json.dumps(manifest))
    return ActivationStore(path)


def fvu(recon: torch.Tensor, x: torch.Tensor) -> float:
    """Fraction of variance unexplained."""
    return float((recon - x).pow(2).sum(-1).mean() / (x - x.mean(0)).pow(2).sum(-1).mean())


def randomize(sae: SAE, seed: int = 0, scale: float = 1.0) -> SAE:
    """Random values in every parameter (non-zero biases), so no term of a formula can hide."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in sae.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return sae


def weights(sae: SAE) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in sae.state_dict().items()}


def assert_same_weights(a: SAE, b: SAE) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key


def pre_by_hand(sae: SAE, x: torch.Tensor) -> torch.Tensor:
    b_in = sae.b_dec if sae.cfg.apply_b_dec_to_input else 0
    return (x - b_in) @ sae.W_enc + sae.b_enc


def first_batch(store: ActivationStore, site: str = SITE_A, seed: int = 0) -> torch.Tensor:
    return next(store.batches(BATCH, site=site, seed=seed))


def fvu_at_init(trained: SAE, k: int, first: torch.Tensor, x: torch.Tensor) -> float:
    """FVU before training: a TopK SAE of the same shape as training initialises it, on the scaled data."""
    sae = SAE.create("topk", d_in=trained.d_in, d_sae=trained.d_sae, k=k)
    scale = math.sqrt(trained.d_in) / float(first.norm(dim=-1).mean())
    with torch.no_grad():
        sae.b_dec.copy_(first.mean(0) * scale)  # what training starts from
        return fvu(sae(x * scale), x * scale)
