"""ilab.features.contrast: latents ranked by how much more they fire on positive texts than on negative ones."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.features.contrast import Contrast

import interplab as ilab
from tests.features.test_features import SITE, make_sae
from tests.tiny import tiny_model

POSITIVE = ["the cat sat on the mat", "a cat and a dog", "the cat ran"]
NEGATIVE = ["Mary gave a drink to John", "when John went to the store", "the house was red"]


def per_text(sae, model, texts, positions="all"):
    """Per text, its activations averaged over its tokens (BOS left out) or at its last token, by hand."""
    out = []
    for text in texts:
        x = model.collect(text, SITE)[SITE][0, 1:]
        with torch.no_grad():
            z = sae.encode(x.float())
        out.append(z.mean(0) if positions == "all" else z[-1])
    return torch.stack(out)


@pytest.fixture(scope="module")
def setup():
    return tiny_model("gemma3"), make_sae(d_sae=48, seed=2)


@pytest.mark.parametrize("positions", ["all", "last"])
def test_ranks_latents_by_the_difference_of_per_text_means(setup, positions):
    model, sae = setup
    pos, neg = per_text(sae, model, POSITIVE, positions), per_text(sae, model, NEGATIVE, positions)
    diff = (pos.mean(0) - neg.mean(0)).numpy()
    found = ilab.features.contrast(sae, model, POSITIVE, NEGATIVE, positions=positions, top=5, max_density=None)
    want = [i for i in np.argsort(-diff, kind="stable") if diff[i] > 0][:5]
    assert found.ids.tolist() == want
    np.testing.assert_allclose(found.scores, diff[want], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(found.positive_mean, pos.mean(0).numpy()[want], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(found.negative_mean, neg.mean(0).numpy()[want], rtol=1e-4, atol=1e-6)
    assert found.density_filter == "no density filter" and found.n_left_out == 0
    # on the texts it was made from, held_out gives back its own differences
    np.testing.assert_allclose(found.held_out(sae, model, POSITIVE, NEGATIVE), found.scores, rtol=1e-4, atol=1e-6)


def test_standardized_difference_divides_by_the_pooled_spread(setup):
    model, sae = setup
    pos, neg = per_text(sae, model, POSITIVE), per_text(sae, model, NEGATIVE)
    d = ((pos.mean(0) - neg.mean(0)) / ((pos.var(0) + neg.var(0)) / 2).sqrt().clamp_min(1e-6)).numpy()
    found = ilab.features.contrast(sae, model, POSITIVE, NEGATIVE, statistic="standardized", max_density=None)
    want = [i for i in np.argsort(-d, kind="stable") if d[i] > 0][:20]
    assert found.ids.tolist() == want
    np.testing.assert_allclose(found.scores, d[want], rtol=1e-3)


def test_dense_latents_are_left_out_by_default(setup):
    """Without a density of its own the SAE's is measured on the negative texts; latents firing on more than 10%
    of their tokens leave the ranking, and the repr says so."""
    model, sae = setup
    neg_tokens = torch.cat([sae.encode(model.collect(t, SITE)[SITE][0, 1:]).detach() for t in NEGATIVE])
    rate = (neg_tokens > 0).float().mean(0).numpy()
    unfiltered = ilab.features.contrast(sae, model, POSITIVE, NEGATIVE, max_density=None, top=48)
    found = ilab.features.contrast(sae, model, POSITIVE, NEGATIVE, top=48)
    assert (rate[unfiltered.ids] > 0.1).any(), "the test needs a dense latent among the unfiltered ones"
    assert found.ids.tolist() == [i for i in unfiltered.ids.tolist() if rate[i] <= 0.1]
    np.testing.assert_allclose(found.densities, rate[found.ids], rtol=1e-6)
    assert found.n_left_out == int((rate > 0.1).sum())
    assert "measured on the negative texts" in found.density_filter
    assert "more than 10% of tokens left out" in repr(found)
    # a density given (one fraction per latent, or FeatureData) is used instead
    given = np.zeros(48)
    given[found.ids[0]] = 0.5
    again = ilab.features.contrast(sae, model, POSITIVE, NEGATIVE, top=48, density=given)
    assert found.ids[0] not in again.ids and again.density_filter.endswith("(density: given)")
    assert ilab.features.contrast(sae, model, POSITIVE, NEGATIVE, max_density=0.5, density=given).n_left_out == 0


def test_the_result_reads_as_a_table(setup):
    model, sae = setup
    found = ilab.features.contrast(sae, model, POSITIVE, NEGATIVE, top=3, max_density=None)
    assert isinstance(found, Contrast) and len(found) == 3
    text = repr(found)
    lines = text.splitlines()
    assert lines[0].startswith("Contrast(3 latents by diff of all-token activations, 3 positive vs 3 negative")
    assert lines[1].split() == ["latent", "score", "positive", "negative", "density", "label"]
    assert [int(line.split()[0]) for line in lines[2:]] == found.ids.tolist()
    table = found.table()
    assert table.index.tolist() == found.ids.tolist() and list(table.columns) == [
        "score", "positive_mean", "negative_mean", "density", "label"
    ]  # fmt: skip


def test_bad_input_is_refused_before_any_forward_pass(setup, monkeypatch):
    model, sae = setup

    def no_run(*args, **kwargs):
        raise AssertionError("the model ran")

    monkeypatch.setattr(model, "run_sites", no_run)
    with pytest.raises(ValueError, match="positions='first'"):
        ilab.features.contrast(sae, model, POSITIVE, NEGATIVE, positions="first")
    with pytest.raises(ValueError, match=r"density needs one value per latent, shape \(48,\)"):
        ilab.features.contrast(sae, model, POSITIVE, NEGATIVE, density=np.zeros(3))
    with pytest.raises(TypeError, match="negative: texts\\[1\\] is int"):
        ilab.features.contrast(sae, model, POSITIVE, ["fine", 3])


# ---------------------------------------------------------------- embedded
TRAIN_POSITIVE = [
    "It rained all day and the storm flooded the streets.",
    "Heavy snow fell overnight across the valley.",
    "The forecast calls for thunder and strong winds.",
    "A cold wind blew and the sky turned grey with clouds.",
    "Fog and drizzle covered the coast this morning.",
    "The hurricane brought rain and gusts of wind.",
]
TRAIN_NEGATIVE = [
    "The committee approved the new budget on Tuesday.",
    "She bought a red dress at the market.",
    "The team scored two goals in the second half.",
    "He wrote a letter to his brother in Chicago.",
    "The company reported higher profits this year.",
    "They painted the kitchen and fixed the door.",
]
HELD_OUT_POSITIVE = [
    "A sudden storm brought hail and rain to the town.",
    "Snow and ice made the roads slippery.",
    "Clouds gathered and it began to pour.",
    "The wind howled through the trees during the blizzard.",
]
HELD_OUT_NEGATIVE = [
    "The senator gave a speech about taxes.",
    "The children played chess after school.",
    "He sold his car to a neighbour.",
    "The museum opened a new gallery of paintings.",
]


def claim_holds(held_out_diff: np.ndarray) -> bool:
    """The check a contrast's top latents must pass on new texts: at least 4 of 5 more active on the held-out
    positive texts than on the negative ones, by 0.05 on average."""
    return int((held_out_diff > 0).sum()) >= 4 and float(held_out_diff.mean()) >= 0.05


@pytest.mark.embedded
def test_weather_latents_hold_on_held_out_texts_and_random_latents_do_not(embedded):
    """On the embedded model with its layer-6 SAE, the top 5 latents of weather vs other news text are more active
    on weather texts they were not found from; 20 draws of 5 random latents, checked the same way, all fail."""
    sae = ilab.load_sae("embedded", layer=6)
    found = ilab.features.contrast(sae, embedded, TRAIN_POSITIVE, TRAIN_NEGATIVE, top=5)
    assert len(found) == 5 and found.n_left_out > 0 and "the SAE's stored firing rates" in found.density_filter
    assert (found.densities <= 0.1).all()
    held = found.held_out(sae, embedded, HELD_OUT_POSITIVE, HELD_OUT_NEGATIVE)
    assert claim_holds(held), (found, held)
    # the control: random latents through the same check
    pos = ilab.features.text_activations(sae, embedded, HELD_OUT_POSITIVE)
    neg = ilab.features.text_activations(sae, embedded, HELD_OUT_NEGATIVE)
    diff = pos.mean(0) - neg.mean(0)
    np.testing.assert_allclose(diff[found.ids], held, rtol=1e-4, atol=1e-6)
    rng = np.random.default_rng(0)
    draws = [rng.choice(sae.d_sae, 5, replace=False) for _ in range(20)]
    assert not any(claim_holds(diff[ids]) for ids in draws)
    # without the density filter, the densest latents (firing on 40-46% of tokens) crowd in
    unfiltered = ilab.features.contrast(sae, embedded, TRAIN_POSITIVE, TRAIN_NEGATIVE, top=10, max_density=None)
    assert (unfiltered.densities > 0.3).sum() >= 3
