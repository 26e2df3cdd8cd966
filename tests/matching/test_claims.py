"""The stitching paper's comparisons: they hold on planted SAEs and fail with a random SAE in the trained one's place.

Planted setting (d = 32): 24 orthonormal features; activations are sparse non-negative sums of them. The
"trained" small SAE holds the first 16 features exactly; the large SAE holds all 24 (16 reconstruction
latents, 8 novel ones); its decoder rows for the meta-SAE are sums of two small latents' rows.
"""

from __future__ import annotations

import numpy as np
import torch
from interplab.core.matching import meta_resemblance, novel_insertion, train_meta_sae
from interplab.core.saes import SAE

D = 32
SITE = "blocks.1.hook_resid_post"


def _features() -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(D, D, generator=torch.Generator().manual_seed(0)))
    return q[:24]  # [24, D] orthonormal rows


def _exact_sae(rows: torch.Tensor) -> SAE:
    """A ReLU SAE whose encoder reads each row's coefficient and whose decoder writes it back."""
    sae = SAE.create("standard", d_in=D, d_sae=len(rows), site=SITE)
    with torch.no_grad():
        sae.W_enc.copy_(rows.T)
        sae.W_dec.copy_(rows)
        sae.b_enc.zero_()
        sae.b_dec.zero_()
    return sae.eval()


def _random_sae(d_sae: int, seed: int = 1) -> SAE:
    sae = SAE.create("standard", d_in=D, d_sae=d_sae, site=SITE)
    sae.init_weights(seed)
    return sae.eval()


def _activations(features: torch.Tensor, n: int = 2000) -> torch.Tensor:
    g = torch.Generator().manual_seed(2)
    coef = torch.rand(n, len(features), generator=g) * (torch.rand(n, len(features), generator=g) < 0.15)
    return coef @ features


def test_inserting_novel_latents_beats_random_latents_and_fails_with_a_random_small_sae():
    features = _features()
    x = _activations(features)
    small, large = _exact_sae(features[:16]), _exact_sae(features)
    ins = novel_insertion(small, large, x)
    novel = ins.per_latent.set_index("kind")
    assert novel.loc["novel", "n_latents"] == 8 and novel.loc["reconstruction", "n_latents"] == 16
    assert ins.mse_novel < 1e-8 < ins.mse_small and ins.holds()
    assert novel.loc["novel", "share_lowering"] == 1.0 and novel.loc["reconstruction", "share_lowering"] == 0.0
    # a random SAE in the trained one's place: every large latent is novel, no better than as many random ones
    rand = novel_insertion(_random_sae(16), large, x)
    assert rand.per_latent.set_index("kind").loc["novel", "n_latents"] == 24
    assert not rand.holds()


def test_meta_latents_resemble_the_small_sae_and_not_a_random_one():
    features = _features()
    g = torch.Generator().manual_seed(3)
    pairs = torch.stack([torch.randperm(16, generator=g)[:2] for _ in range(300)])
    large = SAE.create("standard", d_in=D, d_sae=300, site=SITE)
    with torch.no_grad():
        large.W_dec.copy_(torch.nn.functional.normalize(features[pairs[:, 0]] + features[pairs[:, 1]], dim=1))
    meta = train_meta_sae(large, width=16, k=2, steps=300, batch_size=128, lr=3e-3, progress=False)
    res = meta_resemblance(meta, _exact_sae(features[:16]), large)
    assert res.holds() and res.margin() > 4, res.table
    table = res.table.set_index("directions")
    assert table.loc["meta-latents", "median"] > table.loc["decoder-covariance random", "median"]
    # a random SAE in the trained one's place: meta-latents resemble it no more than random directions do
    rand = meta_resemblance(meta, _random_sae(16), large)
    assert not rand.holds(), rand.table
    assert abs(rand.margin()) < 4 and np.isfinite(rand.margin("random unit"))
