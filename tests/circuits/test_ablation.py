"""A graph's top features switched off in the real model against random ones (``ilab.circuits.ablation_control``),
on a tiny Gemma 3 with random transcoders: the sets are the ones asked for, the shifts are intervene's, and the
check compares them as documented."""

from __future__ import annotations

import pytest
import torch
from interplab.core.circuits.prune import node_shares

import interplab as ilab
from tests.circuits.bad_input import tiny_circuit


def test_top_features_are_the_most_influential_feature_nodes():
    graph = tiny_circuit()[2]
    top = ilab.circuits.top_features(graph, 4)
    shares = node_shares(graph.adjacency, graph.logit_probs)[: graph.n_features]
    got = [float(shares[graph.feature_index(*f)]) for f in top]
    assert got == sorted(got, reverse=True) and got[-1] >= float(torch.topk(shares, 4).values[-1])


def test_random_features_are_seeded_and_leave_out_the_excluded():
    graph = tiny_circuit()[2]
    top = ilab.circuits.top_features(graph, 5)
    a = ilab.circuits.random_features(graph, 5, seed=3, exclude=top)
    assert a == ilab.circuits.random_features(graph, 5, seed=3, exclude=top)
    assert a != ilab.circuits.random_features(graph, 5, seed=4, exclude=top)
    assert not set(a) & set(top) and len(set(a)) == 5


def test_ablation_control_shifts_are_intervene_shifts():
    model, tcs, graph = tiny_circuit()
    good, bad = graph.logit_ids[:2]
    res = ilab.circuits.ablation_control(model, tcs, graph, good, bad, n=3, n_random=2, seed=1)
    assert len(res.features) == 3 and len(res.random_sets) == 2 and all(len(s) == 3 for s in res.random_sets)
    ids = graph.logit_ids[:2]
    direct = ilab.circuits.intervene(model, tcs, graph.prompt, {f: 0.0 for f in res.random_sets[1]})
    shift = float(direct.logits_after[ids[0]] - direct.logits_after[ids[1]]) - res.clean
    assert res.random_shifts[1] == pytest.approx(shift, abs=1e-5)


@pytest.mark.parametrize(("top", "randoms", "passes"), [(2.0, [0.5, -0.4], True), (2.0, [0.5, -0.6], False)])
def test_passes_needs_ratio_times_every_random_shift(top, randoms, passes):
    res = ilab.circuits.AblationControl(1.0, [(0, 0, 0)], top, [[(0, 1, 0)]] * 2, randoms, ratio=4.0)
    assert res.passes is passes
