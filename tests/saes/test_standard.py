"""The standard (ReLU) SAE's encoder, by its formula."""

from __future__ import annotations

import pytest
import torch
from interplab.core.saes import SAE

from tests.saes.helpers import pre_by_hand, randomize


@pytest.mark.parametrize("apply_b_dec", [True, False])
def test_standard_is_relu_of_affine(apply_b_dec):
    sae = randomize(SAE.create("standard", d_in=8, d_sae=24, apply_b_dec_to_input=apply_b_dec))
    x = torch.randn(10, 8)
    pre = pre_by_hand(sae, x)
    torch.testing.assert_close(sae.encode(x), pre.clamp_min(0))
    assert (pre < 0).any() and (pre > 0).any()
