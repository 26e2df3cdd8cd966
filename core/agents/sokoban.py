"""Tiny Sokoban-like levels: a seeded generator, an optimal BFS solver, and the future squares of a plan.

A board is ``size x size`` cells; everything outside it is wall. A level has a few inner walls, one or two
boxes and as many targets, and the agent. The agent moves up, down, left or right (:data:`ACTIONS`); moving
into a box pushes it when the cell behind it is free. A level is solved when every box stands on a target.

Levels are made backwards (boxes start on their targets and the agent pulls them away), so every level is
solvable, then :func:`solve` finds a shortest solution by breadth-first search over (agent, boxes) states.
Observations are token ids, one per cell in reading order (:data:`CELLS` names them), the texts a model loaded
with ``ilab.load_model(agent, sites=..., tokenizer=CELLS)`` reads.

Example
-------
>>> levels = generate(100, size=6, boxes=(1, 2), seed=0)
>>> path = solve(levels[0])                     # the actions of a shortest solution
>>> levels[0].render()
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..checks import check_int

#: Token names of a cell: floor, wall, target, box, box on target, agent, agent on target.
CELLS = ["_", "#", ".", "$", "*", "@", "+"]
FLOOR, WALL, TARGET, BOX, BOX_ON_TARGET, AGENT, AGENT_ON_TARGET = range(len(CELLS))
#: The agent's moves as (row, column) steps, in the order of the policy's logits.
ACTIONS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
_STEPS = list(ACTIONS.values())
MIN_SIZE, MAX_SIZE = 4, 10
MAX_BOXES = 3
#: The most states one search visits before giving up (a level it cannot solve within is refused).
MAX_STATES = 200_000


@dataclass(frozen=True)
class Level:
    """One level: ``walls`` and ``targets`` (sets of cell indices, row-major), ``boxes`` and ``agent`` cells."""

    size: int
    walls: frozenset[int]
    targets: frozenset[int]
    boxes: tuple[int, ...]
    agent: int

    def ids(self) -> torch.Tensor:
        """The observation: one token id per cell (indices into :data:`CELLS`), shape [size * size]."""
        grid = [FLOOR] * (self.size * self.size)
        for c in self.walls:
            grid[c] = WALL
        for c in self.targets:
            grid[c] = TARGET
        for c in self.boxes:
            grid[c] = BOX_ON_TARGET if c in self.targets else BOX
        grid[self.agent] = AGENT_ON_TARGET if self.agent in self.targets else AGENT
        return torch.tensor(grid, dtype=torch.long)

    @classmethod
    def from_ids(cls, ids_S: torch.Tensor) -> Level:
        """The level an observation shows (token ids [size * size], one agent)."""
        flat = torch.as_tensor(ids_S).flatten().tolist()
        size = round(len(flat) ** 0.5)
        agents = [i for i, v in enumerate(flat) if v in (AGENT, AGENT_ON_TARGET)]
        if size * size != len(flat) or len(agents) != 1 or not all(0 <= v < len(CELLS) for v in flat):
            raise ValueError(f"An observation is {size}x{size} cell ids in 0..{len(CELLS) - 1} with one agent; got "
                             f"{len(flat)} values with {len(agents)} agents.")  # fmt: skip
        pick = lambda kinds: frozenset(i for i, v in enumerate(flat) if v in kinds)  # noqa: E731
        return cls(size, pick({WALL}), pick({TARGET, BOX_ON_TARGET, AGENT_ON_TARGET}),
                   tuple(sorted(pick({BOX, BOX_ON_TARGET}))), agents[0])  # fmt: skip

    def text(self) -> str:
        """The observation as token names separated by spaces (what a loaded agent reads)."""
        return " ".join(CELLS[i] for i in self.ids().tolist())

    def render(self) -> str:
        """The board as rows of characters, for reading."""
        names = [CELLS[i] for i in self.ids().tolist()]
        return "\n".join("".join(names[r * self.size : (r + 1) * self.size]) for r in range(self.size))

    @property
    def solved(self) -> bool:
        """Whether every box stands on a target."""
        return all(b in self.targets for b in self.boxes)

    def step(self, action: int) -> Level:
        """The level after ``action`` (an index into :data:`ACTIONS`); a blocked move leaves it as it is."""
        if not isinstance(action, int) or isinstance(action, bool) or not 0 <= action < len(ACTIONS):
            raise ValueError(f"action={action!r} is not a move: choose 0..3 ({', '.join(ACTIONS)}).")
        nxt = move(self.size, self.walls, self.agent, self.boxes, action)
        if nxt is None:
            return self
        return Level(self.size, self.walls, self.targets, nxt[1], nxt[0])


def neighbour(size: int, cell: int, action: int) -> int | None:
    """The cell one ``action`` away from ``cell`` on a ``size x size`` board, or None off the board."""
    dr, dc = _STEPS[action]
    r, c = divmod(cell, size)
    r, c = r + dr, c + dc
    return r * size + c if 0 <= r < size and 0 <= c < size else None


def move(size: int, walls: frozenset[int], agent: int, boxes: tuple[int, ...],
         action: int) -> tuple[int, tuple[int, ...]] | None:  # fmt: skip
    """The (agent, sorted boxes) after ``action``, or None when a wall or a blocked box stops it."""
    to = neighbour(size, agent, action)
    if to is None or to in walls:
        return None
    if to not in boxes:
        return to, boxes
    beyond = neighbour(size, to, action)
    if beyond is None or beyond in walls or beyond in boxes:
        return None
    return to, tuple(sorted(beyond if b == to else b for b in boxes))


def _dead(size: int, walls: frozenset[int], targets: frozenset[int], box: int) -> bool:
    """A box off target in a corner can never move again."""
    if box in targets:
        return False

    def blocked(action: int) -> bool:
        n = neighbour(size, box, action)
        return n is None or n in walls

    return (blocked(0) or blocked(1)) and (blocked(2) or blocked(3))


def solve(level: Level) -> list[int] | None:
    """A shortest solution (action indices) of ``level`` by breadth-first search; None when there is none.

    Ties between equally short solutions go to the first action in :data:`ACTIONS` order.

    >>> solve(Level(4, frozenset(), frozenset({2}), (1,), 0))
    [3]
    """
    if not isinstance(level, Level):
        raise TypeError(f"level must be a Level (from ilab.agents.generate or Level(...)), got {type(level).__name__}.")
    start = (level.agent, tuple(sorted(level.boxes)))
    parent: dict[tuple[int, tuple[int, ...]], tuple[tuple[int, tuple[int, ...]], int] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if all(b in level.targets for b in state[1]):
            return _path(parent, state)
        if len(parent) > MAX_STATES:
            return None
        for action in range(len(_STEPS)):
            nxt = move(level.size, level.walls, state[0], state[1], action)
            if nxt is None or nxt in parent:
                continue
            if nxt[1] != state[1] and _dead(level.size, level.walls, level.targets, _moved(state, nxt)):
                continue
            parent[nxt] = (state, action)
            queue.append(nxt)
    return None


def _moved(state: tuple[int, tuple[int, ...]], nxt: tuple[int, tuple[int, ...]]) -> int:
    """The cell the pushed box went to."""
    return next(b for b in nxt[1] if b not in state[1])


def _path(parent: dict, state: tuple[int, tuple[int, ...]]) -> list[int]:
    actions = []
    while parent[state] is not None:
        state, action = parent[state]
        actions.append(action)
    return actions[::-1]


def _check_range(name: str, value: tuple[int, int], low: int, high: int) -> tuple[int, int]:
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            or not low <= value[0] <= value[1] <= high):  # fmt: skip
        raise ValueError(f"{name}={value!r} must be a (least, most) pair of whole numbers with {low} <= least <= "
                         f"most <= {high}.")  # fmt: skip
    return int(value[0]), int(value[1])


def _pull_walk(rng: random.Random, size: int, walls: frozenset[int], agent: int, boxes: list[int],
               steps: int) -> int:  # fmt: skip
    """Walk the agent backwards ``steps`` times, pulling a box behind it most of the time; the agent's cell."""
    for _ in range(steps):
        action = rng.randrange(len(_STEPS))
        to = neighbour(size, agent, action)
        if to is None or to in walls or to in boxes:
            continue
        behind = neighbour(size, agent, action ^ 1)
        if behind in boxes and rng.random() < 0.8:
            boxes[boxes.index(behind)] = agent
        agent = to
    return agent


