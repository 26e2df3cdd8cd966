"""Sokoban levels: the solver's solutions are shortest, generation is seeded and refuses impossible boards."""

from __future__ import annotations

import itertools

import pytest
from interplab.core.agents.sokoban import Level, future_squares, generate, solve, trajectory


def _level(rows: list[str]) -> Level:
    """A level from rows of CELLS characters."""
    size = len(rows)
    cells = "".join(rows)
    pick = lambda chars: frozenset(i for i, ch in enumerate(cells) if ch in chars)  # noqa: E731
    agent = next(i for i, ch in enumerate(cells) if ch in "@+")
    return Level(size, pick("#"), pick(".*+"), tuple(sorted(pick("$*"))), agent)


def _shortest_by_enumeration(level: Level, longest: int) -> int | None:
    for length in range(1, longest + 1):
        for actions in itertools.product(range(4), repeat=length):
            if trajectory(level, actions)[-1].solved:
                return length
    return None


def test_solver_pushes_a_box_in_one_move():
    level = _level(["@$._", "____", "____", "____"])
    assert solve(level) == [3]


def test_solver_walks_around_to_push_from_the_other_side():
    level = _level(["____", "_.$@", "____", "____"])
    assert solve(level) == [2]
    level = _level(["____", "@$._", "____", "____"])
    assert solve(level) == [3]
    level = _level(["____", "_$@.", "____", "____"])  # the box must go right: the agent walks round it
    path = solve(level)
    assert path is not None and trajectory(level, path)[-1].solved and len(path) == 6


def test_solver_finds_no_solution_for_a_box_in_a_corner():
    assert solve(_level(["$___", "_@__", "__._", "____"])) is None


@pytest.mark.parametrize("seed", [0, 1])
def test_solutions_are_as_short_as_any_action_sequence(seed):
    levels = [lv for lv in generate(40, size=4, boxes=(1, 1), walls=(0, 2), seed=seed) if len(solve(lv)) <= 5][:3]
    assert levels
    for level in levels:
        path = solve(level)
        assert trajectory(level, path)[-1].solved
        assert _shortest_by_enumeration(level, len(path)) == len(path)


def test_generation_is_seeded_and_every_level_is_solvable():
    a, b = generate(20, seed=3), generate(20, seed=3)
    assert a == b and a != generate(20, seed=4)
    assert all(solve(lv) is not None and len(solve(lv)) >= 3 for lv in a)
    assert {len(lv.boxes) for lv in a} == {1, 2}


def test_future_squares_follow_the_plan():
    level = _level(["@$._", "____", "____", "____"])
    agent_S, box_S = future_squares(level, solve(level))
    assert agent_S.nonzero().flatten().tolist() == [1]
    assert box_S.nonzero().flatten().tolist() == [2]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"size": 2}, r"size must be an integer in 4\.\.10, got 2"),
        ({"size": 4, "walls": (0, 6), "boxes": (2, 2)}, r"room for at most 8"),
        ({"boxes": (2, 1)}, r"boxes=\(2, 1\) must be a \(least, most\) pair"),
        ({"boxes": (0, 1)}, r"boxes=\(0, 1\)"),
    ],
)
def test_impossible_boards_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate(1, **kwargs)
