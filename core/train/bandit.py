"""Two-armed bandit transcripts played by a Q-learning agent, as a next-token task for a tiny transformer.

Each episode is ``machine A win machine B lose ...``: at every round the agent (learning rate ``alpha``,
inverse temperature ``beta``, both arms' values starting at ``q0``) picks arm A with probability
``sigmoid(beta * (Q_A - Q_B))``, the arm pays out with its probability (which arm is the better one is drawn
per episode), and the chosen arm's value moves by ``alpha`` times the TD error ``reward - Q(choice)``. A
model trained on the next token at every position imitates the agent's choices (and predicts the pay-outs).

Example
-------
>>> task = q_agent_bandit(n_episodes=2048, n_rounds=20, alpha=0.3, beta=6.0)
>>> task.texts()[0][:30], task.inputs_NL.shape
('machine B lose machine A win m', torch.Size([2048, 60]))
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..checks import check_float, check_fraction, check_int, check_positive_int
from .tasks import Task

#: The transcripts' tokens: three a round (``machine``, the arm, the outcome); ``<pad>`` is id 0.
BANDIT_VOCAB = ["<pad>", "machine", "A", "B", "win", "lose"]
MACHINE, ARM_A, WIN = 1, 2, 4


@dataclass
class BanditTask(Task):
    """A :class:`Task` of bandit episodes with what the agent did: ``choices_NT`` (0 = A, 1 = B),
    ``rewards_NT``, ``p_a_NT`` (the agent's probability of A at each round), ``better_N`` (the better arm)."""

    choices_NT: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=int))
    rewards_NT: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=int))
    p_a_NT: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    better_N: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))


def play(p_win_N2: np.ndarray, n_rounds: int, alpha: float, beta: float, rng: np.random.Generator,
         q0: float = 0.5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """A Q-learning agent's episodes against arms paying ``p_win_N2`` [episodes, 2]: choices, rewards and the
    agent's probability of arm A at each round, each ``[episodes, n_rounds]``.

    >>> choices, rewards, p_a = play(np.array([[1.0, 0.0]]), 5, 0.5, 50.0, np.random.default_rng(0))
    """
    n = len(p_win_N2)
    q_N2 = np.full((n, 2), float(q0))
    choices, rewards, p_a = np.zeros((n, n_rounds), int), np.zeros((n, n_rounds), int), np.zeros((n, n_rounds))
    rows = np.arange(n)
    for t in range(n_rounds):
        p_a[:, t] = 1 / (1 + np.exp(-beta * (q_N2[:, 0] - q_N2[:, 1])))
        choices[:, t] = (rng.random(n) >= p_a[:, t]).astype(int)
        rewards[:, t] = (rng.random(n) < p_win_N2[rows, choices[:, t]]).astype(int)
        q_N2[rows, choices[:, t]] += alpha * (rewards[:, t] - q_N2[rows, choices[:, t]])
    return choices, rewards, p_a


def q_agent_bandit(n_episodes: int = 2048, n_rounds: int = 20, alpha: float = 0.3, beta: float = 6.0,
                   p_reward: tuple[float, float] = (0.8, 0.2), train_frac: float = 0.9, seed: int = 0
                   ) -> BanditTask:  # fmt: skip
    """Bandit episodes played by a Q-learner (``alpha``, ``beta``), the next token the answer at every position.

    The better arm (paying ``p_reward[0]``; the other pays ``p_reward[1]``) is drawn per episode. Texts are
    ``machine A win machine B lose ...`` (3 tokens a round, the vocabulary :data:`BANDIT_VOCAB`).

    >>> task = q_agent_bandit(4, 3, seed=1)
    >>> task.texts()[0].split()[:3], task.choices_NT.shape
    (['machine', 'A', 'lose'], (4, 3))
    """
    n_episodes, n_rounds = check_int("n_episodes", n_episodes, 2), check_positive_int("n_rounds", n_rounds)
    alpha, beta = check_float("alpha", alpha, 0.0, 1.0, above=0.0), check_float("beta", beta, 0.0)
    if not isinstance(p_reward, (tuple, list)) or len(p_reward) != 2:
        raise ValueError(f"p_reward must be two probabilities (the better arm's, the other's), got {p_reward!r}.")
    probs = [check_float("p_reward", p, 0.0, 1.0) for p in p_reward]
    rng = np.random.default_rng(check_int("seed", seed, 0))
    better = rng.integers(0, 2, n_episodes)
    p_win = np.where(np.arange(2)[None, :] == better[:, None], probs[0], probs[1])
    choices, rewards, p_a = play(p_win, n_rounds, alpha, beta, rng)
    tokens = np.stack([np.full_like(choices, MACHINE), ARM_A + choices, WIN + 1 - rewards], -1)
    inputs = torch.as_tensor(tokens.reshape(n_episodes, -1), dtype=torch.long)
    targets = torch.full_like(inputs, -100)
    targets[:, :-1] = inputs[:, 1:]
    settings = {"n_episodes": n_episodes, "n_rounds": n_rounds, "alpha": alpha, "beta": beta, "p_reward": probs,
                "train_frac": train_frac, "seed": seed}  # fmt: skip
    n_train = max(1, round(n_episodes * check_fraction("train_frac", train_frac, "(", "]")))
    train_N = torch.zeros(n_episodes, dtype=torch.bool)
    train_N[torch.randperm(n_episodes, generator=torch.Generator().manual_seed(seed))[:n_train]] = True
    return BanditTask("q_agent_bandit", list(BANDIT_VOCAB), inputs, targets, train_N, settings, choices, rewards,
                      p_a, better)  # fmt: skip
