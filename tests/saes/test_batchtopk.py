"""The BatchTopK SAE: its inference threshold, how training estimates it, and an average L0 of k after training."""

from __future__ import annotations

import pytest
import torch
from interplab.core.saes import SAE, BatchTopKSAE, train_sae

from tests.saes.helpers import BATCH, fvu, pre_by_hand, randomize


def test_batchtopk_inference_uses_its_threshold():
    sae = randomize(SAE.create("batchtopk", d_in=8, d_sae=32, k=4))
    with torch.no_grad():
        sae.topk_threshold.fill_(0.7)
    x = torch.randn(100, 8)
    pre = pre_by_hand(sae, x)
    acts = sae.encode(x)
    torch.testing.assert_close(acts, pre * (pre > 0.7))
    nz = (acts != 0).sum(-1)
    assert nz.min() != nz.max(), "the number firing varies per token at inference (no per-row top-k)"
    assert torch.equal(sae.threshold, torch.full((32,), 0.7))


def test_batchtopk_threshold_estimate_tracks_smallest_selected_activation():
    sae = randomize(SAE.create("batchtopk", d_in=8, d_sae=32, k=3))
    x1, x2 = torch.randn(16, 8), torch.randn(16, 8)
    assert float(sae.topk_threshold) == 0.0
    sae.training_loss(x1)
    pre = pre_by_hand(sae, x1).detach()
    top = pre.flatten().topk(3 * 16).values
    first = float(top[top > 0].min())
    assert float(sae.topk_threshold) == pytest.approx(first, rel=1e-6)
    sae.training_loss(x2)
    top2 = pre_by_hand(sae, x2).detach().flatten().topk(3 * 16).values
    second = float(top2[top2 > 0].min())
    assert float(sae.topk_threshold) == pytest.approx(first + 0.01 * (second - first), rel=1e-5)


def test_train_batchtopk_average_l0_is_k(store, x_a):
    k = 4
    sae = train_sae(
        store, arch="batchtopk", width=64, k=k, lr=1e-2, n_tokens=BATCH * 150, batch_size=BATCH, progress=False
    )
    assert type(sae) is BatchTopKSAE
    with torch.no_grad():
        acts = sae.encode(x_a)
        pre = sae.pre_acts(x_a)
    # inference is the threshold rule, with a threshold on the raw scale
    assert float(sae.topk_threshold) > 0
    torch.testing.assert_close(acts, pre * (pre > sae.topk_threshold))
    l0 = (acts != 0).sum(-1).float()
    assert abs(float(l0.mean()) - k) < 0.4 * k, float(l0.mean())
    assert l0.max() > l0.min(), "BatchTopK lets the count vary per token"
    assert fvu(sae(x_a).detach(), x_a) < 0.3
