"""The compact proof of a group MLP's accuracy: sound against brute force on small groups (trained, untrained
and with wrong permutations), exact for an exactly equivariant network, and the claim (sound, non-vacuous,
cheaper) holding for a trained network and failing for the same network untrained (the control)."""

from __future__ import annotations

import pytest
import torch
from interplab.core.train import group_proofs as gp

import interplab as ilab


def trained_s3(seed: int = 0) -> tuple[gp.GroupMLP, gp.GroupMLP]:
    """A tied S3 network trained on the whole table, and the same network untrained."""
    control = gp.GroupMLP("S3", hidden=12, tied=True, seed=seed)
    net = gp.GroupMLP("S3", hidden=12, tied=True, seed=seed)
    ilab.train.tiny(net, ilab.train.group_table("S3"), steps=300, lr=2e-2, weight_decay=0.1, eval_every=300,
                    progress=False)  # fmt: skip
    return net, control


@pytest.mark.parametrize("group,tied,hidden", [("S3", True, 12), ("S3", False, 16), ("Z5", True, 10)])
def test_every_proven_pair_is_answered_correctly(group, tied, hidden):
    net = gp.GroupMLP(group, hidden=hidden, tied=tied, seed=1)
    brute = gp.brute_force(net)
    shuffled = torch.stack([torch.randperm(hidden, generator=torch.Generator().manual_seed(g)) for g in range(net.n)])
    for perms in (gp.find_permutations(net), shuffled):
        proof = gp.prove(net, perms)
        assert (proof.proven_GG <= brute.correct_GG).all() and proof.bound <= brute.accuracy


def test_an_exactly_equivariant_network_is_proven_exactly_where_it_is_right():
    net = gp.GroupMLP("S3", hidden=18, tied=True, free_scale=0.0, seed=2)  # the group convolution alone
    proof, brute = gp.prove(net, gp.find_permutations(net)), gp.brute_force(net)
    assert float(proof.error_GG.abs().max()) < 1e-5
    assert torch.equal(proof.proven_GG, brute.correct_GG)


def test_the_claim_holds_for_a_trained_network_and_fails_for_it_untrained():
    net, control = trained_s3()
    trained = gp.claim(gp.prove(net, gp.find_permutations(net)), gp.brute_force(net))
    untrained = gp.claim(gp.prove(control, gp.find_permutations(control)), gp.brute_force(control))
    assert trained["holds"] and trained["accuracy"] == 1.0, trained
    assert untrained["sound"] and untrained["cheaper"] and not untrained["non_vacuous"], untrained
    assert not untrained["holds"]


def test_the_proof_counts_fewer_multiply_adds_than_brute_force():
    net = gp.GroupMLP("S4", hidden=96, tied=True)
    proof, brute = gp.prove(net, gp.find_permutations(net)), gp.brute_force(net)
    assert brute.cost == 24 * 24 * (2 * 96 + 96 * 24 + 24)
    assert proof.cost_parts["forward (e, b)"] * 24 == brute.cost and proof.cost < brute.cost / 4


def test_bad_input_is_refused_naming_the_valid_choices():
    with pytest.raises(ValueError, match=r"group='S7' is not one this builds: choose one of S3, S4, S5"):
        gp.GroupMLP("S7")
    with pytest.raises(ValueError, match=r"hidden=10 must be a multiple of \|S3\| = 6"):
        gp.GroupMLP("S3", hidden=10, tied=True)
    with pytest.raises(ValueError, match=r"free_scale=2 must be a number in \[0, 1\]"):
        gp.GroupMLP("S3", hidden=12, tied=True, free_scale=2)
    net = gp.GroupMLP("S3", hidden=12)
    with pytest.raises(ValueError, match=r"perms must be \[\|G\|, hidden\] = \[6, 12\], got \(6, 11\)"):
        gp.prove(net, torch.zeros(6, 11, dtype=torch.long))
    with pytest.raises(ValueError, match=r"one permutation of the hidden neurons per group element"):
        gp.prove(net, torch.zeros(6, 12, dtype=torch.long))
    with pytest.raises(ValueError, match=r"level=0 must be a fraction in \(0, 1\]"):
        gp.claim(gp.prove(net, gp.find_permutations(net)), gp.brute_force(net), level=0)
