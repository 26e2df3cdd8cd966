"""The Q-learning agent's bandit transcripts: choices drawn from its own probabilities, which follow the Q rule,
pay-outs from each arm's probability, and tokens that spell out both."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.train.bandit import BANDIT_VOCAB, play

import interplab as ilab


def replayed_p_a(choices: np.ndarray, rewards: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """The agent's probability of A at each round, from a Q-learner written out round by round."""
    out = np.zeros(choices.shape)
    for n in range(len(choices)):
        q = [0.5, 0.5]
        for t, (c, r) in enumerate(zip(choices[n], rewards[n], strict=True)):
            out[n, t] = 1 / (1 + np.exp(-beta * (q[0] - q[1])))
            q[c] += alpha * (r - q[c])
    return out


def test_agent_choices_match_its_own_probabilities():
    task = ilab.train.q_agent_bandit(n_episodes=3000, n_rounds=12, alpha=0.4, beta=5.0, seed=3)
    p_a = task.p_a_NT
    assert np.allclose(p_a, replayed_p_a(task.choices_NT, task.rewards_NT, 0.4, 5.0))
    chose_a = task.choices_NT == 0
    for low, high in ((0.0, 0.3), (0.3, 0.7), (0.7, 1.0)):  # frequency of A within bins of the agent's p(A)
        in_bin = (p_a >= low) & (p_a < high)
        assert chose_a[in_bin].mean() == pytest.approx(p_a[in_bin].mean(), abs=0.02)
    # it learns: the better arm is chosen more often late in an episode than at the start
    better = task.choices_NT == task.better_N[:, None]
    assert better[:, -4:].mean() > better[:, 0].mean() + 0.2


def test_rewards_follow_the_chosen_arms_pay_out():
    choices, rewards, _ = play(np.array([[1.0, 0.0]] * 50), 8, 0.5, 2.0, np.random.default_rng(0))
    assert (rewards == (choices == 0)).all()
    task = ilab.train.q_agent_bandit(n_episodes=2000, n_rounds=10, p_reward=(0.7, 0.1), seed=1)
    good = task.choices_NT == task.better_N[:, None]
    assert task.rewards_NT[good].mean() == pytest.approx(0.7, abs=0.02)
    assert task.rewards_NT[~good].mean() == pytest.approx(0.1, abs=0.02)


def test_tokens_spell_choices_and_rewards_and_targets_are_the_next_token():
    task = ilab.train.q_agent_bandit(n_episodes=5, n_rounds=4, seed=0)
    words = task.texts()[2].split()
    assert words[0::3] == ["machine"] * 4
    assert words[1::3] == ["AB"[c] for c in task.choices_NT[2]]
    assert words[2::3] == ["win" if r else "lose" for r in task.rewards_NT[2]]
    assert task.vocab == BANDIT_VOCAB and task.inputs_NL.shape == (5, 12)
    assert torch.equal(task.targets_N[:, :-1], task.inputs_NL[:, 1:]) and (task.targets_N[:, -1] == -100).all()
    assert task.n_train == 4 and task.identity()["alpha"] == 0.3
