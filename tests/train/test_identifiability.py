"""Circuits and aligned algorithms of tiny Boolean MLPs: exact counts on a hand-set XOR network, and the
identifiability claim holding for trained networks and failing for the same networks untrained (the control)."""

from __future__ import annotations

import pytest
import torch
from interplab.core.train import identifiability as idf
from torch import nn

import interplab as ilab

XOR = ilab.train.boolean("xor")


class XorMLP(nn.Module):
    """2 -> 3 -> 3 -> 2 with ReLU: the notebook's architecture."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.out = nn.Linear(2, 3), nn.Linear(3, 3), nn.Linear(3, 2)

    def forward(self, ids_BL: torch.Tensor) -> torch.Tensor:
        return self.out(self.l2(self.l1(ids_BL.float()).relu()).relu())


def hand_set() -> XorMLP:
    """XOR by hand: h = [a OR b, a AND b, 0]; out1 = h0 - 2 h1 (xor), out0 = 0.5 - out1."""
    net = XorMLP()
    with torch.no_grad():
        for layer in (net.l1, net.l2, net.out):
            layer.weight.zero_()
            layer.bias.zero_()
        net.l1.weight[0] = torch.tensor([1.0, 1.0])
        net.l1.weight[1] = torch.tensor([1.0, 1.0])
        net.l1.bias[1] = -1.0
        net.l2.weight[0, 0], net.l2.weight[0, 1] = 1.0, -2.0  # xor in neuron 0 of layer 2
        net.out.weight[1, 0], net.out.weight[0, 0] = 1.0, -1.0
        net.out.bias[0] = 0.5
    return net


def test_circuits_of_a_hand_set_network_are_the_masks_keeping_its_path():
    net = hand_set()
    counts = idf.circuits(net, XOR)
    assert counts.n_edges == 21 and counts.evaluations == 4 * 2**21
    # the 4 input and 2 middle edges of the path are needed, either output edge is enough (3 ways), the 13
    # other weights are free: 3 * 2**13 masks, 2 of them minimal (one output edge each)
    assert counts.replicating == 3 * 2**13 and counts.minimal == 2


def test_a_hand_set_network_aligns_with_or_and_and():
    alignment = idf.aligned_algorithms(hand_set(), XOR)
    or_gate, and_gate = 0b1110, 0b1000  # truth tables, bit 2a + b
    assert any(alg[:2] == (and_gate, or_gate) and layer == 0 and tuple(sets) == ((1,), (0,))
               for alg, layer, *sets in alignment.mappings)  # fmt: skip
    assert alignment.candidates == len(idf.candidate_algorithms(XOR))


def trained(seed: int) -> tuple[XorMLP, XorMLP]:
    torch.manual_seed(seed)
    control = XorMLP()
    torch.manual_seed(seed)
    net = XorMLP()
    ilab.train.tiny(net, XOR, steps=500, lr=3e-2, eval_every=500, progress=False)
    return net, control


def test_the_claim_holds_for_trained_networks_and_fails_for_the_same_networks_untrained():
    pairs = [trained(seed) for seed in (0, 1, 4)]  # seeds that learn XOR in 500 steps
    nets, controls = [p[0] for p in pairs], [p[1] for p in pairs]
    assert idf.non_identifiable([idf.circuits(n, XOR) for n in nets], [idf.aligned_algorithms(n, XOR) for n in nets])
    assert not idf.non_identifiable([idf.circuits(n, XOR) for n in controls],
                                    [idf.aligned_algorithms(n, XOR) for n in controls])  # fmt: skip


def test_too_many_weights_are_refused_before_enumerating():
    with pytest.raises(ValueError, match=r"has 40 weights: 2\*\*40 masks is too many"):
        idf.circuits(nn.Sequential(nn.Linear(2, 8), nn.Linear(8, 3)), XOR)
