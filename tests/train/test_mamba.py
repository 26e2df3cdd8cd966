"""The tiny Mamba and GPT-2 of the Transformers-vs-Mambas notebook (core/train/mamba.py): the Mamba is causal,
its scan is the recurrence, both take named sites, and the off-by-one measure's prompts are what it says."""

from __future__ import annotations

import math

import pytest
import torch
from interplab.core.train import mamba

import interplab as ilab


def test_tiny_mamba_is_causal_a_later_token_changes_no_earlier_logit():
    torch.manual_seed(0)
    net = mamba.TinyMamba(16, d=16).eval()
    ids = torch.randint(0, 16, (2, 10))
    changed = ids.clone()
    changed[:, 6] = (changed[:, 6] + 1) % 16
    with torch.no_grad():
        before, after = net(ids), net(changed)
    torch.testing.assert_close(before[:, :6], after[:, :6])
    assert (before[:, 6:] - after[:, 6:]).abs().max() > 1e-4


def test_mamba_init_is_the_float64_values_rounded_so_its_fingerprint_holds_on_any_cpu(monkeypatch):
    # A job records the fingerprint of the initial weights; float32 exp/log differ in the last bit between CPUs.
    u_E = torch.linspace(0.0, 1.0, 32)
    monkeypatch.setattr(torch, "rand", lambda *shape, **kw: u_E.clone())
    block = mamba.MambaMixer(16, d_state=8)
    log_N = torch.log(torch.arange(1, 9, dtype=torch.float64)).float()
    assert torch.equal(block.A_log, log_N.repeat(32, 1))
    dt_E = torch.exp(u_E.double() * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
    assert torch.equal(block.dt_proj.bias.detach(), (dt_E + torch.log(-torch.expm1(-dt_E))).float())


def test_selective_scan_is_the_decaying_sum_of_the_inputs():
    u = torch.randn(2, 5, 3, 4)
    log_decay = -torch.rand(2, 5, 3, 4)
    c = torch.randn(2, 5, 4)
    want = torch.zeros(2, 5, 3)
    for t in range(5):
        for s in range(t + 1):
            weight = log_decay[:, s + 1 : t + 1].sum(1).exp()
            want[:, t] += torch.einsum("ben,bn->be", weight * u[:, s], c[:, t])
    torch.testing.assert_close(mamba.selective_scan(u, log_decay, c), want)


def test_the_mamba_mixer_output_site_is_the_mixer_modules_output():
    torch.manual_seed(0)
    net = mamba.TinyMamba(8, d=16).eval()
    model = ilab.load_model(net, sites=mamba.MAMBA_SITES)
    got = model.collect(["1 2 3 4"], sites="blocks.1.hook_attn_out")["blocks.1.hook_attn_out"]
    with torch.no_grad():
        x_BLD = net.blocks[0](net.embed(torch.tensor([[1, 2, 3, 4]])))
        want = net.blocks[1].mixer(net.blocks[1].norm(x_BLD))
    torch.testing.assert_close(got, want)


def test_induction_pairs_cut_after_the_second_copy_and_replace_the_first():
    task = ilab.train.repeated_tokens(n_tokens=16, half_len=6, n_rows=40)
    clean, corrupt, answers = mamba.induction_pairs(task, torch.ones(40, dtype=torch.bool), earlier=2)
    assert clean
    for c, k, a in zip(clean, corrupt, answers.tolist(), strict=True):
        c_ids, k_ids = [int(t) for t in c.split()], [int(t) for t in k.split()]
        assert len(c_ids) == 6 + 3 and c_ids[-1] == c_ids[2] and c_ids[3] == a
        assert [i for i in range(9) if c_ids[i] != k_ids[i]] == [2] and k_ids[2] not in c_ids[:6]


def test_induction_claim_needs_the_repeat_above_the_first_half_and_the_control():
    good = {"first_half": 0.03, "second_half": 0.95}
    chance = {"first_half": 0.03, "second_half": 0.04}
    assert mamba.induction_claim(good, chance)["holds"]
    assert not mamba.induction_claim(chance, chance)["holds"]
    assert not mamba.induction_claim(good, good)["holds"]


def test_impossible_sizes_are_refused_naming_the_valid_range():
    with pytest.raises(ValueError, match=r"n_tokens must be an integer >= 2, got 1"):
        mamba.TinyMamba(1)
    task = ilab.train.repeated_tokens(n_tokens=8, half_len=4, n_rows=4)
    with pytest.raises(ValueError, match=r"earlier must be an integer in 0\.\.2, got 3"):
        mamba.induction_pairs(task, torch.ones(4, dtype=torch.bool), earlier=3)
