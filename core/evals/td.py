"""TD-error latents: a two-armed bandit written as text, Q-learning fitted to the model's choices, SAE latents
correlated with the TD errors, and an intervention on the top latents.

:func:`bandit` writes episodes ("Round 3: machine A, win.") whose choices are drawn at random (teacher-forced:
every episode is one forward pass) and whose rewards come from each arm's pay-out probability.
:func:`td_latents` reads the model's own preference at each choice (the log-odds of " A" over " B" after
"machine"), fits a Q-learner to it (learning rate ``alpha`` on a grid, inverse temperature ``beta`` by least
squares on ``Q_A - Q_B``), computes the TD error ``reward - Q(choice)`` of every round, and correlates each
SAE latent at the reward token (" win" / " lose") with the TD error, with the reward, and with the TD errors
shuffled across rounds (the control). :meth:`TDResult.causal_check` ablates the top TD latents at the reward
tokens and measures the change of the model's log-odds of repeating its previous choice, beside random latents.

Example
-------
>>> task = bandit(n_episodes=16, n_rounds=20, seed=0)
>>> td = td_latents(model, sae, task)
>>> td.summary, td.top(5)            # best |r| with TD, reward, shuffled TD; latent, r_td, r_reward, r_shuffled
>>> td.causal_check(model, sae, n_latents=5)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nnsight
import numpy as np
import pandas as pd
import torch

from ..checks import check_float, check_int, check_positive_int, single_token_id
from ..model.model import free_trace_memory
from ..model.trace_ops import read_site, write_site
from ..views.charts import offline
from .correlation import pearson
from .tidy import check_sae, encode_rows

if TYPE_CHECKING:
    from ..model.model import Model
    from ..saes.base import SAE

INTRO = "Two slot machines, A and B. One pays out more often. Each round I pick one and see if I win."
ALPHAS = np.linspace(0.05, 1.0, 20)


@dataclass(repr=False)
class Bandit:
    """Episodes as text, with each round's choice (0 = A, 1 = B) and reward ``[episodes, rounds]``; the reward
    token sits ``reward_offset`` tokens after the arm's (2 in ``machine A, win``, 1 in ``machine A win``)."""

    texts: list[str]
    choices: np.ndarray
    rewards: np.ndarray
    better: np.ndarray  # [episodes] the arm that pays p_reward[0]
    p_reward: tuple[float, float]
    reward_offset: int = 2


def bandit(n_episodes: int = 16, n_rounds: int = 20, p_reward: tuple[float, float] = (0.8, 0.2), seed: int = 0
           ) -> Bandit:  # fmt: skip
    """Two-armed bandit transcripts with random choices; which arm pays ``p_reward[0]`` is drawn per episode.

    >>> bandit(4, 10).texts[0].splitlines()[1]
    'Round 1: machine A, lose.'
    """
    n_episodes, n_rounds = check_positive_int("n_episodes", n_episodes), check_positive_int("n_rounds", n_rounds)
    if not isinstance(p_reward, (tuple, list)) or len(p_reward) != 2:
        raise ValueError(f"p_reward must be two probabilities (the better arm's, the other's), got {p_reward!r}.")
    probs = tuple(check_float("p_reward", p, 0.0, 1.0) for p in p_reward)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    choices = rng.integers(0, 2, (n_episodes, n_rounds))
    good = rng.integers(0, 2, n_episodes)[:, None]
    rewards = (rng.random((n_episodes, n_rounds)) < np.where(choices == good, probs[0], probs[1])).astype(int)
    texts = [INTRO + "".join(f"\nRound {t + 1}: machine {'AB'[c]}, {'win' if r else 'lose'}."
                             for t, (c, r) in enumerate(zip(cs, rs, strict=True)))
             for cs, rs in zip(choices, rewards, strict=True)]  # fmt: skip
    return Bandit(texts=texts, choices=choices, rewards=rewards, better=good[:, 0], p_reward=(probs[0], probs[1]))


def q_values(choices: np.ndarray, rewards: np.ndarray, alpha: float, q0: float = 0.5) -> tuple[np.ndarray, ...]:
    """Q-learning through each episode: Q before each round ``[N, T, 2]`` and the TD error of each round ``[N, T]``."""
    n, t = choices.shape
    q = np.full((n, 2), q0)
    Q, td = np.zeros((n, t, 2)), np.zeros((n, t))
    rows = np.arange(n)
    for step in range(t):
        Q[:, step] = q
        td[:, step] = rewards[:, step] - q[rows, choices[:, step]]
        q[rows, choices[:, step]] += alpha * td[:, step]
    return Q, td


