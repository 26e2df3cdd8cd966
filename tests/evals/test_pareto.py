"""PS-Eval against the MSE-L0 frontier: the frontier gap, the sweep table against each part alone, the control."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.evals.pareto import frontier_gap, pareto
from interplab.core.evals.polysemy import polysemy
from scipy.stats import spearmanr

import interplab as ilab
from tests.evals.test_polysemy import SITE, WORDS
from tests.tiny import tiny_hf_model, tiny_tokenizer


def _sae(k: int, seed: int) -> ilab.SAE:
    sae = ilab.SAE.create("topk", d_in=32, d_sae=16, k=k, site=SITE)
    sae.init_weights(seed=seed)
    return sae


def test_frontier_gap_is_zero_on_the_frontier_and_the_log_distance_above_it() -> None:
    l0 = [2.0, 4.0, 4.0, 8.0, 16.0]
    nmse = [0.8, 0.4, 0.5, 0.6, 0.1]
    # brute force: the lowest nmse among SAEs with at most the same L0
    best = [min(m for l2, m in zip(l0, nmse, strict=True) if l2 <= l1) for l1 in l0]
    expected = np.log10(nmse) - np.log10(best)
    np.testing.assert_allclose(frontier_gap(l0, nmse), expected)
    assert frontier_gap(l0, nmse)[[0, 1, 4]].tolist() == [0.0, 0.0, 0.0]
    assert frontier_gap(l0, nmse)[3] == pytest.approx(np.log10(0.6 / 0.4))


def test_the_sweep_table_matches_each_measure_alone() -> None:
    model = ilab.load_model(tiny_hf_model("gpt2"), tokenizer=tiny_tokenizer())
    saes = [_sae(2, 1), _sae(4, 2), _sae(8, 3), _sae(8, 4)]
    with torch.no_grad():
        saes[3].W_dec.mul_(4.0)  # the same sparsity, a worse reconstruction: above the frontier
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))
    result = pareto(saes, model, {SITE: x}, WORDS, names=["a", "b", "c", "d"], progress=False)
    table = result.table
    assert table["name"].tolist() == ["a", "b", "c", "d"]
    for sae, (_, row) in zip(saes, table.iterrows(), strict=True):
        with torch.no_grad():
            z = sae.encode(x)
            recon = sae.decode(z)
        assert row["l0"] == pytest.approx(float((z > 0).sum(1).float().mean()))
        mse = float(((recon - x) ** 2).sum(1).mean())
        assert row["mse"] == pytest.approx(mse, rel=1e-5)
        assert row["nmse"] == pytest.approx(mse / float(((x - x.mean(0)) ** 2).sum(1).mean()), rel=1e-5)
        alone = polysemy(sae, model, WORDS, progress=False).metrics
        assert row["accuracy"] == pytest.approx(alone["accuracy"]) and row["recall"] == pytest.approx(alone["recall"])
    np.testing.assert_allclose(table["frontier_gap"], frontier_gap(table["l0"], table["nmse"]))
    assert table["on_frontier"].tolist() == (table["frontier_gap"] == 0).tolist()
    assert table["frontier_gap"].iloc[3] > 0 and table["frontier_gap"].nunique() > 1
    rho, p = result.rank_correlation("accuracy")
    want = spearmanr(-table["frontier_gap"], table["accuracy"])
    assert (rho, p) == pytest.approx((want[0], want[1]), nan_ok=True)
    assert "hconcat" in result.chart("recall").to_dict()
    with pytest.raises(ValueError, match=r"metric: 'f1' is not one of \['accuracy'"):
        result.rank_correlation("f1")


def test_a_bad_acts_width_fails_before_any_forward_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    model = ilab.load_model(tiny_hf_model("gpt2"), tokenizer=tiny_tokenizer())
    monkeypatch.setattr(type(model), "run_sites", lambda *a, **k: pytest.fail("a forward pass ran"))
    with pytest.raises(ValueError, match=r"must be a tensor \[tokens >= 2, 32\], got \(10, 31\)"):
        pareto([_sae(2, 1), _sae(4, 2)], model, torch.zeros(10, 31), WORDS)


def test_the_claim_against_the_control_fails_when_the_sweep_is_the_control() -> None:
    # the notebook asserts sweep.beats(random SAEs' PS-Eval): with the learned SAEs replaced by the random
    # control itself the assertion must fail, and a control that scores lower than the sweep must pass it
    model = ilab.load_model(tiny_hf_model("gpt2"), tokenizer=tiny_tokenizer())
    randoms = [_sae(3, seed) for seed in (5, 6, 7)]
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(1))
    as_sweep = pareto(randoms, model, x, WORDS, progress=False)
    control = polysemy(randoms, model, WORDS, progress=False)
    assert len({round(r.metrics["accuracy"], 6) for r in control}) > 1  # not one answer repeated
    for metric in ("accuracy", "recall", "specificity"):
        assert not as_sweep.beats(control, metric)
    worst = min(control, key=lambda r: r.metrics["accuracy"])
    assert as_sweep.table["accuracy"].mean() > worst.metrics["accuracy"]
    assert as_sweep.beats([worst], "accuracy")
    with pytest.raises(ValueError, match="control must be a non-empty list of PolysemyResult"):
        as_sweep.beats([], "accuracy")
