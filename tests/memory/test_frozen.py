"""frozen_weights (core/memory/frozen.py): the flag off inside, back on every exit, untouched where it was off."""

from __future__ import annotations

import pytest
import torch
from interplab.core.memory import frozen_weights


def test_weights_are_frozen_inside_and_restored_after_an_error():
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    net[1].bias.requires_grad_(False)  # already frozen: stays so
    with pytest.raises(RuntimeError, match="boom"), frozen_weights(net):
        assert not any(p.requires_grad for p in net.parameters())
        raise RuntimeError("boom")
    assert [p.requires_grad for p in net.parameters()] == [True, True, True, False]


def test_input_gradients_still_flow_through_frozen_weights():
    net = torch.nn.Linear(3, 1)
    x = torch.randn(2, 3, requires_grad=True)
    with frozen_weights(net):
        (grad,) = torch.autograd.grad(net(x).sum(), [x])
    torch.testing.assert_close(grad, net.weight.detach().expand(2, 3))
