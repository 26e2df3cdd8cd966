"""Latent memorization: sequences seen once that look forgotten, come back under weight noise, and the
cross-entropy diagnostic that finds them.

On a run of ``planted.train_planted`` (a tiny model trained with planted random sequences, each in
exactly one batch, and never-seen control sequences drawn the same way):

* **Looks forgotten**: at the final checkpoint, greedy decoding from the sequence's prefix does not give
  it back (its teacher-forced recall, the fraction of suffix tokens that are the model's top choice,
  is below ``memorized``: 1.0 means verbatim).
* **Comes back under perturbation**: Gaussian noise on every weight (``sigma`` times the weight
  tensor's root mean square), averaged over ``seeds``, lowers the sequence's cross-entropy by more than
  it lowers all but a fraction ``alpha`` of the controls' (noise moves every loss; the controls say how
  much by chance; each control is held against the others). Recall under noise is reported too; on a
  tiny model it is rarely above zero, so the loss is the finer measure.
* **Uncovered later**: the sequence's loss, less the controls' median, falls between the first checkpoint
  after its one exposure and the last (:func:`uncovered_later`); controls take the same steps as
  pseudo-exposures.
* **Against chance**: each claim has its control's rate and a one-sided p (:func:`one_sided_p`), and
  :func:`null_run` puts never-exposed controls in place of the planted sequences, so every claim
  (:meth:`MemorizationResult.claims`) can be seen to fail without exposure.
* **The cross-entropy diagnostic**: a sequence is flagged when its cross-entropy at the final checkpoint
  is below the ``alpha`` quantile of the controls' (a never-seen sequence that low is a 1-in-``1/alpha``
  event). Its precision and recall against the planted set say how well the loss alone tells seen-once
  sequences from never-seen ones, where greedy decoding (the recall above) says they were forgotten.

Example
-------
>>> run = train_planted(tiny_lm(), byte_stream(docs), plant(64, 24), plant(64, 24, seed=1))
>>> mem = latent_memorization(run, sigma=0.05, seeds=(0, 1, 2))
>>> mem.metrics["precision"], mem.metrics["recall"]
>>> mem.claims(), latent_memorization(null_run(run)).claims()
>>> mem.table                               # suite, site, group, metric, value
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..checks import check_fraction, check_int, check_number
from ..views.charts import offline
from .planted import PlantedRun, check_sequences, sequence_losses
from .tidy import tidy

SITE = "tiny_lm"


def perturbed_losses(
    lm: torch.nn.Module, seqs_NL: torch.Tensor, sigma: float = 0.05, seeds: Sequence[int] = (0, 1, 2),
    prefix: int = 8,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Cross-entropy and recall of each sequence under Gaussian weight noise, one row per seed: ([S, N], [S, N]).

    Each weight tensor ``p`` gets ``sigma * rms(p) * N(0, 1)`` noise drawn from ``seed``; the weights are
    restored exactly afterwards (also on error).

    >>> ce_SN, recall_SN = perturbed_losses(lm, planted, sigma=0.05, seeds=(0, 1, 2))
    """
    check_sequences(lm, seqs_NL)
    if check_number(sigma, "sigma") <= 0:
        raise ValueError(f"sigma must be positive, got {sigma!r}.")
    seeds = [check_int("seeds[]", s) for s in seeds]
    if not seeds:
        raise ValueError("seeds is empty: give at least one seed.")
    check_int("prefix", prefix, minimum=1, maximum=seqs_NL.shape[1] - 1)
    params = [p for p in lm.parameters()]
    saved = [p.detach().clone() for p in params]
    ces, recalls = [], []
    try:
        for seed in seeds:
            gen = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                for p, p0 in zip(params, saved, strict=True):
                    rms = p0.float().pow(2).mean().sqrt()
                    noise = torch.randn(p0.shape, generator=gen, dtype=torch.float32)
                    p.copy_(p0 + (sigma * rms * noise).to(p0.dtype))
            ce_N, recall_N = sequence_losses(lm, seqs_NL, prefix=prefix)
            ces.append(ce_N)
            recalls.append(recall_N)
    finally:
        with torch.no_grad():
            for p, p0 in zip(params, saved, strict=True):
                p.copy_(p0)
    return torch.stack(ces), torch.stack(recalls)


