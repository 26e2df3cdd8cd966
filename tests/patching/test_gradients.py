"""Attribution patching (``core/patching/gradients.py``) against autograd through plain torch hooks: plain and
integrated gradients along both paths, and completeness at the embeddings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import interplab as ilab
from tests.bars import RecordingBar
from tests.patching.torch_reference import CLEAN, CLEAN2, CORRUPT, CORRUPT2, hf_run, hf_site, ig_reference, metric
from tests.tiny import tiny_model


def test_attribution_is_gradient_times_difference(model):
    ids_c, ids_x = model.to_tokens(CLEAN)["input_ids"], model.to_tokens(CORRUPT)["input_ids"]
    a, w = (model.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (" Mary", " John"))
    result = ilab.patching.attribution(model, CLEAN, CORRUPT, metric())
    assert set(result) == set(ilab.patching.SITES)
    for site in ilab.patching.SITES:
        r = result[site]
        assert r.method == "attribution" and r.site == site
        for layer in range(model.n_layers):
            clean_val = hf_site(model, ids_c, site, layer)
            holder = {}

            def edit(v, holder=holder):
                v = v.detach().requires_grad_(True)
                holder["v"] = v
                return v

            logits, _ = hf_run(model, ids_x, site, layer, edit, grad=True)
            (grad,) = torch.autograd.grad(logits[0, a] - logits[0, w], holder["v"])
            prod = ((clean_val - holder["v"].detach()) * grad)[0]
            if site == "heads":
                expected = prod.reshape(prod.shape[0], model.n_heads, -1).sum(dim=(0, 2))
            else:
                expected = prod.sum(-1)
            np.testing.assert_allclose(r.values[layer] - r.corrupt_baseline, expected.numpy(), atol=1e-4)


def test_attribution_tracks_exact_on_attn_out():
    m = tiny_model("gpt2")
    exact = ilab.patching.grid(m, CLEAN, CORRUPT, metric(), site="attn_out")
    approx = ilab.patching.attribution(m, CLEAN, CORRUPT, metric(), sites="attn_out", positions=None)
    assert isinstance(approx, ilab.patching.PatchingResult)
    assert approx.clean_baseline == pytest.approx(exact.clean_baseline, abs=1e-5)
    assert np.corrcoef(exact.values.ravel(), approx.values.ravel())[0, 1] > 0.9


@pytest.mark.parametrize("path", ilab.patching.PATHS)
def test_integrated_gradients_equal_a_plain_torch_reference(model, monkeypatch, path):
    """Two pairs, a non-linear metric (its gradient differs at each point of the path), every site kind."""
    clean, corrupt = [CLEAN, CLEAN2], [CORRUPT, CORRUPT2]
    ids_c, ids_x = model.to_tokens(clean)["input_ids"], model.to_tokens(corrupt)["input_ids"]
    answers = torch.tensor([model.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (" Mary", " dog")])

    def prob(logits, pair):  # log P(answer of each pair): a custom metric
        return torch.log_softmax(logits, -1)[torch.arange(len(pair)), answers[pair]]

    plain = ilab.patching.attribution(model, clean, corrupt, prob)
    one = ilab.patching.attribution(model, clean, corrupt, prob, steps=1)
    for site in ilab.patching.SITES:  # steps=1 is plain attribution patching, bit for bit
        np.testing.assert_array_equal(one[site].values, plain[site].values)
    result = ilab.patching.attribution(model, clean, corrupt, prob, steps=3, path=path)
    changes = []
    for site in ilab.patching.SITES:
        r = result[site]
        for layer in range(model.n_layers):
            grad = ig_reference(model, ids_c, ids_x, site, layer, 3, answers, path)
            prod = (hf_site(model, ids_c, site, layer) - hf_site(model, ids_x, site, layer)) * grad
            if site == "heads":
                expected = prod.reshape(*prod.shape[:2], model.n_heads, -1).sum(dim=(0, 1, 3))
            else:
                expected = prod.sum(dim=(0, 2))
            np.testing.assert_allclose(r.values[layer] - r.corrupt_baseline, expected.numpy(), atol=1e-5)
        changes.append(np.abs(r.values - one[site].values).max() / np.abs(r.values - r.corrupt_baseline).max())
    assert max(changes) > 0.02  # the path changes the estimate (so the reference tells the two apart)
    # One point of the path per batch gives the same numbers as all points in one batch.
    monkeypatch.setattr(ilab.core.patching.prepare, "MEMORY_BUDGET_BYTES", 1)
    chunked = ilab.patching.attribution(model, clean, corrupt, prob, sites="mlp_out", steps=3, path=path)
    np.testing.assert_allclose(chunked.values, result["mlp_out"].values, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("fam", ["gpt2", "gemma3"])
def test_integrated_gradients_are_complete_at_the_embeddings(fam):
    """Integrated gradients at the first block's input sum (over positions) to metric(clean) - metric(corrupt)."""
    m = tiny_model(fam)
    errors = []
    for steps in (1, 8, 64):
        r = ilab.patching.attribution(m, CLEAN, CORRUPT, metric(), sites="resid_pre", steps=steps)
        total = r.clean_baseline - r.corrupt_baseline
        errors.append(abs((r.values[0] - r.corrupt_baseline).sum() - total))
    assert abs(total) > 1e-3
    assert errors[2] < 0.02 * abs(total) and errors[2] < errors[1] / 3 and errors[2] < errors[0] / 3


@pytest.mark.parametrize(
    ("steps", "path", "passes"), [(1, "embeddings", 1), (5, "embeddings", 5), (3, "site", 3 * 2 * 2)]
)
def test_the_progress_bar_counts_the_gradient_points(steps, path, passes):
    """One plain gradient; ``steps`` points on the embedding path; ``steps`` per site and layer on the site path."""
    m = tiny_model("gpt2")
    bar = RecordingBar()
    ilab.patching.attribution(m, CLEAN, CORRUPT, metric(), sites=["resid_pre", "mlp_out"], steps=steps, path=path,
                              progress=bar)  # fmt: skip
    assert m.n_layers == 2 and (bar.total, bar.n) == (passes, passes)
