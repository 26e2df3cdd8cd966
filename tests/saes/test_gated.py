"""The gated SAE's encoder: the gate's sign times the magnitude path."""

from __future__ import annotations

import pytest
import torch
from interplab.core.saes import SAE

from tests.saes.helpers import randomize


@pytest.mark.parametrize("apply_b_dec", [True, False])
def test_gated_is_gate_times_magnitude(apply_b_dec):
    sae = randomize(SAE.create("gated", d_in=8, d_sae=24, apply_b_dec_to_input=apply_b_dec), scale=0.7)
    x = torch.randn(40, 8)
    x_in = x - sae.b_dec if apply_b_dec else x
    gate = (x_in @ sae.W_enc + sae.b_enc) > 0
    magnitude = (x_in @ (sae.W_enc * sae.r_mag.exp()[None, :]) + sae.b_mag).relu()
    acts = sae.encode(x)
    torch.testing.assert_close(acts, gate * magnitude)
    # the gate matters: some latents have a positive magnitude but a closed gate
    assert ((magnitude > 0) & ~gate).any()
