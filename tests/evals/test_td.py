"""The bandit task, Q-learning fitted to choices, and TD-error latents on a tiny random model."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from interplab.core.evals.td import fit_q, q_values, td_signals
from tokenizers import Tokenizer, models, pre_tokenizers
from tokenizers.processors import TemplateProcessing
from transformers import PreTrainedTokenizerFast

import interplab as ilab
from tests.tiny import tiny_config
from tests.train.nets import BANDIT_SITES, BanditNet

PAPERS = Path(__file__).resolve().parents[2] / "nbs" / "papers"

BANDIT_WORDS = (
    "Two slot machines , A and B . One pays out more often Each round I pick one see if win Round : machine lose"
)


def bandit_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3}
    for w in BANDIT_WORDS.split() + [str(i) for i in range(1, 21)]:
        vocab.setdefault(w, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                   unk_token="<unk>")  # fmt: skip


def test_bandit_transcripts_hold_their_choices_and_rewards() -> None:
    task = ilab.evals.bandit(n_episodes=3, n_rounds=4, p_reward=(1.0, 0.0), seed=1)
    assert task.choices.shape == task.rewards.shape == (3, 4)
    assert (task.rewards == (task.choices == task.better[:, None])).all()  # the better arm always pays here
    line = task.texts[0].splitlines()[2]
    assert line == f"Round 2: machine {'AB'[task.choices[0, 1]]}, {'win' if task.rewards[0, 1] else 'lose'}."


def test_q_values_follow_the_td_rule() -> None:
    Q, td = q_values(np.array([[0, 0, 1]]), np.array([[1, 0, 1]]), alpha=0.5)
    assert np.allclose(td[0], [0.5, -0.75, 0.5])  # 1 - 0.5; 0 - 0.75; 1 - 0.5
    assert np.allclose(Q[0, 2], [0.375, 0.5])


def test_fit_q_recovers_a_q_learner_and_not_shuffled_preferences() -> None:
    rng = np.random.default_rng(0)
    choices = rng.integers(0, 2, (40, 30))
    rewards = (rng.random((40, 30)) < np.where(choices == 0, 0.8, 0.2)).astype(int)
    Q, _ = q_values(choices, rewards, alpha=0.3)
    logodds = 4.0 * (Q[..., 0] - Q[..., 1]) + 0.1 * rng.standard_normal((40, 30))
    fit = fit_q(choices, rewards, logodds)
    assert fit["alpha"] == pytest.approx(0.3, abs=0.06) and fit["beta"] == pytest.approx(4.0, rel=0.1)
    assert fit["r2"] > 0.9
    control = fit_q(choices, rewards, rng.permutation(logodds.ravel()).reshape(logodds.shape))
    assert control["r2"] < 0.1


def test_td_latents_and_causal_check_on_a_tiny_model() -> None:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = ilab.load_model(AutoModelForCausalLM.from_config(tiny_config("gpt2")).eval(), tokenizer=bandit_tokenizer())
    sae = ilab.SAE.create("topk", d_in=32, d_sae=16, k=4, site="blocks.1.hook_resid_post")
    task = ilab.evals.bandit(n_episodes=4, n_rounds=6, seed=0)
    td = ilab.evals.td_latents(model, sae, task)
    assert td.logodds.shape == td.td.shape == (4, 6)
    assert len(td.latents) == 16 and set(td.summary) >= {"max_abs_r_td", "max_abs_r_reward", "max_abs_r_shuffled"}
    assert td.latents.r_td.abs().is_monotonic_decreasing
    causal = td.causal_check(model, sae, n_latents=2, n_random=2)
    assert list(causal.which) == ["top", "random"] and (causal.mean_abs_change >= 0).all()


def test_td_signals_split_the_td_error_into_reward_and_the_rest():
    rng = np.random.default_rng(0)
    rewards = rng.integers(0, 2, (30, 10))
    td = rewards - rng.random((30, 10))
    signals = td_signals(td, rewards)
    beyond = signals["r_td_given_reward"]
    assert abs(np.corrcoef(beyond, rewards.ravel())[0, 1]) < 1e-9  # the reward's part is gone
    assert np.corrcoef(beyond, td.ravel())[0, 1] > 0.3
    assert sorted(signals["r_shuffled_given_reward"]) == pytest.approx(sorted(beyond))


def bandit_pipeline(model: ilab.Model, task: ilab.train.BanditTask) -> tuple[ilab.evals.TDResult, ilab.SAE]:
    """The TD notebook's pipeline on 96 held-out episodes: an SAE at the first block's output, TD latents, the
    causal check (nbs/papers/knowledge_edit_and_td.ipynb, section 4)."""
    from interplab.core.saes.training.in_memory import fit_tensor

    held = (~task.train_N).nonzero().flatten()[:96]
    episodes = ilab.evals.Bandit(texts=task.texts(held), choices=task.choices_NT[held], rewards=task.rewards_NT[held],
                                 better=task.better_N[held], p_reward=(0.8, 0.2), reward_offset=1)  # fmt: skip
    site = "blocks.0.hook_resid_post"
    acts = model.collect(task.texts()[:256], sites=site).flat(site)
    sae = fit_tensor(acts, arch="topk", width=128, k=8, steps=200, batch_size=512, site=site, progress=False)
    td = ilab.evals.td_latents(model, sae, episodes)
    td.causal_check(model, sae, n_latents=5, n_random=5)
    return td, sae


def test_td_claims_hold_for_the_trained_bandit_model_and_fail_for_an_untrained_one(tmp_path):
    task = ilab.train.q_agent_bandit(n_episodes=4096, n_rounds=20, alpha=0.3, beta=6.0, p_reward=(0.8, 0.2), seed=0)

    def untrained() -> BanditNet:
        torch.manual_seed(0)
        return BanditNet(len(task.vocab))

    folder = shutil.copytree(PAPERS / "td_tiny_run", tmp_path / "td_tiny_run")
    run = ilab.train.tiny(untrained(), task, steps=1500, lr=3e-3, batch_size=64, eval_every=500,
                          checkpoint_every=500, path=folder, progress=False)  # fmt: skip
    model = ilab.load_model(run.module, sites=BANDIT_SITES, tokenizer=task.vocab)
    td, _ = bandit_pipeline(model, task)
    trained = td.claims()
    assert trained["holds"], trained
    # an untrained model of the same shape: at chance, no Q-learner in its choices, the claim fails
    control = bandit_pipeline(ilab.load_model(untrained().eval(), sites=BANDIT_SITES, tokenizer=task.vocab), task)
    control_claims = control[0].claims()
    assert not control_claims["holds"] and not control_claims["above_chance"] and not control_claims["q_fit"]
