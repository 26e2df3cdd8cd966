"""The JumpReLU SAE: it fires iff the pre-activation exceeds the threshold, and its straight-through
threshold gradients match the rectangle-kernel estimator of Rajamanoharan et al.
"""

from __future__ import annotations

import torch
from interplab.core.saes import SAE, JumpReLUSAE

from tests.saes.helpers import pre_by_hand, randomize


def test_jumprelu_fires_iff_pre_exceeds_threshold():
    sae = SAE.create("jumprelu", d_in=4, d_sae=4, apply_b_dec_to_input=False)
    t = torch.tensor([0.5, 1.0, 1.5, 2.0])
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(4))
        sae.b_enc.zero_()
        sae.set_threshold(t)
    thr = sae.threshold.detach()
    torch.testing.assert_close(thr, t)
    eps = 1e-3
    x = torch.stack([thr, thr + eps, thr - eps, -thr, thr * 3])
    acts = sae.encode(x)
    assert torch.equal(acts[0], torch.zeros(4)), "pre == threshold does not fire"
    torch.testing.assert_close(acts[1], thr + eps)  # the value is pre itself, not pre - threshold
    assert torch.equal(acts[2], torch.zeros(4))
    assert torch.equal(acts[3], torch.zeros(4))
    torch.testing.assert_close(acts[4], thr * 3)
    # and with random weights: pre * (pre > threshold)
    sae2 = randomize(SAE.create("jumprelu", d_in=8, d_sae=24))
    with torch.no_grad():
        sae2.set_threshold(torch.rand(24) + 0.1)
    xr = torch.randn(50, 8)
    pre = pre_by_hand(sae2, xr)
    torch.testing.assert_close(sae2.encode(xr), pre * (pre > sae2.threshold))


BW = 0.1


def _jumprelu_identity(l0: float) -> JumpReLUSAE:
    """pre == x: identity encoder, no bias, thresholds 0.5, 1, 1.5, 2; random decoder."""
    sae = SAE.create("jumprelu", d_in=4, d_sae=4, bandwidth=BW, l0_coefficient=l0, apply_b_dec_to_input=False)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(4))
        sae.b_enc.zero_()
        sae.W_dec.copy_(torch.randn(4, 4, generator=g))
        sae.b_dec.copy_(torch.randn(4, generator=g))
        sae.set_threshold(torch.tensor([0.5, 1.0, 1.5, 2.0]))
    return sae


# offsets from each latent's threshold: |offset| < BW/2 is inside the kernel window
OFFSETS = torch.tensor(
    [
        [0.30, 0.04, -0.04, 0.06],
        [-0.2, 0.20, -0.06, 0.0],
        [0.06, -0.3, 0.049, 0.5],
    ]
)


IN_WINDOW = OFFSETS.abs() < BW / 2  # latent 0: never; 1: row 0; 2: rows 0, 2; 3: row 1


def test_jumprelu_threshold_gradient_only_within_half_bandwidth():
    sae = _jumprelu_identity(l0=0.0)
    t = sae.threshold.detach()
    x = t + OFFSETS
    loss, _ = sae.training_loss(x)
    loss.backward()
    g_log_t = sae.log_threshold.grad
    # dLoss/dacts with plain autograd, then the rectangle-kernel estimator by hand:
    # d acts / d t = -(t / bw) K((pre - t) / bw), and d t / d log_t = t.
    acts = (x * (x > t)).requires_grad_(True)
    ref = ((acts @ sae.W_dec.detach() + sae.b_dec.detach()) - x).pow(2).sum(-1).mean()
    (g_acts,) = torch.autograd.grad(ref, acts)
    want = (-(t / BW) * IN_WINDOW * g_acts).sum(0) * t
    torch.testing.assert_close(g_log_t, want)
    assert g_log_t[0] == 0 and (g_log_t[1:] != 0).all()
    # the pre-activation gradient passes only where the latent fires
    assert sae.W_enc.grad is not None
    fired = x > t
    assert torch.equal(sae.b_enc.grad != 0, fired.any(0))


def test_jumprelu_l0_term_pushes_thresholds_up_near_the_threshold():
    sae = _jumprelu_identity(l0=1.0)
    t = sae.threshold.detach().clone()
    x = t + OFFSETS
    before = sae.log_threshold.detach().clone()
    with_l0, _ = sae.training_loss(x)
    sae.cfg.l0_coefficient = 0.0
    without, _ = sae.training_loss(x)
    opt = torch.optim.SGD([sae.log_threshold], lr=0.01)
    opt.zero_grad()
    (with_l0 - without).backward()  # the L0 term alone
    # d/dlog_t of mean_rows sum_j step(pre - t) = -(1 / bw) * (rows in window) / n_rows * t
    want = -(1 / BW) * IN_WINDOW.sum(0) / len(x) * t
    torch.testing.assert_close(sae.log_threshold.grad, want)
    opt.step()
    after = sae.log_threshold.detach()
    near = IN_WINDOW.any(0)
    assert (after[near] > before[near]).all()
    assert torch.equal(after[~near], before[~near])
