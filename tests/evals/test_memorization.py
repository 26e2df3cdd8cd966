"""Latent memorization on a tiny byte-level GPT-2: losses against brute force, the diagnostic, resume, bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from interplab.core.evals import memorization as mem_module
from interplab.core.evals import planted as tiny_module
from interplab.core.storage import resumable

import interplab as ilab

ev = ilab.evals


@pytest.fixture(scope="module")
def stream() -> torch.Tensor:
    text = "the quick brown fox jumps over the lazy dog. " * 40
    return ev.byte_stream([text, "a second document, with other words in it."])


def _lm(seed: int = 0) -> torch.nn.Module:
    return ev.tiny_lm(n_layer=1, d_model=32, n_head=2, n_ctx=32, seed=seed)


def _brute_losses(lm, seqs, prefix):
    """One sequence at a time, one position at a time: -log softmax of the next token, and whether it is the argmax."""
    ces, recalls = [], []
    with torch.no_grad():
        for seq in seqs:
            logits = lm(seq[None]).logits[0]
            nll, hit = [], []
            for t in range(prefix, len(seq)):
                row = logits[t - 1]
                nll.append(float(torch.logsumexp(row, 0) - row[seq[t]]))
                hit.append(float(int(row.argmax()) == int(seq[t])))
            ces.append(np.mean(nll))
            recalls.append(np.mean(hit))
    return np.array(ces), np.array(recalls)


def test_stream_and_planted_bytes_do_not_overlap(stream: torch.Tensor) -> None:
    planted = ev.plant(5, 12, seed=0)
    assert planted.shape == (5, 12) and planted.dtype == torch.int64
    assert set(planted.flatten().tolist()) <= set(tiny_module.ALPHABET)
    assert not set(stream.tolist()) & set(tiny_module.ALPHABET)
    assert torch.equal(ev.plant(5, 12, seed=0), planted) and not torch.equal(ev.plant(5, 12, seed=1), planted)
    assert ev.byte_stream(["ab\x01", "c"]).tolist() == [97, 98, 10, 99]


def test_sequence_losses_match_brute_force() -> None:
    lm = _lm()
    seqs = ev.plant(5, 10, seed=3)
    ce, recall = ev.sequence_losses(lm, seqs, prefix=4, batch_size=2)
    want_ce, want_recall = _brute_losses(lm, seqs, prefix=4)
    np.testing.assert_allclose(ce.numpy(), want_ce, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(recall.numpy(), want_recall)


def test_perturbed_losses_are_the_mean_of_noisy_copies_and_restore_the_weights() -> None:
    lm = _lm()
    seqs = ev.plant(4, 10, seed=2)
    before = {n: p.detach().clone() for n, p in lm.named_parameters()}
    ce_SN, recall_SN = ev.perturbed_losses(lm, seqs, sigma=0.1, seeds=(5, 6), prefix=3)
    for n, p in lm.named_parameters():
        assert torch.equal(p, before[n]), n
    for row, seed in enumerate((5, 6)):  # brute force: a fresh copy with the same noise, drawn by hand
        noisy = _lm()
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in noisy.parameters():
                p.add_(0.1 * p.pow(2).mean().sqrt() * torch.randn(p.shape, generator=gen))
        want_ce, want_recall = _brute_losses(noisy, seqs, prefix=3)
        np.testing.assert_allclose(ce_SN[row].numpy(), want_ce, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(recall_SN[row].numpy(), want_recall)
    assert not torch.allclose(ce_SN[0], ev.sequence_losses(lm, seqs, prefix=3)[0])


def test_ce_diagnostic_against_a_count() -> None:
    rng = np.random.default_rng(0)
    controls = rng.normal(5, 1, 200)
    ce = np.r_[rng.normal(3, 0.5, 30), rng.normal(5, 1, 30)]
    flagged = ev.ce_diagnostic(ce, controls, alpha=0.1)
    below = np.array([(controls <= c).mean() < 0.1 for c in ce])  # a control quantile, counted
    assert (flagged == below).mean() > 0.95  # they differ only at the quantile's interpolation
    assert flagged[:30].mean() > 0.8 and flagged[30:].mean() < 0.3
    assert ev.ce_diagnostic([1.0, 3.0], [2.0, 2.5, 3.0, 3.5], alpha=0.25).tolist() == [True, False]
    assert mem_module.precision_recall([True, True, False], [True, False, True]) == (0.5, 0.5)


def test_training_sees_each_planted_sequence_once_and_the_diagnostic_finds_them(stream) -> None:
    torch.manual_seed(0)
    planted, controls = ev.plant(6, 16, seed=0), ev.plant(6, 16, seed=1)
    run = ev.train_planted(_lm(), stream, planted, controls, steps=24, every=8, batch_size=2, lr=1e-2,
                           prefix=4, progress=False)  # fmt: skip
    assert run.seen_at == [1, 3, 5, 7, 9, 11]
    assert sorted(run.history.step.unique()) == [0, 8, 16, 24]
    assert len(run.history) == 4 * 12 and set(run.history.columns) >= {"step", "sequence", "planted", "ce", "recall"}
    last = run.history[run.history.step == 24]
    np.testing.assert_allclose(last[last.planted].ce.to_numpy(),
                               ev.sequence_losses(run.lm, planted, prefix=4)[0].numpy(), rtol=1e-5)  # fmt: skip
    # seen once at lr 1e-2, the planted sequences' loss is below the never-seen controls'
    assert last[last.planted].ce.mean() < last[~last.planted].ce.mean()
    res = ev.latent_memorization(run, sigma=0.05, seeds=(0, 1), alpha=0.2)
    df = res.sequences
    assert len(df) == 12 and df.planted.sum() == 6
    np.testing.assert_array_equal(df.flagged, ev.ce_diagnostic(df.ce_final, df.ce_final[~df.planted], 0.2))
    p, r = mem_module.precision_recall(df.flagged, df.planted)
    assert (res.metrics["precision"], res.metrics["recall"]) == (p, r) or np.isnan(p)
    assert set(res.table.columns) == {"suite", "site", "group", "metric", "value"}
    assert (res.table.suite == "memorization").all()
    assert res.chart() is not None and "planted" in repr(res)


def test_a_resumed_run_equals_an_uninterrupted_one(stream, tmp_path, monkeypatch) -> None:
    planted, controls = ev.plant(4, 12, seed=0), ev.plant(4, 12, seed=1)
    kwargs = dict(steps=12, every=4, batch_size=2, lr=1e-2, prefix=4, progress=False)
    whole = ev.train_planted(_lm(), stream, planted, controls, **kwargs)
    calls = []
    real_save = resumable.save_state

    def save_then_die(*args, **kw):
        real_save(*args, **kw)
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed right after the second checkpoint (step 8)

    monkeypatch.setattr(resumable, "save_state", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        ev.train_planted(_lm(), stream, planted, controls, folder=tmp_path / "job", **kwargs)
    monkeypatch.setattr(resumable, "save_state", real_save)
    resumed = ev.train_planted(_lm(seed=9), stream, planted, controls, folder=tmp_path / "job", **kwargs)
    np.testing.assert_allclose(resumed.history.ce.to_numpy(), whole.history.ce.to_numpy(), rtol=1e-5, atol=1e-6)
    for (n, a), b in zip(whole.lm.named_parameters(), resumed.lm.parameters(), strict=True):
        torch.testing.assert_close(a, b, msg=n)
    with pytest.raises(ValueError, match="steps"):  # other settings: refused, naming what differs
        ev.train_planted(_lm(), stream, planted, controls, folder=tmp_path / "job", **{**kwargs, "steps": 16})


def test_a_resume_on_another_stream_of_the_same_length_and_sum_is_refused(stream, tmp_path) -> None:
    """The stream is recorded by its token digest: a permutation (same length, same sum) is another stream."""
    planted, controls = ev.plant(2, 12, seed=0), ev.plant(2, 12, seed=1)
    kwargs = dict(steps=4, every=2, batch_size=2, lr=1e-2, prefix=4, progress=False, folder=tmp_path / "job")
    ev.train_planted(_lm(), stream, planted, controls, **kwargs)
    flipped = stream.flip(0)
    assert len(flipped) == len(stream) and int(flipped.sum()) == int(stream.sum())
    with pytest.raises(ValueError, match=r"other inputs than this call's \(stream\.sha256"):
        ev.train_planted(_lm(), flipped, planted, controls, **kwargs)


def test_bad_input_fails_before_any_step(stream, monkeypatch) -> None:
    def no_batches(*args):
        raise AssertionError("a batch was drawn")

    monkeypatch.setattr(tiny_module, "_batch", no_batches)
    lm, ok = _lm(), ev.plant(4, 12)
    with pytest.raises(ValueError, match=r"length 40; the model reads 2\.\.32"):
        ev.train_planted(lm, stream, ev.plant(4, 40), ev.plant(4, 40, seed=1), steps=10)
    with pytest.raises(ValueError, match="planted is empty"):
        ev.train_planted(lm, stream, ok[:0], ok, steps=10)
    with pytest.raises(ValueError, match="one length"):
        ev.train_planted(lm, stream, ok, ev.plant(4, 10), steps=10)
    with pytest.raises(ValueError, match="need at least 8 steps"):
        ev.train_planted(lm, stream, ok, ok, steps=6)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ev.sequence_losses(lm, ok + 300)
    with pytest.raises(ValueError, match=r"prefix must be an integer in 1\.\.11"):
        ev.sequence_losses(lm, ok, prefix=12)
    with pytest.raises(ValueError, match="seeds is empty"):
        ev.perturbed_losses(lm, ok, seeds=())
    with pytest.raises(ValueError, match="control_ce_M is empty"):
        ev.ce_diagnostic([1.0], [])
    with pytest.raises(ValueError, match=r"alpha must be in \(0, 1\)"):
        ev.ce_diagnostic([1.0], [2.0], alpha=1.5)
    with pytest.raises(TypeError, match="run must be a PlantedRun"):
        ev.latent_memorization("run")


def _synthetic_run(excess_planted: list[list[float]], seen_at: list[int], steps: list[int]) -> ilab.evals.PlantedRun:
    """A run whose history is written by hand: four controls at 5.0 nats at every step, planted as given."""
    rows = []
    for k, step in enumerate(steps):
        for i, curve in enumerate(excess_planted):
            rows.append({"step": step, "sequence": i, "planted": True, "seen_at": seen_at[i], "ce": 5.0 + curve[k],
                         "recall": 0.0})  # fmt: skip
        for j in range(4):
            rows.append({"step": step, "sequence": j, "planted": False, "seen_at": -1, "ce": 5.0, "recall": 0.0})
    n = len(excess_planted)
    return ilab.evals.PlantedRun(lm=_lm(), planted=ev.plant(n, 12), controls=ev.plant(4, 12, seed=1), seen_at=seen_at,
                                 history=pd.DataFrame(rows), prefix=4)  # fmt: skip


def test_uncovered_later_counts_a_fall_after_the_first_checkpoint_past_exposure() -> None:
    # planted 0 shown at step 3: first checkpoint 10 (excess 0.0), final -0.5: uncovered.
    # planted 1 shown at step 12: first checkpoint 20 (excess -0.3), final -0.35: a fall of 0.05, under the margin.
    # planted 2 shown at step 3: its loss rises after exposure: not uncovered.
    run = _synthetic_run([[0.0, 0.0, -0.2, -0.5], [0.0, -1.0, -0.3, -0.35], [0.0, -0.4, -0.2, 0.0]],
                         seen_at=[3, 12, 3], steps=[0, 10, 20, 30])  # fmt: skip
    later = ev.uncovered_later(run, margin=0.1)
    got = later[later.planted].set_index("sequence")
    assert got.first_step.tolist() == [10, 20, 10]
    np.testing.assert_allclose(got["drop"].to_numpy(), [0.5, 0.05, -0.4], atol=1e-12)
    assert got.uncovered.tolist() == [True, False, False]
    controls = later[~later.planted]
    assert len(controls) == 4 and not controls.uncovered.any()
    assert controls.exposed_at.tolist() == [3, 12, 3, 3]  # the planted schedule, cyclically
    assert ev.uncovered_later(run, margin=0.0).uncovered[later.planted].tolist() == [True, True, False]


def test_one_sided_p_against_a_hypergeometric_count() -> None:
    from math import comb

    planted, controls = [True] * 6 + [False] * 4, [True] * 2 + [False] * 8
    # P(at least 6 of the 8 hits fall in the planted 10 of 20), counted
    want = sum(comb(10, k) * comb(10, 8 - k) for k in range(6, 9)) / comb(20, 8)
    assert ev.one_sided_p(planted, controls) == pytest.approx(want)
    assert ev.one_sided_p(controls, planted) > 0.9


def test_null_run_gives_half_the_controls_the_planted_schedule(stream) -> None:
    planted, controls = ev.plant(4, 12, seed=0), ev.plant(6, 12, seed=1)
    run = ev.train_planted(_lm(), stream, planted, controls, steps=8, every=4, batch_size=2, prefix=4, progress=False)
    null = ev.null_run(run)
    assert torch.equal(null.planted, controls[:3]) and torch.equal(null.controls, controls[3:])
    assert null.seen_at == run.seen_at[:3]
    h, real = null.history, run.history[~run.history.planted]
    assert len(h) == 3 * 6 and h.planted.sum() == 3 * 3
    for step in (0, 4, 8):
        at, real_at = h[h.step == step], real[real.step == step].set_index("sequence").ce
        np.testing.assert_array_equal(at[at.planted].ce.to_numpy(), real_at.loc[[0, 1, 2]].to_numpy())
        np.testing.assert_array_equal(at[~at.planted].ce.to_numpy(), real_at.loc[[3, 4, 5]].to_numpy())
    assert (h[h.planted].seen_at.to_numpy() == np.tile(run.seen_at[:3], 3)).all()


def test_a_run_with_a_fall_after_exposure_bears_out_uncovered_later() -> None:
    """The claim's positive case, by hand: 12 planted sequences all fall by 0.5 nats after exposure."""
    run = _synthetic_run([[0.0, 0.0, -0.5]] * 12, seen_at=[1] * 12, steps=[0, 10, 20])
    counts = mem_module._uncovered_counts(run, margin=0.1)
    assert counts["n_uncovered"] == 12 and counts["n_uncovered_control"] == 0 and counts["uncovered_p"] < 0.05


