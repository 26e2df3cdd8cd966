"""Agents beyond text: tiny Sokoban-like levels, an optimal solver, and a DRC-style planning agent.

The public namespace ``ilab.agents``. ``sokoban.py`` generates levels and solves them by breadth-first
search; ``drc.py`` is a ConvLSTM agent that thinks several ticks per step, its hidden state at each tick a
named site once loaded with ``ilab.load_model(agent, sites=agent.sites(), tokenizer=CELLS)``; ``plans.py``
makes its imitation data, plays it and fits per-square plan probes; ``interventions.py`` reads its ticks and
writes a route into them.

Example
-------
>>> import interplab as ilab
>>> levels = ilab.agents.generate(500, size=6, seed=0)
>>> res = ilab.train.tiny(ilab.agents.DRC(), ilab.agents.imitation_task(levels), steps=800, batch_size=256)
>>> ilab.agents.play(res.module, ilab.agents.generate(100, seed=1))["solved"].float().mean()
"""

from __future__ import annotations

from .drc import DRC
from .interventions import route_policy, tick_states
from .plans import (
    fit_square_probe,
    imitation_task,
    observation_features,
    other_first_squares,
    plan_labels,
    play,
    probe_scores,
    stepped_into,
)
from .sokoban import ACTIONS, CELLS, Level, future_squares, generate, solve, trajectory

__all__ = ["ACTIONS", "CELLS", "DRC", "Level", "fit_square_probe", "future_squares", "generate", "imitation_task",
           "observation_features", "other_first_squares", "plan_labels", "play", "probe_scores", "route_policy",
           "solve", "stepped_into", "tick_states", "trajectory"]  # fmt: skip
