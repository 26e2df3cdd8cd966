"""Exact grids (``core/patching/grid.py``): batched cells against one plain forward per cell, directions,
positions, baselines, several pairs, remote-safety and the top tokens of each patch."""

from __future__ import annotations

import numpy as np
import pytest

import interplab as ilab
from tests.bars import RecordingBar
from tests.patching.torch_reference import CLEAN, CLEAN2, CORRUPT, CORRUPT2, metric, slow_grid
from tests.tiny import tiny_model


@pytest.mark.parametrize("site", ilab.patching.SITES)
def test_batched_grid_equals_one_forward_per_cell(model, site):
    result = ilab.patching.grid(model, CLEAN, CORRUPT, metric(), site=site)
    expected = slow_grid(model, CLEAN, CORRUPT, site)
    n_pos = len(model.to_str_tokens(CLEAN))
    assert result.values.shape == (model.n_layers, model.n_heads if site == "heads" else n_pos)
    np.testing.assert_allclose(result.values, expected, atol=1e-4)
    assert np.abs(expected - result.corrupt_baseline).max() > 1e-4  # the patches do something


def test_grid_noise_direction_and_positions(model):
    result = ilab.patching.grid(model, CLEAN, CORRUPT, metric(), site="mlp_out", positions=[0, -1, 5],
                                direction="noise")  # fmt: skip
    n_pos = len(model.to_str_tokens(CLEAN))
    assert result.positions == [0, n_pos - 1, 5]
    expected = slow_grid(model, CLEAN, CORRUPT, "mlp_out", positions=[0, n_pos - 1, 5], direction="noise")
    np.testing.assert_allclose(result.values, expected, atol=1e-4)


def test_grid_endpoints_are_the_baselines(model):
    """The last layer's resid_post at the last position is all the logits see: patching it gives the
    clean run exactly; patching the shared first token changes nothing."""
    r = ilab.patching.grid(model, CLEAN, CORRUPT, metric(), site="resid_post")
    assert r.normalized[-1, -1] == pytest.approx(1.0, abs=1e-4)
    assert r.values[:, 0] == pytest.approx(np.full(model.n_layers, r.corrupt_baseline), abs=1e-5)
    noise = ilab.patching.grid(model, CLEAN, CORRUPT, metric(), site="resid_post", direction="noise")
    assert noise.normalized[-1, -1] == pytest.approx(0.0, abs=1e-4)
    logits = model.logits([CLEAN, CORRUPT])[:, 0]
    a, w = model.tokenizer(" Mary", add_special_tokens=False)["input_ids"][0], model.tokenizer(" John")["input_ids"][-1]
    assert r.clean_baseline == pytest.approx(float(logits[0, a] - logits[0, w]), abs=1e-5)
    assert r.corrupt_baseline == pytest.approx(float(logits[1, a] - logits[1, w]), abs=1e-5)


def test_several_pairs_average_and_batch_size_does_not_matter():
    m = tiny_model("llama")
    answers = ilab.patching.logit_diff([" Mary", " dog"], [" John", " cat"])
    both = ilab.patching.grid(m, [CLEAN, CLEAN2], [CORRUPT, CORRUPT2], answers, site="attn_out", batch_size=3)
    one = ilab.patching.grid(m, CLEAN, CORRUPT, metric(), site="attn_out", batch_size=1)
    two = ilab.patching.grid(m, CLEAN2, CORRUPT2, ilab.patching.logit_diff(" dog", " cat"), site="attn_out")
    np.testing.assert_allclose(both.values, (one.values + two.values) / 2, atol=1e-5)
    assert both.clean_baseline == pytest.approx((one.clean_baseline + two.clean_baseline) / 2, abs=1e-5)
    assert both.tokens == m.to_str_tokens(CLEAN)


@pytest.mark.parametrize("fam", ["gpt2", "gemma3"])
def test_remote_local_matches_local(fam):
    local, remote = tiny_model(fam), tiny_model(fam, remote="local")
    for site in ("resid_pre", "heads"):
        a = ilab.patching.grid(local, CLEAN, CORRUPT, metric(), site=site, positions=[-1, -3])
        b = ilab.patching.grid(remote, CLEAN, CORRUPT, metric(), site=site, positions=[-1, -3])
        np.testing.assert_allclose(a.values, b.values, atol=1e-5)
    for steps, path in ((1, "embeddings"), (3, "embeddings"), (3, "site")):
        a = ilab.patching.attribution(local, CLEAN, CORRUPT, metric(), steps=steps, path=path)
        b = ilab.patching.attribution(remote, CLEAN, CORRUPT, metric(), steps=steps, path=path)
        for site in ilab.patching.SITES:
            np.testing.assert_allclose(a[site].values, b[site].values, atol=1e-5)


def test_top_tokens_of_each_patch(model):
    r = ilab.patching.grid(model, CLEAN, CORRUPT, metric(), site="resid_post", top_k=3)
    assert r.top_ids.shape == (model.n_layers, r.values.shape[1], 3)
    assert np.all(np.diff(r.top_probs, axis=-1) <= 1e-7)  # sorted
    # The cell that makes the run fully clean predicts the clean run's top tokens.
    clean_logits = model.logits(CLEAN)[0, 0]
    assert r.top_ids[-1, -1].tolist() == clean_logits.topk(3).indices.tolist()
    tops = r.top(model.n_layers - 1, r.values.shape[1] - 1)
    assert [t for t, _ in tops] == [model.tokenizer.decode([i]) for i in r.top_ids[-1, -1]]


@pytest.mark.parametrize("reuse_cache", [True, False])
def test_the_progress_bar_counts_every_layer_of_every_pass(reuse_cache):
    """The cached path advances once per layer; full passes once per pair and layer; the total says so up front."""
    m = tiny_model("llama")
    bar = RecordingBar()
    answers = ilab.patching.logit_diff([" Mary", " dog"], [" John", " cat"])
    ilab.patching.grid(m, [CLEAN, CLEAN2], [CORRUPT, CORRUPT2], answers, site="resid_pre", reuse_cache=reuse_cache,
                       progress=bar)  # fmt: skip
    steps = m.n_layers * (1 if reuse_cache else 2)
    assert (bar.total, bar.n) == (steps, steps)
    quiet = ilab.patching.grid(m, CLEAN, CORRUPT, metric(), site="resid_pre", progress=False)
    assert quiet.values.shape[0] == m.n_layers
    with pytest.raises(TypeError, match=r"progress must be True, False or a progress bar.*str: 'yes'"):
        ilab.patching.grid(m, CLEAN, CORRUPT, metric(), progress="yes")
