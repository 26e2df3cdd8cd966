"""knob_separation on a tiny model: the separation is Cohen's d of the intents' projections on the direction,
every model of the fine-tune is measured, and the correlation is read beside random directions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.das.separation import cohens_d

import interplab as ilab
from tests.das.test_das import SITE
from tests.das.test_finetune import ITEMS, SETTINGS


def _last_token(model: ilab.Model, texts: list[str]) -> torch.Tensor:
    acts = model.collect(texts, SITE)
    values, lengths = acts.values[SITE], acts.mask.sum(1)
    return torch.stack([values[b, int(lengths[b]) - 1] for b in range(len(texts))])


def test_separation_is_cohens_d_along_the_direction_for_every_model(gpt2):
    task = ilab.das.KnobTask(ITEMS)
    tuning = ilab.das.finetune_intents(gpt2, task, **{**SETTINGS, "blocks": 2, "snapshots": [2]})
    assert sorted(tuning.snapshots) == [2] and tuning.at(2).losses == tuning.losses[:2]
    ctx, pri = (_last_token(gpt2, task.prompts(i)) for i in ("context", "prior"))
    unit = (ctx.mean(0) - pri.mean(0)) / (ctx.mean(0) - pri.mean(0)).norm()  # the plain model's mean difference
    das = ilab.das.DASResult(SITE, [-1], unit[:, None], 0, 0, 0, 0, 0, [], {})
    variants = {"plain": None, "step 2": tuning.at(2), "tuned": tuning}
    sep = ilab.das.knob_separation(gpt2, task, das, variants, n_random=8)
    assert sep.models == ["plain", "step 2", "tuned"] and sep.random_separation.shape == (3, 8)
    expected = cohens_d((ctx @ unit)[:, None], (pri @ unit)[:, None])
    assert sep.separation[0] == pytest.approx(float(expected[0]), rel=1e-4)
    # the mean difference is the direction that separates the plain model's intents most (more than random ones)
    assert sep.separation[0] > sep.random_separation[0].max()
    with tuning.applied(gpt2):
        tuned = task.accuracy(gpt2)
        ctx_t, pri_t = (_last_token(gpt2, task.prompts(i)) for i in ("context", "prior"))
    assert sep.following["prior"][2] == tuned["prior"] and sep.following["context"][2] == tuned["context"]
    assert sep.separation[2] == pytest.approx(float(cohens_d((ctx_t @ unit)[:, None], (pri_t @ unit)[:, None])[0]),
                                              rel=1e-4)  # fmt: skip
    ctrl = sep.control
    assert ctrl.random.shape == (8,) and (np.isnan(sep.pearson) or ctrl.learned == pytest.approx(sep.pearson))
    assert len(sep.to_pandas()) == 3 and sep.chart() is not None and "Pearson" in repr(sep)


def test_snapshots_are_kept_by_the_job_and_the_correlations_are_plain_statistics(gpt2, tmp_path):
    settings = {**SETTINGS, "snapshots": [1, 3]}
    first = ilab.das.finetune_intents(gpt2, ilab.das.KnobTask(ITEMS), path=tmp_path, **settings)
    again = ilab.das.finetune_intents(gpt2, ilab.das.KnobTask(ITEMS), path=tmp_path, **settings)
    assert sorted(again.snapshots) == [1, 3]
    for step in (1, 3):
        for path, (A, B) in first.at(step).adapter.items():
            assert torch.equal(again.at(step).adapter[path][0], A) and torch.equal(again.at(step).adapter[path][1], B)
    sep = ilab.das.KnobSeparation(
        ["a", "b", "c", "d"], {"context": np.array([1.0, 1, 1, 1]), "prior": np.array([0.0, 0.2, 0.6, 1.0])},
        np.array([0.1, 0.5, 0.4, 2.0]), np.zeros((4, 3)), SITE)  # fmt: skip
    follow = np.array([0.5, 0.6, 0.8, 1.0])
    assert np.allclose(sep.mean_following, follow)
    assert sep.pearson == pytest.approx(float(np.corrcoef(follow, sep.separation)[0, 1]))
    assert sep.spearman == pytest.approx(0.8)  # ranks 0, 2, 1, 3 against 0, 1, 2, 3


def test_each_model_is_measured_along_its_own_knob(gpt2):
    task = ilab.das.KnobTask(ITEMS)
    tuning = ilab.das.finetune_intents(gpt2, task, **{**SETTINGS, "snapshots": [2]})
    variants = {"plain": None, "step 2": tuning.at(2), "tuned": tuning}
    knobs = ilab.das.fit_knobs(gpt2, task.pairs(), variants, SITE, epochs=1, batch_size=4, progress=False)
    assert list(knobs) == list(variants) and all(k.site == SITE and k.k == 1 for k in knobs.values())
    with tuning.applied(gpt2):  # the tuned model's knob is the fit under its adapter
        tuned = ilab.das.fit(gpt2, task.pairs(), SITE, k=1, epochs=1, batch_size=4, progress=False)
    assert torch.equal(knobs["tuned"].Q_DK, tuned.Q_DK)
    own = ilab.das.knob_separation(gpt2, task, knobs, variants, n_random=8)
    for i, name in enumerate(variants):  # each row is that model measured along its own knob
        shared = ilab.das.knob_separation(gpt2, task, knobs[name], variants, n_random=8, seed=1 + i)
        assert own.separation[i] == pytest.approx(float(shared.separation[i]))
        # and along random directions of its own (the shared knob's seed + the model's index)
        assert np.array_equal(own.random_separation[i], shared.random_separation[i])
    assert np.array_equal(own.mean_following, shared.mean_following)
    assert not np.array_equal(own.random_separation[0], own.random_separation[1])