def fit_q(choices: np.ndarray, rewards: np.ndarray, logodds: np.ndarray) -> dict[str, Any]:
    """The ``alpha`` whose Q difference best explains the model's log-odds of A (R^2), its ``beta`` and bias.

    Round ``t``'s preference is compared with Q after rounds ``< t`` (the first round left out)."""
    best: dict[str, Any] = {"r2": -np.inf}
    y = logodds[:, 1:].ravel()
    for alpha in ALPHAS:
        Q, td = q_values(choices, rewards, float(alpha))
        x = (Q[:, 1:, 0] - Q[:, 1:, 1]).ravel()
        X = np.stack([x, np.ones_like(x)], 1)
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        r2 = 1 - ((y - X @ coef) ** 2).sum() / max(1e-12, ((y - y.mean()) ** 2).sum())
        if r2 > best["r2"]:
            best = {"alpha": float(alpha), "beta": float(coef[0]), "bias": float(coef[1]), "r2": float(r2), "td": td}
    return best


def positions_after(ids: torch.Tensor, mask: torch.Tensor, marker: int) -> list[np.ndarray]:
    """Per row, the positions of the token after each ``marker`` token (right-padded rows)."""
    return [np.flatnonzero(row[: int(m.sum()) - 1].numpy() == marker) + 1 for row, m in zip(ids, mask, strict=True)]