def _one_level(rng: random.Random, size: int, boxes: tuple[int, int], walls: tuple[int, int],
               min_moves: int) -> tuple[Level, list[int]]:  # fmt: skip
    while True:
        cells = rng.sample(range(size * size), walls[1] + boxes[1] + 1)
        n_walls, n_boxes = rng.randint(*walls), rng.randint(*boxes)
        wall_set = frozenset(cells[:n_walls])
        targets = cells[walls[1] : walls[1] + n_boxes]
        box_cells = list(targets)
        agent = _pull_walk(rng, size, wall_set, cells[-1], box_cells, 6 * size)
        level = Level(size, wall_set, frozenset(targets), tuple(sorted(box_cells)), agent)
        if level.solved:
            continue
        path = solve(level)
        if path is not None and len(path) >= min_moves:
            return level, path


def generate(n: int, size: int = 6, boxes: tuple[int, int] = (1, 2), walls: tuple[int, int] = (0, 4),
             min_moves: int = 3, seed: int = 0) -> list[Level]:  # fmt: skip
    """``n`` solvable levels of ``size x size`` cells, seeded: ``boxes`` and inner ``walls`` as (least, most).

    Every level needs at least ``min_moves`` moves. A board with too little room for its walls, boxes and
    agent is refused before any level is made.

    >>> [lv.render() for lv in generate(2, size=5, boxes=(1, 1), seed=1)]
    """
    n = check_int("n", n, 1)
    size = check_int("size", size, MIN_SIZE, MAX_SIZE)
    boxes = _check_range("boxes", boxes, 1, MAX_BOXES)
    walls = _check_range("walls", walls, 0, size * size)
    min_moves = check_int("min_moves", min_moves, 1, 4 * size)
    room = size * size // 2
    if walls[1] + 2 * boxes[1] + 1 > room:
        raise ValueError(f"A {size}x{size} board has room for at most {room} walls, boxes, targets and the agent "
                         f"together; walls={walls} and boxes={boxes} need {walls[1] + 2 * boxes[1] + 1}. Give fewer "
                         "walls or boxes, or a larger size.")  # fmt: skip
    rng = random.Random(seed)
    return [_one_level(rng, size, boxes, walls, min_moves)[0] for _ in range(n)]


def trajectory(level: Level, actions: Sequence[int]) -> list[Level]:
    """The levels the agent goes through following ``actions``: ``len(actions) + 1`` of them."""
    if not isinstance(level, Level):
        raise TypeError(f"level must be a Level (from ilab.agents.generate or Level(...)), got {type(level).__name__}.")
    out = [level]
    for action in actions:
        out.append(out[-1].step(int(action)))
    return out


def future_squares(level: Level, actions: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The cells the agent will step on and the cells a box will be pushed onto following ``actions``.

    Two bool tensors [size * size] (the planning concepts a probe decodes: "the agent / a box will pass here").

    >>> agent_S, box_S = future_squares(level, solve(level))
    """
    agent_S = torch.zeros(level.size * level.size, dtype=torch.bool)
    box_S = torch.zeros_like(agent_S)
    states = trajectory(level, actions)
    for before, after in itertools.pairwise(states):
        agent_S[after.agent] = True
        for b in set(after.boxes) - set(before.boxes):
            box_S[b] = True
    return agent_S, box_S
