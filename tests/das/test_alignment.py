"""IOI prompts over a few names per role, their split by value, and the interpretability measure of dictionaries."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from interplab.core.das.alignment import auroc
from interplab.core.das.intervene import source_values
from sklearn.metrics import roc_auc_score

import interplab as ilab
from tests.tiny import no_forward, tiny_model

SITE = "blocks.0.hook_resid_post"
IO, S = ["Mary", "cat", "bird"], ["John", "dog"]
TEMPLATES = ["When{A} and{B} went to the store,{S} gave a drink to", "When{A} and{B} sat on the mat,{S} gave a tree to"]


@pytest.fixture(scope="module")
def setup():
    model = tiny_model("gpt2")
    pairs = ilab.patching.ioi_balanced(model, IO, S, templates=TEMPLATES, corruption="flip", seed=1)
    return model, pairs


def test_balanced_prompts_hold_every_combination_once(setup):
    model, pairs = setup
    attrs = ilab.das.ioi_attributes(pairs)
    combos = sorted((r["io"], r["s"], r["order"], t) for r, t in zip(attrs, pairs.clean, strict=True))
    assert len(pairs) == 3 * 2 * 2 * 2 == len(set(combos))
    assert {(r["io"], r["s"], r["order"]) for r in attrs} == set(itertools.product(IO, S, ["ABBA", "BABA"]))
    again = ilab.patching.ioi_balanced(model, IO, S, templates=TEMPLATES, corruption="flip", seed=1)
    other = ilab.patching.ioi_balanced(model, IO, S, templates=TEMPLATES, corruption="flip", seed=2)
    assert again.clean == pairs.clean and other.clean != pairs.clean and sorted(other.clean) == sorted(pairs.clean)
    for text, corrupt, io in zip(pairs.clean, pairs.corrupt, pairs.answers, strict=True):
        assert corrupt.rsplit(",", 1)[1].split()[0] == io.strip()  # flip: the IO repeats
        assert text.rsplit(",", 1)[0] == corrupt.rsplit(",", 1)[0]
    shared = ilab.patching.ioi_balanced(model, ["Mary", "John"], ["Mary", "John"], templates=TEMPLATES[:1],
                                        corruption="flip")  # fmt: skip
    assert len(shared) == 2 * 2  # a name never plays both roles of one prompt


def test_split_keeps_every_value_in_both_halves(setup):
    _, pairs = setup
    fit, held = ilab.das.split_ioi(pairs, held_out=0.5, seed=0)
    assert sorted(fit.clean + held.clean) == sorted(pairs.clean) and not set(fit.clean) & set(held.clean)
    assert len(held) == len(pairs) // 2  # held_out of the prompts, every value already in both
    for a in ("io", "s", "order"):
        values = [{r[a] for r in ilab.das.ioi_attributes(p)} for p in (fit, held, pairs)]
        assert values[0] == values[1] == values[2]
    assert ilab.das.split_ioi(pairs, held_out=0.5, seed=0)[1].clean == held.clean
    assert ilab.das.split_ioi(pairs, held_out=0.5, seed=3)[1].clean != held.clean
    first_bird = [r["io"] for r in ilab.das.ioi_attributes(pairs)].index("bird")
    one_bird = _keep(pairs, lambda i, r: r["io"] != "bird" or i == first_bird)  # one prompt cannot be in both
    with pytest.raises(ValueError, match=r"io='bird' (is in fit_pairs but never in the held-out|of pairs is never in)"):
        ilab.das.split_ioi(one_bird, held_out=0.5)


def _keep(pairs, keep):
    """The pairs whose (index, attributes) ``keep`` accepts."""
    idx = [i for i, r in enumerate(ilab.das.ioi_attributes(pairs)) if keep(i, r)]
    return ilab.patching.PromptPairs(
        *([getattr(pairs, f)[i] for i in idx] for f in ("clean", "corrupt", "answers", "wrong"))
    )


def test_auroc_counts_pairs_with_ties_half():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 3, size=(40, 5)).astype(float)  # many ties, as SAE zeros give
    labels = rng.random(40) < 0.4
    brute = [
        np.mean([1.0 if p > n else 0.5 if p == n else 0.0 for p in col[labels] for n in col[~labels]])
        for col in scores.T
    ]
    np.testing.assert_allclose(auroc(scores, labels), brute)


def test_supervised_encode_and_its_random_control(setup):
    model, pairs = setup
    sup = ilab.das.supervised_dictionary(model, pairs, SITE)
    f = sup.latents.index(("io", "cat"))
    codes = sup.encode(sup.mean_D + sup.features["io"]["cat"])
    assert codes.shape == (len(sup.latents),) and float(codes[f]) == pytest.approx(1.0, abs=1e-4)
    rnd = sup.randomized(seed=1)
    assert torch.equal(rnd.mean_D, sup.mean_D) and rnd.latents == sup.latents
    torch.testing.assert_close(rnd.W_FD.norm(dim=1), sup.W_FD.norm(dim=1))
    cos = torch.nn.functional.cosine_similarity(rnd.W_FD, sup.W_FD, dim=1)
    assert cos.abs().max() < 0.9 and torch.equal(rnd.W_FD, sup.randomized(seed=1).W_FD)


def test_latent_alignment_picks_on_fit_and_scores_held_out(setup):
    model, pairs = setup
    fit, held = ilab.das.split_ioi(pairs, held_out=0.5)
    sup = ilab.das.supervised_dictionary(model, fit, SITE)
    sae = ilab.SAE.create("topk", d_in=model.d_model, d_sae=16, site=SITE, k=4)
    sae.init_weights(0)
    result = ilab.das.latent_alignment(model, fit, held, SITE, {"supervised": sup, "sae": sae}, seed=0)
    table = result.table
    assert len(table) == 2 * (3 + 2 + 2)
    x_fit, x_held = (source_values(model, SITE, p.clean, [-1])[:, 0].float() for p in (fit, held))
    y_fit, y_held = (np.array([r["io"] == "bird" for r in ilab.das.ioi_attributes(p)]) for p in (fit, held))
    codes_fit, codes_held = (sae.encode(x).detach().numpy() for x in (x_fit, x_held))
    fit_scores = [roc_auc_score(y_fit, c) for c in codes_fit.T]
    row = table.set_index(["dictionary", "attribute", "value"]).loc[("sae", "io", "bird")]
    assert row["fit_auroc"] == pytest.approx(max(fit_scores))
    best = int(row["latent"])
    assert fit_scores[best] == pytest.approx(max(fit_scores))
    assert row["held_auroc"] == pytest.approx(roc_auc_score(y_held, codes_held[:, best]))
    own = table.set_index(["dictionary", "attribute", "value"]).loc[("supervised", "io", "bird")]
    assert own["latent"] == "io=bird"  # the supervised feature of the value is its own best latent
    summary = result.summary.set_index("dictionary")
    assert set(summary.columns) == {"interpretability", "shuffled"}
    assert summary.loc["supervised", "interpretability"] > summary.loc["supervised", "shuffled"]
    assert result.chart().to_dict() and "interpretability" in repr(result) and "<table" in result._repr_html_()


def test_bad_splits_and_dictionaries_are_refused_before_any_forward_pass(setup):
    model, pairs = setup
    fit, held = ilab.das.split_ioi(pairs, held_out=0.5)
    no_bird = _keep(held, lambda i, r: r["io"] != "bird")
    sup = ilab.das.SupervisedDictionary(SITE, torch.zeros(model.d_model), {"io": {}, "s": {}, "order": {}})
    with no_forward(model):
        with pytest.raises(ValueError, match=r"io='bird' is in fit_pairs but never in the held-out pairs"):
            ilab.das.latent_alignment(model, fit, no_bird, SITE, {"sup": sup})
        with pytest.raises(ValueError, match=r"io='bird' is in fit_pairs but never in the held-out pairs"):
            ilab.das.compare_dictionaries(model, no_bird, SITE, fit_pairs=fit, ks=[1])
        with pytest.raises(ValueError, match=r"dictionaries\['w'\] writes 8 dimensions but"):
            ilab.das.latent_alignment(model, fit, held, SITE, {"w": ilab.SAE.create("topk", d_in=8, d_sae=4, k=1)})
        with pytest.raises(TypeError, match=r"dictionaries\['x'\] must be an SAE or a SupervisedDictionary"):
            ilab.das.latent_alignment(model, fit, held, SITE, {"x": "sae"})
        with pytest.raises(ValueError, match="held_out must be in"):
            ilab.das.split_ioi(pairs, held_out=1.5)
        with pytest.raises(ValueError, match="not single tokens"):
            ilab.patching.ioi_balanced(model, ["Zorro"], S, corruption="flip")
        with pytest.raises(ValueError, match="corruption='abc' needs five single-token names"):
            ilab.patching.ioi_balanced(model, IO, S)