def ce_diagnostic(ce_N: Any, control_ce_M: Any, alpha: float = 0.05) -> np.ndarray:
    """The seed's cross-entropy test: True where a sequence's loss is below the controls' ``alpha`` quantile.

    >>> ce_diagnostic([1.0, 3.0], [2.0, 2.5, 3.0, 3.5], alpha=0.25)
    array([ True, False])
    """
    alpha = check_fraction("alpha", alpha)
    ce_N = np.asarray(ce_N, dtype=np.float64).reshape(-1)
    control_M = np.asarray(control_ce_M, dtype=np.float64).reshape(-1)
    if control_M.size == 0:
        raise ValueError("control_ce_M is empty: the diagnostic's threshold comes from never-seen controls.")
    if not (np.isfinite(ce_N).all() and np.isfinite(control_M).all()):
        raise ValueError("cross-entropies must be finite.")
    return ce_N < np.quantile(control_M, alpha)


def null_run(run: PlantedRun) -> PlantedRun:
    """The control in place of ``run``: its never-exposed controls split in two, the first half given the
    planted sequences' exposure steps as if they had been shown, the second half as controls.

    Every figure of :func:`latent_memorization` computed on it is what chance gives: a claim that holds
    on ``run`` and on ``null_run(run)`` alike is not about exposure.

    >>> chance = latent_memorization(null_run(run))
    """
    if not isinstance(run, PlantedRun):
        raise TypeError(f"run must be a PlantedRun (from train_planted), got {type(run).__name__}.")
    n_fake = len(run.controls) // 2
    if n_fake < 1:
        raise ValueError(f"null_run needs at least 2 controls to split, the run has {len(run.controls)}.")
    seen_at = [run.seen_at[i % len(run.seen_at)] for i in range(n_fake)]
    h = run.history[~run.history.planted]
    fake = h[h.sequence < n_fake].assign(planted=True, seen_at=lambda d: d.sequence.map(seen_at.__getitem__))
    rest = h[h.sequence >= n_fake].assign(sequence=lambda d: d.sequence - n_fake)
    history = pd.concat([fake, rest]).sort_values(["step", "planted"], ascending=[True, False], kind="stable")
    return PlantedRun(lm=run.lm, planted=run.controls[:n_fake], controls=run.controls[n_fake:], seen_at=seen_at,
                      history=history.reset_index(drop=True), prefix=run.prefix)  # fmt: skip


def uncovered_later(run: PlantedRun, margin: float = 0.1) -> pd.DataFrame:
    """Per sequence: does its loss fall after its only exposure, without another one?

    A sequence's *excess* at a checkpoint is its cross-entropy minus the controls' median there (what
    training does to every sequence of the alphabet cancels). ``excess_first`` is at the first
    checkpoint at or after its exposure step, ``excess_final`` at the last; the sequence is
    ``uncovered`` when the excess fell by more than ``margin`` nats between them. Control ``i`` takes
    planted ``i``'s exposure step (cyclically) as a pseudo-exposure, so both groups are measured over
    the same spans of training.

    >>> later = uncovered_later(run, margin=0.1)
    >>> later.groupby("planted").uncovered.sum()
    """
    if not isinstance(run, PlantedRun):
        raise TypeError(f"run must be a PlantedRun (from train_planted), got {type(run).__name__}.")
    if check_number(margin, "margin") < 0:
        raise ValueError(f"margin must be a non-negative number of nats, got {margin!r}.")
    h = run.history
    median = h[~h.planted].groupby("step").ce.median()
    excess = h.assign(excess=h.ce - h.step.map(median)).pivot_table(
        index=["planted", "sequence"], columns="step", values="excess"
    )
    steps = np.asarray(excess.columns)
    rows = []
    for planted, sequence in excess.index:
        exposed = run.seen_at[sequence % len(run.seen_at)]
        first = int(steps[np.searchsorted(steps, exposed)]) if exposed <= steps[-1] else int(steps[-1])
        e_first, e_final = excess.loc[(planted, sequence), first], excess.loc[(planted, sequence), steps[-1]]
        rows.append({"planted": bool(planted), "sequence": int(sequence), "exposed_at": exposed, "first_step": first,
                     "excess_first": e_first, "excess_final": e_final})  # fmt: skip
    df = pd.DataFrame(rows).sort_values(["planted", "sequence"], ascending=[False, True], ignore_index=True)
    df["drop"] = df.excess_first - df.excess_final
    df["uncovered"] = df["drop"] > margin
    return df


