"""The TopK SAE: exactly the k largest pre-activations fire, and the AuxK loss by hand."""

from __future__ import annotations

import pytest
import torch
from interplab.core.saes import SAE
from interplab.core.saes.topk import AUX_COEFFICIENT

from tests.saes.helpers import pre_by_hand, randomize


def test_topk_keeps_exactly_k_nonnegative_per_row():
    k = 4
    sae = randomize(SAE.create("topk", d_in=8, d_sae=32, k=k))
    x = torch.randn(200, 8)
    with torch.no_grad():  # about half the rows then have fewer than k positive pre-activations
        sae.b_enc.sub_(float(pre_by_hand(sae, x).topk(k, dim=-1).values[:, -1].median()))
    acts = sae.encode(x)
    pre = pre_by_hand(sae, x)
    nz = (acts != 0).sum(-1)
    assert (acts >= 0).all() and (nz <= k).all()
    assert (nz == k).any() and (nz < k).any()
    # exactly the k largest pre-activations, relu'd
    top = pre.topk(k, dim=-1)
    want = torch.zeros_like(pre).scatter_(-1, top.indices, top.values.clamp_min(0))
    torch.testing.assert_close(acts, want)
    assert torch.equal(nz, (top.values > 0).sum(-1))


def test_auxk_term_reconstructs_residual_with_dead_latents():
    sae = randomize(SAE.create("topk", d_in=16, d_sae=64, k=2), seed=5, scale=0.5)
    x = torch.randn(32, 16)
    dead = torch.zeros(64, dtype=torch.bool)
    dead[::2] = True
    loss_plain, info_plain = sae.training_loss(x)
    loss, info = sae.training_loss(x, dead=dead)
    assert info_plain["aux"] == 0 and info["aux"] > 0
    assert float(loss.detach()) == pytest.approx(info["mse"] + AUX_COEFFICIENT * info["aux"], rel=1e-5)
    # AuxK by hand: the top k_aux dead latents reconstruct the main reconstruction's error
    with torch.no_grad():
        recon = info["recon"]
        err = x - recon
        idx = dead.nonzero().flatten()
        pre = pre_by_hand(sae, x)[:, idx]
        top = pre.topk(8, dim=1)  # k_aux = min(d_in // 2, n_dead)
        err_hat = (
            torch.zeros(32, 64).index_copy_(
                1, idx, torch.zeros(32, len(idx)).scatter_(1, top.indices, top.values.relu())
            )
            @ sae.W_dec
        )
        want = (err_hat - err).pow(2).sum(-1).mean() / (err - err.mean(0)).pow(2).sum(-1).mean()
    assert info["aux"] == pytest.approx(float(want), rel=1e-4)
    # dead latents receive encoder gradient only through AuxK
    sae.zero_grad(set_to_none=True)
    loss_plain.backward()
    plain_grad = sae.W_enc.grad.clone()
    sae.zero_grad(set_to_none=True)
    sae.training_loss(x, dead=dead)[0].backward()
    never_selected = ~info_plain["fired"] & dead
    assert never_selected.any()
    assert (plain_grad[:, never_selected] == 0).all()
    assert (sae.W_enc.grad[:, never_selected] != 0).any()