@dataclass(repr=False)
class TDResult:
    """The fitted Q-learner, each latent's correlation with TD error, reward and shuffled TD, and the choice data."""

    site: str
    fit: dict[str, float]
    logodds: np.ndarray  # [N, T] the model's log-odds of A at each choice
    td: np.ndarray  # [N, T]
    latents: pd.DataFrame  # latent, r_* (td_signals), fire_rate at the reward tokens (sorted by |r_td|)
    task: Bandit
    causal: pd.DataFrame | None = None

    @property
    def p_better(self) -> float:
        """Mean probability the model gives the better arm in the second half of each episode (chance: 0.5)."""
        p_a = 1 / (1 + np.exp(-self.logodds[:, self.logodds.shape[1] // 2 :]))
        return float(np.where(self.task.better[:, None] == 0, p_a, 1 - p_a).mean())

    @property
    def summary(self) -> dict[str, float]:
        """The fit and the best |r| of a latent with TD error, reward and shuffled TD."""
        best = {f"max_abs_{k}": float(self.latents[k].abs().max()) for k in self.latents.columns if k.startswith("r_")}
        return {"alpha": self.fit["alpha"], "beta": self.fit["beta"], "r2": self.fit["r2"],
                "p_better": self.p_better, **best}  # fmt: skip

    def top(self, n: int = 10) -> pd.DataFrame:
        """The ``n`` latents with the largest |r| with the TD error."""
        return self.latents.head(check_positive_int("n", n))

    def chart(self, n: int = 20) -> Any:
        """The top latents' correlation with TD error beside reward and shuffled TD."""
        import altair as alt

        df = self.top(n).melt(id_vars="latent", value_vars=["r_td", "r_reward", "r_shuffled"], var_name="signal")
        return offline(alt.Chart(df.assign(latent=df.latent.astype(str))).mark_point(filled=True).encode(
            y=alt.Y("latent:N", sort=None), x=alt.X("value:Q", title="correlation"), color="signal:N",
            tooltip=["latent", "signal", "value"]).properties(
            title=f"Latents at the reward token ({self.site})", width=300, height=14 * n))  # fmt: skip

    def causal_check(self, model: Model, sae: SAE, n_latents: int = 5, n_random: int = 5, seed: int = 0,
                     matched: bool = False) -> pd.DataFrame:  # fmt: skip
        """Ablate the top TD latents (and ``n_random`` random latents that fired) at every reward token; the mean
        absolute change of the log-odds of repeating the previous choice. With ``matched``, a third row ablates
        ``n_random`` latents drawn from the ``4 * n_random`` others that fire on the most reward tokens (the
        control for "the top latents just fire more often"). Stored in :attr:`causal`."""
        n_latents, n_random = check_positive_int("n_latents", n_latents), check_positive_int("n_random", n_random)
        top = self.latents.head(n_latents).latent.astype(int).tolist()
        rng = np.random.default_rng(seed)
        groups = [("top", top), ("random", self._others(self.latents.r_td != 0, top, n_random, rng))]
        if matched:
            others = self.latents[~self.latents.latent.isin(top)]
            frequent = self.latents.latent.isin(others.nlargest(4 * n_random, "fire_rate").latent)
            groups.append(("matched", self._others(frequent, top, n_random, rng)))
        rows = []
        stay = np.where(self.task.choices[:, :-1] == 0, 1.0, -1.0)  # sign that makes "repeat" positive
        for which, latents in groups:
            ablated = choice_logodds(model, self.task, sae, self.site, latents)
            change = stay * (ablated[:, 1:] - self.logodds[:, 1:])
            rows.append({"which": which, "latents": latents, "mean_abs_change": float(np.abs(change).mean()),
                         "mean_stay_change": float(change.mean())})  # fmt: skip
        self.causal = pd.DataFrame(rows)
        return self.causal

    def _others(self, pool: pd.Series, top: list[int], n: int, rng: np.random.Generator) -> list[int]:
        """Up to ``n`` latents drawn from those where ``pool`` holds, the ``top`` ones left out."""
        candidates = np.setdiff1d(self.latents[pool].latent.astype(int).to_numpy(), top)
        return rng.choice(candidates, size=min(n, len(candidates)), replace=False).tolist()

    def claims(self, min_p_better: float = 0.6, min_r2: float = 0.5, min_beyond: float = 0.15, ratio: float = 3.0
               ) -> dict[str, Any]:  # fmt: skip
        """The paper's claims on this result, each against its control. ``holds``: the better arm chosen above
        chance (``p_better > min_p_better``; chance 0.5), a Q-learner explaining the choices (``r2 > min_r2``; a
        model choosing at random gives about 0) and a latent tracking the TD error beyond the reward (best
        ``|r_td_given_reward| > min_beyond`` and ``ratio`` times its shuffled control). Beside it (needs
        :meth:`causal_check` first): ``causal``, ablating the top latents moves the choices ``ratio`` times as
        much as random latents that fired; ``causal_matched``, more than latents that fire as often (None without
        ``matched=True``); ``td_over_reward``, the literal best ``|r_td|`` over best ``|r_reward|``.

        >>> td.causal_check(model, sae); td.claims()["holds"]
        """
        min_p_better = check_float("min_p_better", min_p_better, 0.5, 1.0)
        min_r2, min_beyond = check_float("min_r2", min_r2, 0.0, 1.0), check_float("min_beyond", min_beyond, 0.0, 1.0)
        ratio = check_float("ratio", ratio, 1.0)
        if self.causal is None:
            raise ValueError("claims needs the causal check: run td.causal_check(model, sae) first.")
        s = self.summary
        change = self.causal.set_index("which").mean_abs_change
        beyond = s["max_abs_r_td_given_reward"]
        out = {
            "above_chance": s["p_better"] > min_p_better,
            "q_fit": s["r2"] > min_r2,
            "td_beyond_reward": beyond > min_beyond and beyond > ratio * s["max_abs_r_shuffled_given_reward"],
            "causal": bool(change["top"] > ratio * change["random"]),
            "causal_matched": bool(change["top"] > change["matched"]) if "matched" in change else None,
            "td_over_reward": s["max_abs_r_td"] > s["max_abs_r_reward"],
        }
        return {**out, "holds": all(out[k] for k in ("above_chance", "q_fit", "td_beyond_reward"))}

    def __repr__(self) -> str:
        s = self.summary
        return (f"TDResult({self.site}: alpha {s['alpha']:.2f}, R2 {s['r2']:.3f}; best |r| TD {s['max_abs_r_td']:.3f}, "
                f"reward {s['max_abs_r_reward']:.3f}, shuffled {s['max_abs_r_shuffled']:.3f})")  # fmt: skip


def choice_logodds(model: Model, task: Bandit, sae: SAE | None = None, site: str | None = None,
                   ablate: list[int] | None = None) -> np.ndarray:  # fmt: skip
    """The model's log-odds of " A" over " B" at every round's choice ``[N, T]``; with ``ablate``, the latents'
    decoder contributions are subtracted at ``site`` on every reward token first."""
    tok = model.tokenizer
    a, b = single_token_id(tok, " A", "arm"), single_token_id(tok, " B", "arm")
    machine = single_token_id(tok, " machine", "marker")
    enc = model.to_tokens(task.texts)
    choice_pos = positions_after(enc["input_ids"], enc["attention_mask"], machine)
    cols = [p - 1 for p in choice_pos]  # the logits at "machine" predict the arm
    edit = None
    if ablate:
        if sae is None or site is None:
            raise ValueError("ablate needs the sae and the site its latents are read at.")
        (x,) = model.run_sites(enc, [site])
        reward_pos = [p + task.reward_offset for p in choice_pos]  # " A" "," " win"
        W = sae.W_dec.detach().float()[ablate].cpu()
        x = x.float()
        for i, pos in enumerate(reward_pos):
            z = encode_rows(sae, x[i, pos])
            x[i, pos] -= z[:, ablate] @ W
        edit = (site, x)
    rows = torch.cat([torch.full((len(c),), i) for i, c in enumerate(cols)])
    logits = arm_logits(model, enc, rows, torch.as_tensor(np.concatenate(cols)), torch.tensor([a, b]), edit)
    return (logits[:, 0] - logits[:, 1]).numpy().reshape(len(cols), -1)


def arm_logits(model: Model, enc: dict[str, torch.Tensor], rows: torch.Tensor, cols: torch.Tensor,
               arm_ids: torch.Tensor, edit: tuple[str, torch.Tensor] | None) -> torch.Tensor:  # fmt: skip
    """Logits ``[n, 2]`` of the arms' tokens at (row, col), with a site's tensor replaced first (remote-safe body)."""
    last = model.block(model.n_layers - 1)
    norm, unembed, cap = model.readout_parts
    envoy, io = model.envoy(edit[0]) if edit else (None, None)
    value = edit[1].to(model.device, model.dtype) if edit else None
    inputs = {k: v.to(model.device) for k, v in enc.items()}
    rows, cols, arm_ids = rows.to(model.device), cols.to(model.device), arm_ids.to(model.device)
    with torch.no_grad(), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
        if envoy is not None and io is not None:
            write_site(envoy, io, value)
        hidden = norm(read_site(last, "output")[rows, cols]).float()
        logits = hidden @ unembed.weight[arm_ids].float().T
        if cap:
            logits = torch.tanh(logits / cap) * cap
        saved = nnsight.save(logits)
        tracer.stop()
    free_trace_memory()
    return saved.detach().cpu()


def td_signals(td: np.ndarray, rewards: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    """What each latent is correlated with, flattened over rounds: ``r_td`` the TD error, ``r_reward`` the
    reward, ``r_shuffled`` the TD errors shuffled across rounds; ``r_td_given_reward`` the part of the TD error
    that the reward does not explain (its residual after a linear fit on the reward: the prediction
    ``Q(choice)``, negated), and ``r_shuffled_given_reward`` that residual shuffled (its control).

    >>> sorted(td_signals(np.array([[0.5, -0.25, 0.1]]), np.array([[1, 0, 1]])))[:2]
    ['r_reward', 'r_shuffled']
    """
    td_flat, reward = td.ravel().astype(np.float64), rewards.ravel().astype(np.float64)
    design = np.stack([reward, np.ones_like(reward)], 1)
    beyond = td_flat - design @ np.linalg.lstsq(design, td_flat, rcond=None)[0]
    rng = np.random.default_rng(seed)
    return {"r_td": td_flat, "r_reward": reward, "r_shuffled": rng.permutation(td_flat),
            "r_td_given_reward": beyond, "r_shuffled_given_reward": rng.permutation(beyond)}  # fmt: skip


def td_latents(model: Model, sae: SAE, task: Bandit, site: str | None = None, seed: int = 0) -> TDResult:
    """Fit Q-learning to the model's choices on ``task`` and correlate ``sae``'s latents at the reward tokens with
    the TD errors, the rewards and shuffled TD errors.

    >>> td_latents(model, ilab.load_sae("embedded", layer=6), bandit(16, 20)).summary
    """
    check_sae(sae)
    if not isinstance(task, Bandit):
        raise TypeError(f"task must be a Bandit from ilab.evals.bandit(...), got {type(task).__name__}.")
    check_positive_int("task.reward_offset", task.reward_offset)
    site = sae.check_fits(model, site)
    logodds = choice_logodds(model, task)
    fit = fit_q(task.choices, task.rewards, logodds)
    td = fit.pop("td")
    enc = model.to_tokens(task.texts)
    machine = single_token_id(model.tokenizer, " machine", "marker")
    reward_pos = [p + task.reward_offset for p in positions_after(enc["input_ids"], enc["attention_mask"], machine)]
    (x,) = model.run_sites(enc, [site])
    Z = encode_rows(sae, torch.cat([x[i, pos].float() for i, pos in enumerate(reward_pos)])).numpy().astype(np.float64)
    signals = td_signals(td, task.rewards, seed)
    df = pd.DataFrame({"latent": np.arange(Z.shape[1]), **{k: pearson(Z, v) for k, v in signals.items()},
                       "fire_rate": (Z > 0).mean(0)})  # fmt: skip
    df = df.iloc[np.argsort(-np.abs(df.r_td.to_numpy()), kind="stable")].reset_index(drop=True)
    return TDResult(site=site, fit=fit, logodds=logodds, td=td, latents=df, task=task)
