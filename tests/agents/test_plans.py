"""The planning agent's pieces: its sites per tick, imitation data, play, plan probes and route edits."""

from __future__ import annotations

import pytest
import torch
from interplab.core.agents import interventions as iv
from interplab.core.agents import plans
from interplab.core.agents.drc import DRC
from interplab.core.agents.sokoban import CELLS, Level, generate, solve, trajectory

import interplab as ilab

LEVELS = generate(12, size=5, boxes=(1, 1), walls=(0, 2), seed=0)


def _oracle(ids_NS: torch.Tensor) -> torch.Tensor:
    """The solver as a policy: one-hot logits of its first action on each observation."""
    actions = [(solve(Level.from_ids(row)) or [0])[0] for row in ids_NS]  # a solved level: any move
    return torch.nn.functional.one_hot(torch.tensor(actions), 4).float()


def test_observations_round_trip_through_ids():
    assert all(Level.from_ids(lv.ids()) == lv for lv in LEVELS)


def test_the_solver_as_a_policy_solves_every_level_in_its_shortest_number_of_moves():
    out = plans.play(_oracle, LEVELS)
    assert bool(out["solved"].all())
    assert out["steps"].tolist() == [len(solve(lv)) for lv in LEVELS]
    assert out["paths"][0] == [s.agent for s in trajectory(LEVELS[0], solve(LEVELS[0]))]


def test_imitation_rows_are_the_solution_states_with_whole_levels_held_out():
    task = plans.imitation_task(LEVELS, train_frac=0.75)
    assert len(task.inputs_NL) == sum(len(solve(lv)) for lv in LEVELS)
    assert task.inputs_NL.shape[1] == 25 and task.n_classes <= 4
    level_of_row = torch.cat([torch.full((len(solve(lv)),), i) for i, lv in enumerate(LEVELS)])
    held = set(level_of_row[~task.train_N].tolist())
    assert len(held) == 3 and not held & set(level_of_row[task.train_N].tolist())


def test_each_tick_is_a_site_and_an_edit_there_changes_the_action():
    agent = DRC(size=5, channels=4, n_layers=2, ticks=3, max_ticks=4)
    model = ilab.load_model(agent, sites=agent.sites(), tokenizer=CELLS)
    ids_NS = torch.stack([lv.ids() for lv in LEVELS])
    states = iv.tick_states(model, ids_NS)
    assert [tuple(h.shape) for h in states] == [(12, 25, 4)] * 3
    with torch.no_grad():
        plain = agent(ids_NS)
    none = torch.zeros(12, 25, dtype=torch.bool)
    everywhere = torch.ones(12, 25, dtype=torch.bool)
    direction = torch.ones(4)
    assert torch.allclose(iv.route_policy(model, direction, none, none, 5.0)(ids_NS), plain, atol=1e-6)
    assert not torch.allclose(iv.route_policy(model, direction, everywhere, none, 5.0)(ids_NS), plain, atol=1e-3)


def test_a_square_probe_finds_a_planted_direction_and_the_one_hot_baseline_sees_only_cells():
    gen = torch.Generator().manual_seed(0)
    y_NS = torch.rand(64, 25, generator=gen) < 0.2
    x_NSD = torch.randn(64, 25, 6, generator=gen) + 3.0 * y_NS[..., None].float() * torch.tensor([1.0, 0, 0, 0, 0, 0])
    probe = plans.fit_square_probe(x_NSD[:48], y_NS[:48])
    assert plans.probe_scores(probe, x_NSD[48:], y_NS[48:])["f1"] > 0.8
    noise = plans.fit_square_probe(torch.randn(64, 25, 6, generator=gen)[:48], y_NS[:48])
    assert plans.probe_scores(noise, x_NSD[48:], y_NS[48:])["f1"] < 0.5
    assert plans.observation_features(LEVELS[0].ids()[None]).shape == (1, 25, len(CELLS))


def test_other_first_squares_are_free_neighbours_the_agent_did_not_choose():
    actions = torch.tensor([solve(lv)[0] for lv in LEVELS])
    squares, has = plans.other_first_squares(LEVELS, actions)
    assert bool(has.all()) and squares.sum(1).eq(1).all()
    assert not plans.stepped_into(LEVELS, actions, squares).any()


@pytest.mark.parametrize(
    ("kwargs", "message"), [({"head": "pool"}, r"head='pool' is not one of agent, flat"), ({"ticks": 9}, r"ticks")]
)
def test_bad_agent_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DRC(**kwargs)
