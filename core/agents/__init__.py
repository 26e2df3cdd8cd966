"""Agents beyond text: tiny Sokoban-like levels, an optimal solver, and a DRC-style planning agent.

The public namespace ``ilab.agents``. ``sokoban.py`` generates levels and solves them by breadth-first
search; ``drc.py`` is a ConvLSTM agent that thinks several ticks per step, its hidden state at each tick a
named site once loaded with ``ilab.load_model(agent, sites=agent.sites(), tokenizer=CELLS)``.

Example
-------
>>> import interplab as ilab
>>> levels = ilab.agents.generate(500, size=6, seed=0)
>>> ilab.agents.solve(levels[0])
"""

from __future__ import annotations

from .sokoban import ACTIONS, CELLS, Level, future_squares, generate, solve, trajectory

__all__ = ["ACTIONS", "CELLS", "Level", "future_squares", "generate", "solve", "trajectory"]
