"""Bad inputs of ilab.agents: impossible boards, wrong shapes and unknown settings, refused before any work."""

from __future__ import annotations

import torch

import interplab as ilab
from tests.contracts.rows import Row, T, V

A = ilab.agents
LEVEL = A.Level(4, frozenset(), frozenset({2}), (1,), 0)
SIX = A.Level(6, frozenset(), frozenset({2}), (1,), 0)
IDS = torch.zeros(2, 16, dtype=torch.long)


def _model() -> ilab.Model:
    agent = A.DRC(size=4, channels=2, n_layers=1, ticks=2, max_ticks=2)
    return ilab.load_model(agent, sites=agent.sites(), tokenizer=A.CELLS)


ROWS: list[Row] = [
    Row("ilab.agents.generate", lambda c: A.generate(1, size=2), V, r"size must be an integer in 4\.\.10, got 2"),
    Row("ilab.agents.generate", lambda c: A.generate(1, size=4, walls=(0, 6), boxes=(2, 2)), V, r"room for at most 8"),
    Row("ilab.agents.generate", lambda c: A.generate(1, boxes=(2, 1)), V, r"boxes=\(2, 1\) must be a \(least, most\)"),
    Row("ilab.agents.solve", lambda c: A.solve("#@$."), T, r"level must be a Level .* got str"),
    Row("ilab.agents.trajectory", lambda c: A.trajectory(LEVEL, [7]), V, r"action=7 is not a move: choose 0\.\.3"),
    Row("ilab.agents.future_squares", lambda c: A.future_squares(LEVEL, [-1]), V, r"action=-1 is not a move"),
    Row("ilab.agents.Level.step", lambda c: LEVEL.step(4), V, r"action=4 is not a move: choose 0\.\.3 \(up, down"),
    Row(
        "ilab.agents.Level.from_ids", lambda c: A.Level.from_ids(torch.zeros(16, dtype=torch.long)), V, r"with 0 agents"
    ),
    Row("ilab.agents.DRC", lambda c: A.DRC(head="pool"), V, r"head='pool' is not one of agent, flat"),
    Row("ilab.agents.DRC", lambda c: A.DRC(ticks=9, max_ticks=8), V, r"ticks must be an integer in 1\.\.8, got 9"),
    Row(
        "ilab.agents.DRC.forward",
        lambda c: A.DRC(size=4)(torch.zeros(1, 20, dtype=torch.long)),
        V,
        r"20 cells does not fit a 4x4 board",
    ),
    Row("ilab.agents.imitation_task", lambda c: A.imitation_task([]), T, r"levels must be a non-empty list of Level"),
    Row(
        "ilab.agents.imitation_task", lambda c: A.imitation_task([LEVEL, SIX]), V, r"one board size; got sizes \[4, 6\]"
    ),
    Row("ilab.agents.imitation_task", lambda c: A.imitation_task([LEVEL], train_frac=2), V, r"train_frac=2 must be"),
    Row(
        "ilab.agents.play",
        lambda c: A.play(lambda ids: torch.zeros(len(ids), 4), [LEVEL], max_steps=0),
        V,
        r"max_steps must be a positive integer, got 0",
    ),
    Row("ilab.agents.plan_labels", lambda c: A.plan_labels("levels"), T, r"levels must be a non-empty list of Level"),
    Row(
        "ilab.agents.observation_features",
        lambda c: A.observation_features(IDS.float()),
        V,
        r"ids_NS must be cell ids \[N, S\] \(torch\.long\)",
    ),
    Row(
        "ilab.agents.fit_square_probe",
        lambda c: A.fit_square_probe(torch.zeros(2, 16, 3), torch.zeros(2, 15)),
        V,
        r"x_NSD must be \[N, S, D\] and y_NS \[N, S\] of the same N, S; got \(2, 16, 3\) and \(2, 15\)",
    ),
    Row(
        "ilab.agents.probe_scores",
        lambda c: A.probe_scores((torch.zeros(3), torch.zeros(())), torch.zeros(2, 16, 4), torch.zeros(2, 16)),
        V,
        r"x_NSD must be \[N, S, 3\] \(the probe's width\)",
    ),
    Row(
        "ilab.agents.other_first_squares",
        lambda c: A.other_first_squares([LEVEL], torch.zeros(3)),
        V,
        r"actions_N must be one action per level \[1\]",
    ),
    Row(
        "ilab.agents.stepped_into",
        lambda c: A.stepped_into([], torch.zeros(0), torch.zeros(0, 16)),
        T,
        r"levels must be a non-empty list",
    ),
    Row(
        "ilab.agents.tick_states",
        lambda c: A.tick_states(_model(), IDS, kind="resid_pre"),
        V,
        r"kind='resid_pre' is not a DRC site; choose resid_post",
    ),
    Row("ilab.agents.tick_states", lambda c: A.tick_states(c.model, IDS), V, r"has no ticks attribute"),
    Row(
        "ilab.agents.route_policy",
        lambda c: A.route_policy(_model(), torch.zeros(2), IDS.bool(), IDS.bool(), 1.0),
        V,
        r"dir_D must be a non-zero vector",
    ),
]

EXEMPT = {
    "ilab.agents.Level": "a frozen record of cell indices; generate and Level.from_ids check the levels they build",
}
