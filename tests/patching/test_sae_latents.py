"""SAE-latent patching (``core/patching/sae_latents.py``): exact patches against the SAE spliced in by hand,
attribution with plain and integrated gradients, labels on the rows, a SAE of another width refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import interplab as ilab
from tests.patching.torch_reference import CLEAN, CORRUPT, hf_run, hf_site, ig_reference, metric, tiny_sae
from tests.tiny import tiny_model


def test_latent_patching_matches_a_spliced_reference():
    m = tiny_model("gpt2")
    sae = tiny_sae(m, layer=0)
    out = ilab.patching.latents(m, sae, CLEAN, CORRUPT, metric(), top=4, positions=[-1, -2, -3, 2])
    att, ex = out["attribution"], out["exact"]
    assert att.values.shape == ex.values.shape == (4, 4)
    assert att.rows == ex.rows and ex.site == "latents" and ex.row_name == "latent" and ex.layer == 0
    ids_c, ids_x = m.to_tokens(CLEAN)["input_ids"], m.to_tokens(CORRUPT)["input_ids"]
    x_c, x_x = hf_site(m, ids_c, "resid_post", 0), hf_site(m, ids_x, "resid_post", 0)
    f_c, f_x = sae.encode(x_c).detach(), sae.encode(x_x).detach()
    a, w = (m.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (" Mary", " John"))
    for r, lat in enumerate(ex.rows):
        for c, p in enumerate(ex.positions):
            # The SAE spliced in with its error term, latent `lat` at position `p` set to its clean value.
            def splice(v, lat=lat, p=p):
                f = sae.encode(v).detach()
                err = v - sae.decode(f)
                f[:, p, lat] = f_c[:, p, lat]
                return sae.decode(f) + err

            logits, _ = hf_run(m, ids_x, "resid_post", 0, splice)
            assert ex.values[r, c] == pytest.approx(float(logits[0, a] - logits[0, w]), abs=1e-4)
    # The top latents are the ones with the largest |attribution| anywhere.
    full = ilab.patching.latents(m, sae, CLEAN, CORRUPT, metric(), top=48, exact=False)["attribution"]
    best = np.abs(full.values - full.corrupt_baseline).max(axis=1)
    top4 = sorted(np.argsort(-best)[:4].tolist())
    assert sorted(np.asarray(full.rows)[top4].tolist()) == sorted(
        ilab.patching.latents(m, sae, CLEAN, CORRUPT, metric(), top=4, exact=False)["attribution"].rows
    )
    assert f_x.shape == f_c.shape


def test_latent_rows_carry_the_saes_labels(tmp_path, monkeypatch):
    from interplab.core.features.labels import set_label
    from interplab.widgets.patching import PatchingGrid

    monkeypatch.setenv("INTERPLAB_CACHE", str(tmp_path))
    m = tiny_model("gpt2")
    sae = tiny_sae(m, layer=0)
    first = ilab.patching.latents(m, sae, CLEAN, CORRUPT, metric(), top=3, exact=False)["attribution"]
    assert first.row_text == ["", "", ""]
    set_label(sae, first.rows[1], "names <b>")
    res = ilab.patching.latents(m, sae, CLEAN, CORRUPT, metric(), top=3, exact=False)["attribution"]
    assert res.row_text == ["", "names <b>", ""]
    assert res.row_labels[1] == f"#{res.rows[1]} · names <b>" and res.row_labels[0] == f"#{res.rows[0]}"
    res.save(tmp_path / "r.npz")
    assert ilab.patching.PatchingResult.load(tmp_path / "r.npz").row_text == res.row_text
    (grid,) = PatchingGrid(res).grids
    assert grid["row_text"] == ["", "names <b>", ""]


@pytest.mark.parametrize("path", ilab.patching.PATHS)
def test_latent_integrated_gradients_use_the_path_gradient(path):
    m = tiny_model("gemma3")
    sae = tiny_sae(m, layer=1)
    answers = torch.tensor([m.tokenizer(" Mary", add_special_tokens=False)["input_ids"][0]])

    def prob(logits):  # log P(Mary)
        return torch.log_softmax(logits, -1)[:, answers[0]]

    out = ilab.patching.latents(m, sae, CLEAN, CORRUPT, prob, top=48, exact=False, steps=4, path=path)["attribution"]
    ids_c, ids_x = m.to_tokens(CLEAN)["input_ids"], m.to_tokens(CORRUPT)["input_ids"]
    grad = ig_reference(m, ids_c, ids_x, "resid_post", 1, 4, answers, path)[0]  # [P, D]
    f_c = sae.encode(hf_site(m, ids_c, "resid_post", 1)).detach()[0]
    f_x = sae.encode(hf_site(m, ids_x, "resid_post", 1)).detach()[0]
    expected = ((f_c - f_x) * (grad @ sae.W_dec.detach().T)).T  # [latents, P]
    scale = float(expected.abs().max())
    np.testing.assert_allclose(out.values - out.corrupt_baseline, expected[out.rows].numpy(), atol=1e-5)
    plain = ilab.patching.latents(m, sae, CLEAN, CORRUPT, prob, top=48, exact=False)["attribution"]
    one = ilab.patching.latents(m, sae, CLEAN, CORRUPT, prob, top=48, exact=False, steps=1)["attribution"]
    np.testing.assert_array_equal(one.values, plain.values)
    assert one.rows == plain.rows
    assert np.abs(plain.values[np.argsort(plain.rows)] - out.values[np.argsort(out.rows)]).max() > 1e-2 * scale


def test_latents_reject_a_sae_for_another_width():
    m = tiny_model("gpt2")
    sae = ilab.SAE.create("topk", d_in=m.d_model + 1, d_sae=8, k=2, site="blocks.0.hook_resid_post")
    with pytest.raises(ValueError, match="d_in"):
        ilab.patching.latents(m, sae, CLEAN, CORRUPT, metric())
