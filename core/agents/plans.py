"""What a planning agent is trained on and how it is read: imitation data, play, plan probes, route edits.

:func:`imitation_task` turns levels into a :class:`~interplab.core.train.tasks.Task` (every state on each
level's shortest solution, answer the solver's action) for ``ilab.train.tiny``. :func:`play` runs an agent
on levels (batched, greedy). :func:`plan_labels` gives, for the states an agent meets, the squares the agent
and the boxes will pass through on the solver's plan; :func:`fit_square_probe` and :func:`probe_scores` fit
and score one linear probe shared by every square on [cells, features] rows (a hidden state at a tick, or the
observation's one-hot cells as the baseline).

Example
-------
>>> task = imitation_task(generate(800, seed=0))
>>> res = ilab.train.tiny(DRC(), task, steps=1500, batch_size=256, path="sokoban-drc/")
>>> play(res.module, generate(100, seed=1))["solved"].mean()
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..checks import check_int
from ..train.tasks import Task
from .sokoban import ACTIONS, CELLS, Level, future_squares, neighbour, solve, trajectory


def _check_levels(levels: Sequence[Level]) -> list[Level]:
    levels = list(levels) if isinstance(levels, (list, tuple)) else levels
    if not isinstance(levels, list) or not levels or not all(isinstance(lv, Level) for lv in levels):
        raise TypeError(f"levels must be a non-empty list of Level (from ilab.agents.generate), got {levels!r:.80}.")
    if len({lv.size for lv in levels}) > 1:
        raise ValueError(f"levels must share one board size; got sizes {sorted({lv.size for lv in levels})}.")
    return levels


def imitation_task(levels: Sequence[Level], train_frac: float = 0.9, seed: int = 0) -> Task:
    """Every state on each level's shortest solution with the solver's action; ``train_frac`` of the levels train.

    Held-out rows are whole levels (drawn by ``seed``), so held-out accuracy is on boards never seen.

    >>> imitation_task(generate(10)).inputs_NL.shape
    torch.Size([N, 36])
    """
    levels = _check_levels(levels)
    if not isinstance(train_frac, (int, float)) or isinstance(train_frac, bool) or not 0 < train_frac <= 1:
        raise ValueError(f"train_frac={train_frac!r} must be a fraction in (0, 1] of the {len(levels)} levels.")
    order = torch.randperm(len(levels), generator=torch.Generator().manual_seed(seed)).tolist()
    held = set(order[max(1, round(len(levels) * train_frac)) :])
    rows, targets, train = [], [], []
    for i, level in enumerate(levels):
        path = solve(level) or []
        for state, action in zip(trajectory(level, path), path):
            rows.append(state.ids())
            targets.append(action)
            train.append(i not in held)
    digest = hashlib.sha256("\n".join(lv.text() for lv in levels).encode()).hexdigest()[:16]
    return Task("sokoban", list(CELLS), torch.stack(rows), torch.tensor(targets), torch.tensor(train),
                {"levels": len(levels), "digest": digest, "train_frac": train_frac, "seed": seed})  # fmt: skip


def play(policy: Callable[[torch.Tensor], torch.Tensor], levels: Sequence[Level], max_steps: int | None = None,
         first_move: Callable[[torch.Tensor], torch.Tensor] | None = None) -> dict[str, Any]:  # fmt: skip
    """Run ``policy`` (ids [B, cells] -> logits [B, 4]) greedily on every level at once.

    Only the levels still unsolved are passed on each step. ``first_move`` (same form) chooses the first step in
    place of ``policy`` (an edited agent, given every level that starts unsolved). Returns
    ``solved`` (bool [levels]), ``steps`` (moves taken) and ``paths`` (the agent's cells, one list per level).
    ``max_steps`` defaults to twice the longest shortest solution plus 4.

    >>> play(agent, generate(50, seed=1))["solved"].float().mean()
    """
    levels = _check_levels(levels)
    if max_steps is None:
        max_steps = 2 * max(len(solve(lv) or []) for lv in levels) + 4
    max_steps = check_int("max_steps", max_steps, 1)
    current = list(levels)
    paths = [[lv.agent] for lv in levels]
    done = torch.tensor([lv.solved for lv in levels])
    steps = torch.zeros(len(levels), dtype=torch.long)
    for step in range(max_steps):
        playing = (~done).nonzero().flatten().tolist()
        if not playing:
            break
        chooser = first_move if step == 0 and first_move is not None else policy
        with torch.no_grad():
            actions = chooser(torch.stack([current[i].ids() for i in playing])).argmax(-1).tolist()
        for i, action in zip(playing, actions, strict=True):
            current[i] = current[i].step(action)
            paths[i].append(current[i].agent)
            steps[i] += 1
            done[i] = current[i].solved
    return {"solved": done, "steps": steps, "paths": paths}


def plan_labels(levels: Sequence[Level]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The observations [N, cells] of the levels' start states and the solver's planned squares.

    ``agent_NS`` and ``box_NS`` (bool [N, cells]) say which squares the agent and the boxes will pass on a
    shortest solution: the targets of the plan probes.
    """
    levels = _check_levels(levels)
    ids, agent, box = [], [], []
    for level in levels:
        a, b = future_squares(level, solve(level) or [])
        ids.append(level.ids())
        agent.append(a)
        box.append(b)
    return torch.stack(ids), torch.stack(agent), torch.stack(box)


def observation_features(ids_NS: torch.Tensor) -> torch.Tensor:
    """The observation-only baseline's rows: each square's one-hot cell type [N, S, 7] (what a probe on the
    observation at that square sees)."""
    if not isinstance(ids_NS, torch.Tensor) or ids_NS.ndim != 2 or ids_NS.dtype != torch.long:
        raise ValueError(f"ids_NS must be cell ids [N, S] (torch.long), got {getattr(ids_NS, 'shape', ids_NS)!r}.")
    return torch.nn.functional.one_hot(ids_NS, len(CELLS)).float()


def fit_square_probe(x_NSD: torch.Tensor, y_NS: torch.Tensor, steps: int = 300, weight_decay: float = 1e-3,
                     seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """One logistic probe shared by every square: weights [D] and bias [] from rows [N, S, D], labels [N, S].

    Positive squares are weighted up to balance the classes (plans are few squares of a board).
    """
    if x_NSD.ndim != 3 or tuple(y_NS.shape) != tuple(x_NSD.shape[:2]):
        raise ValueError(f"x_NSD must be [N, S, D] and y_NS [N, S] of the same N, S; got {tuple(x_NSD.shape)} and "
                         f"{tuple(y_NS.shape)}.")  # fmt: skip
    x_TD, y_T = x_NSD.flatten(0, 1).float(), y_NS.flatten().float()
    mean_D, std_D = x_TD.mean(0), x_TD.std(0).clamp_min(1e-6)
    z_TD = (x_TD - mean_D) / std_D
    pos_weight = ((1 - y_T).sum() / y_T.sum().clamp_min(1)).clamp(max=100)
    gen = torch.Generator().manual_seed(seed)
    w_D = (torch.randn(z_TD.shape[1], generator=gen) * 0.01).requires_grad_()
    b = torch.zeros((), requires_grad=True)
    opt = torch.optim.LBFGS([w_D, b], lr=0.5, max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(z_TD @ w_D + b, y_T, pos_weight=pos_weight)
        loss = loss + weight_decay * (w_D**2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    w_raw = (w_D / std_D).detach()
    return w_raw, (b - (mean_D * w_raw).sum()).detach()


def probe_scores(probe: tuple[torch.Tensor, torch.Tensor], x_NSD: torch.Tensor, y_NS: torch.Tensor) -> dict[str, float]:
    """The probe's F1 and balanced accuracy on rows ``x_NSD`` against labels ``y_NS``."""
    w_D, b = probe
    if x_NSD.ndim != 3 or tuple(y_NS.shape) != tuple(x_NSD.shape[:2]) or x_NSD.shape[2] != len(w_D):
        raise ValueError(f"x_NSD must be [N, S, {len(w_D)}] (the probe's width) and y_NS [N, S]; got "
                         f"{tuple(x_NSD.shape)} and {tuple(y_NS.shape)}.")  # fmt: skip
    pred_T = (x_NSD.flatten(0, 1).float() @ w_D + b) > 0
    y_T = y_NS.flatten().bool()
    tp = float((pred_T & y_T).sum())
    precision = tp / max(float(pred_T.sum()), 1.0)
    recall = tp / max(float(y_T.sum()), 1.0)
    tnr = float((~pred_T & ~y_T).sum()) / max(float((~y_T).sum()), 1.0)
    f1 = 2 * precision * recall / max(precision + recall, 1e-9)
    return {"f1": f1, "balanced_accuracy": (recall + tnr) / 2}


def other_first_squares(levels: Sequence[Level], actions_N: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each level, a free square next to the agent that ``actions_N`` does not step on, as a mask [N, S].

    The square is the first free one (no wall, no box, on the board) in :data:`ACTIONS` order other than the
    chosen move's; ``has_N`` says which levels have one. The route an edit writes instead of the agent's.
    """
    levels = _check_levels(levels)
    if not isinstance(actions_N, torch.Tensor) or tuple(actions_N.shape) != (len(levels),):
        raise ValueError(f"actions_N must be one action per level [{len(levels)}], got "
                         f"{getattr(actions_N, 'shape', actions_N)!r}.")  # fmt: skip
    square_NS = torch.zeros(len(levels), levels[0].size ** 2, dtype=torch.bool)
    for n, level in enumerate(levels):
        for action in range(len(ACTIONS)):
            cell = neighbour(level.size, level.agent, action)
            if action != int(actions_N[n]) and cell is not None and cell not in level.walls and cell not in level.boxes:
                square_NS[n, cell] = True
                break
    return square_NS, square_NS.any(1)


def stepped_into(levels: Sequence[Level], actions_N: torch.Tensor, squares_NS: torch.Tensor) -> torch.Tensor:
    """Whether each level's move ``actions_N`` takes the agent onto one of its ``squares_NS`` (bool [N])."""
    levels = _check_levels(levels)
    out = torch.zeros(len(levels), dtype=torch.bool)
    for n, level in enumerate(levels):
        cell = neighbour(level.size, level.agent, int(actions_N[n]))
        out[n] = cell is not None and bool(squares_NS[n, cell])
    return out