def one_sided_p(planted_hits: Any, control_hits: Any) -> float:
    """Fisher's exact test that the planted group's rate of True exceeds the controls' (one-sided p).

    >>> one_sided_p([True] * 9 + [False], [False] * 9 + [True])
    0.0005...
    """
    from scipy.stats import fisher_exact

    a, b = np.asarray(planted_hits, dtype=bool).reshape(-1), np.asarray(control_hits, dtype=bool).reshape(-1)
    for name, hits in (("planted_hits", a), ("control_hits", b)):
        if hits.size == 0:
            raise ValueError(f"{name} is empty: each group needs at least one sequence.")
    table = [[int(a.sum()), int((~a).sum())], [int(b.sum()), int((~b).sum())]]
    return float(fisher_exact(table, alternative="greater").pvalue)


def precision_recall(flagged: Any, truth: Any) -> tuple[float, float]:
    """Precision and recall of boolean ``flagged`` against boolean ``truth`` (NaN where undefined)."""
    flagged, truth = np.asarray(flagged, dtype=bool), np.asarray(truth, dtype=bool)
    tp = float((flagged & truth).sum())
    precision = tp / flagged.sum() if flagged.any() else float("nan")
    recall = tp / truth.sum() if truth.any() else float("nan")
    return precision, recall


def _above_controls(gain: np.ndarray, planted: np.ndarray, alpha: float) -> np.ndarray:
    """True where ``gain`` exceeds the controls' ``1 - alpha`` quantile; a control is held against the others."""
    control = gain[~planted]
    above = gain > np.quantile(control, 1 - alpha)
    idx = np.flatnonzero(~planted)
    for j, i in enumerate(idx):
        others = np.delete(control, j)
        above[i] = gain[i] > np.quantile(others, 1 - alpha) if others.size else False
    return above


def _recovery_rates(df: pd.DataFrame) -> dict[str, float]:
    """Recovered fraction of the looks-forgotten planted sequences, of the controls, and the one-sided p."""
    hits, control = df.recovered[df.planted & df.looks_forgotten], df.recovered[~df.planted]
    rate = float(hits.mean()) if len(hits) else float("nan")
    p = one_sided_p(hits, control) if len(hits) else float("nan")
    return {"recovery_rate": rate, "recovery_rate_control": float(control.mean()), "recovery_p": p}


def _uncovered_counts(run: PlantedRun, margin: float) -> dict[str, float]:
    """:func:`uncovered_later`'s counts for planted sequences and controls, and the one-sided p."""
    later = uncovered_later(run, margin)
    hits, control = later.uncovered[later.planted], later.uncovered[~later.planted]
    return {"n_uncovered": float(hits.sum()), "n_uncovered_control": float(control.sum()),
            "uncovered_p": one_sided_p(hits, control), "margin": float(margin)}  # fmt: skip


@dataclass(repr=False)
class MemorizationResult:
    """Per-sequence figures (``sequences``), the summary ``metrics``, the tidy ``table``, the run's ``history``."""

    sequences: pd.DataFrame
    metrics: dict[str, float]
    table: pd.DataFrame
    history: pd.DataFrame

    def claims(self, p: float = 0.05) -> dict[str, bool]:
        """The seed paper's claims, each True where this run bears it out against its control.

        ``diagnostic``: the loss tells seen-once from never-seen (precision > 0.6, recall > 0.1);
        ``forgotten_yet_flagged``: planted sequences greedy decoding does not give back are flagged more
        than twice as often as controls; ``uncovered_later``: more planted sequences than controls are
        uncovered later in training (one-sided ``uncovered_p`` < ``p``); ``recovered_under_noise``:
        weight noise recovers looks-forgotten planted sequences at a higher rate than controls
        (``recovery_p`` < ``p``). On :func:`null_run` of any run each should be False but by chance.

        >>> latent_memorization(run).claims()["recovered_under_noise"]
        """
        p = check_fraction("p", p)
        m, df = self.metrics, self.sequences
        forgotten = df.flagged[df.planted & df.looks_forgotten]
        control_rate = float(df.flagged[~df.planted].mean())
        return {
            "diagnostic": bool(m["precision"] > 0.6 and m["recall"] > 0.1),
            "forgotten_yet_flagged": bool(len(forgotten) and forgotten.mean() > 2 * control_rate),
            "uncovered_later": bool(m["n_uncovered"] > m["n_uncovered_control"] and m["uncovered_p"] < p),
            "recovered_under_noise": bool(m["recovery_rate"] > m["recovery_rate_control"] and m["recovery_p"] < p),
        }

    def chart(self) -> Any:
        """Planted against control cross-entropy through training (median and the 10-90% band)."""
        import altair as alt

        h = self.history.assign(kind=self.history.planted.map({True: "planted (seen once)", False: "control"}))
        stats = h.groupby(["step", "kind"]).ce.describe(percentiles=[0.1, 0.5, 0.9]).reset_index()
        base = alt.Chart(stats).encode(x=alt.X("step:Q"), color=alt.Color("kind:N", title=None))
        band = base.mark_area(opacity=0.2).encode(y=alt.Y("10%:Q", title="cross-entropy (nats/token)"), y2="90%:Q")
        return offline(
            (band + base.mark_line().encode(y="50%:Q")).properties(
                width=420, height=220, title="Per-sequence cross-entropy through training"
            )
        )

    def __repr__(self) -> str:
        m = self.metrics
        return (f"MemorizationResult({int(m['n_planted'])} planted: diagnostic precision {m['precision']:.2f}, "
                f"recall {m['recall']:.2f}; {int(m['n_latent'])} latent)")  # fmt: skip


