"""The planning notebook's main claims hold for the shipped agent and fail with their controls.

The agent is the one ``nbs/papers/planning_agent.ipynb`` trains into ``nbs/papers/planning_agent_run/``
(its weights read from the job's checkpoint). Controls: the same agent untrained (plan probes no better
than the observation baseline), random directions of the probe's norm (no route written).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from interplab.core.storage.checkpoint import read_state_file

import interplab as ilab

A = ilab.agents
RUN = Path(__file__).resolve().parents[2] / "nbs" / "papers" / "planning_agent_run" / "checkpoint.safetensors"


def _agent(trained: bool) -> A.DRC:
    agent = A.DRC(size=6, channels=16, n_layers=2, ticks=3, head="agent", seed=0)
    if trained:
        agent.load_state_dict(read_state_file(RUN, "train.tiny")[1]["weights"])
    return agent.eval()


@pytest.fixture(scope="module")
def levels():
    levels = A.generate(300, seed=2)
    return (levels, *A.plan_labels(levels))


def _probe_gain(agent: A.DRC, levels) -> float:
    """Held-out balanced accuracy of the tick-0 plan probe (both layers) minus the observation baseline's."""
    _, ids_NS, agent_NS, _ = levels
    model = ilab.load_model(agent, sites=agent.sites(), tokenizer=A.CELLS)
    x_NSD = torch.cat([A.tick_states(model, ids_NS, kind="resid_mid")[0], A.tick_states(model, ids_NS)[0]], -1)
    obs_NSD = A.observation_features(ids_NS)
    fit, held = slice(0, 200), slice(200, 300)
    hidden = A.probe_scores(A.fit_square_probe(x_NSD[fit], agent_NS[fit]), x_NSD[held], agent_NS[held])
    base = A.probe_scores(A.fit_square_probe(obs_NSD[fit], agent_NS[fit]), obs_NSD[held], agent_NS[held])
    return hidden["balanced_accuracy"] - base["balanced_accuracy"]


def test_plan_probes_beat_the_observation_and_the_untrained_agent(levels):
    trained, untrained = _probe_gain(_agent(True), levels), _probe_gain(_agent(False), levels)
    assert trained > 0.05 and trained > untrained + 0.05


def _edit_rate(model, levels, direction: torch.Tensor, w_D, b) -> float:
    edit_levels, ids_NS = levels[0][200:], levels[1][200:]
    with torch.no_grad():
        chosen = model.module(ids_NS).argmax(-1)
    square_NS, has_N = A.other_first_squares(edit_levels, chosen)
    plan_NS = (A.tick_states(model, ids_NS)[-1] @ w_D + b) > 0
    policy = A.route_policy(model, direction, square_NS, plan_NS & ~square_NS, 8.0)
    return float(A.stepped_into(edit_levels, policy(ids_NS).argmax(-1), square_NS)[has_N].float().mean())


def test_a_written_route_moves_the_agent_and_a_random_direction_of_its_norm_does_not(levels):
    agent = _agent(True)
    model = ilab.load_model(agent, sites=agent.sites(), tokenizer=A.CELLS)
    _, ids_NS, agent_NS, _ = levels
    w_D, b = A.fit_square_probe(A.tick_states(model, ids_NS[:200])[-1], agent_NS[:200])
    gen = torch.Generator().manual_seed(0)
    randoms = [_edit_rate(model, levels, torch.randn(len(w_D), generator=gen), w_D, b) for _ in range(5)]
    probe = _edit_rate(model, levels, w_D, w_D, b)
    assert probe > sum(randoms) / len(randoms) + 0.1, (probe, randoms)
    assert max(randoms) < probe