def test_every_claim_fails_on_the_null_run(stream) -> None:
    """The claims the notebook asserts, computed with never-exposed controls in place of the planted sequences."""
    torch.manual_seed(0)
    planted, controls = ev.plant(16, 16, seed=0), ev.plant(48, 16, seed=1)
    run = ev.train_planted(_lm(), stream, planted, controls, steps=40, every=10, batch_size=2, lr=1e-2,
                           prefix=4, progress=False)  # fmt: skip
    null = ev.latent_memorization(ev.null_run(run), sigma=0.05, seeds=(0, 1, 2), alpha=0.05)
    assert null.metrics["n_planted"] == 24 and null.metrics["n_controls"] == 24
    assert null.claims() == {"diagnostic": False, "forgotten_yet_flagged": False, "uncovered_later": False,
                             "recovered_under_noise": False}  # fmt: skip
    real = ev.latent_memorization(run, sigma=0.05, seeds=(0, 1, 2), alpha=0.05)
    assert set(real.claims()) == set(null.claims())
    assert 0 <= real.metrics["recovery_rate"] <= 1 and 0 <= real.metrics["recovery_p"] <= 1


def test_recovery_rates_hold_a_planted_rate_above_the_controls_against_them() -> None:
    """By hand: 10 looks-forgotten planted sequences, 8 recovered; 20 controls, 1 recovered."""
    df = pd.DataFrame({"planted": [True] * 10 + [False] * 20, "looks_forgotten": True,
                       "recovered": [True] * 8 + [False] * 2 + [True] + [False] * 19})  # fmt: skip
    rates = mem_module._recovery_rates(df)
    assert rates["recovery_rate"] == 0.8 and rates["recovery_rate_control"] == 0.05
    assert rates["recovery_p"] == pytest.approx(ev.one_sided_p([True] * 8 + [False] * 2, [True] + [False] * 19))
    assert rates["recovery_p"] < 0.001


def test_a_control_is_held_against_the_other_controls() -> None:
    gain = np.array([5.0, 0.0, 1.0, 2.0, 3.0])
    planted = np.array([True, False, False, False, False])
    # alpha 0.5: the planted gain against the median of all four controls (1.5); each control against the
    # median of the other three: 2.0 and 3.0 are above theirs (1.0), 0.0 and 1.0 are not (2.0).
    assert mem_module._above_controls(gain, planted, 0.5).tolist() == [True, False, False, True, True]