def latent_memorization(
    run: PlantedRun, sigma: float = 0.05, seeds: Sequence[int] = (0, 1, 2), alpha: float = 0.05,
    memorized: float = 1.0, margin: float = 0.1,
) -> MemorizationResult:  # fmt: skip
    """Looks-forgotten, recovered-under-noise, uncovered-later and diagnostic figures for ``run``'s sequences.

    Each claim comes with its control's figure and a one-sided p (Fisher's exact test): recovery under
    noise (``recovery_rate`` of looks-forgotten planted sequences against ``recovery_rate_control``,
    ``recovery_p``) and uncovering later in training (:func:`uncovered_later` with ``margin``:
    ``n_uncovered`` against ``n_uncovered_control``, ``uncovered_p``).

    >>> mem = latent_memorization(run, sigma=0.05, seeds=(0, 1, 2))
    >>> mem.sequences.query("planted and latent")
    """
    if not isinstance(run, PlantedRun):
        raise TypeError(f"run must be a PlantedRun (from train_planted), got {type(run).__name__}.")
    alpha = check_fraction("alpha", alpha)
    memorized = check_fraction("memorized", memorized, high="]")
    if check_number(margin, "margin") < 0:
        raise ValueError(f"margin must be a non-negative number of nats, got {margin!r}.")
    seqs = torch.cat([run.planted, run.controls])
    planted = np.r_[np.ones(len(run.planted), bool), np.zeros(len(run.controls), bool)]
    ce_pert_SN, recall_pert_SN = perturbed_losses(run.lm, seqs, sigma=sigma, seeds=seeds, prefix=run.prefix)
    final = run.history[run.history.step == run.history.step.max()]
    final = pd.concat([final[final.planted], final[~final.planted]])
    df = pd.DataFrame({
        "planted": planted, "sequence": final.sequence.to_numpy(), "seen_at": final.seen_at.to_numpy(),
        "ce_final": final.ce.to_numpy(), "recall_final": final.recall.to_numpy(),
        "ce_perturbed": ce_pert_SN.mean(0).numpy(), "recall_perturbed": recall_pert_SN.mean(0).numpy(),
    })  # fmt: skip
    gain = (df.ce_final - df.ce_perturbed).to_numpy()
    df["looks_forgotten"] = df.recall_final < memorized
    df["noise_gain"] = gain
    df["recovered"] = df.looks_forgotten & _above_controls(gain, planted, alpha)
    df["flagged"] = ce_diagnostic(df.ce_final, df.ce_final[~planted], alpha)
    df["latent"] = df.planted & df.looks_forgotten & df.flagged
    precision, recall = precision_recall(df.flagged, planted)
    rec_p, rec_r = precision_recall(df.flagged[df.looks_forgotten], df.recovered[df.looks_forgotten])
    metrics = {
        "n_planted": float(planted.sum()), "n_controls": float((~planted).sum()),
        "precision": precision, "recall": recall,
        "n_looks_forgotten": float((df.planted & df.looks_forgotten).sum()),
        "n_recovered": float((df.planted & df.recovered).sum()),
        **_recovery_rates(df),
        **_uncovered_counts(run, margin),
        "n_latent": float(df.latent.sum()),
        "recovered_precision": rec_p, "recovered_recall": rec_r,
        "ce_final_planted": float(df.ce_final[planted].mean()),
        "ce_final_controls": float(df.ce_final[~planted].mean()),
        "sigma": float(sigma), "alpha": alpha,
    }  # fmt: skip
    return MemorizationResult(sequences=df, metrics=metrics, table=tidy("memorization", SITE, metrics),
                              history=run.history)  # fmt: skip
