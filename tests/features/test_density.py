"""The density filter of top-latent lists: where the density comes from, and what it leaves out."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.features.cards import text_latents
from interplab.core.features.density import latent_density

import interplab as ilab
from tests.features.test_features import SITE, make_sae
from tests.tiny import tiny_model

TEXT = "the cat sat on the mat"


def top_without(acts: torch.Tensor, dense: np.ndarray, k: int) -> np.ndarray:
    return acts.masked_fill(torch.from_numpy(dense), -float("inf")).topk(k, dim=1).indices.numpy()


def test_active_latents_leave_out_latents_the_sae_says_are_dense():
    model, sae = tiny_model("gemma3"), make_sae(d_sae=48, seed=1)
    acts = sae.encode(model.collect(TEXT, SITE)[SITE][0, 1:]).detach()
    plain = ilab.features.active_latents(sae, model, TEXT, top=3)
    assert plain.density_filter.startswith("no density filter (density unknown")  # nothing to go by: all kept
    np.testing.assert_array_equal(plain.ids, acts.topk(3, dim=1).indices.numpy())
    rates = torch.full((48,), 0.01)
    rates[plain.ids[:, 0]] = 0.5  # every token's strongest latent fires on half of all tokens
    sae.firing_rates = rates
    dense = (rates > 0.1).numpy()
    found = ilab.features.active_latents(sae, model, TEXT, top=3)
    np.testing.assert_array_equal(found.ids, top_without(acts, dense, 3))
    assert not set(found.ids.ravel().tolist()) & set(np.flatnonzero(dense).tolist())
    assert found.density_filter == (
        "latents firing on more than 10% of tokens left out (density: the SAE's stored firing rates)"
    )
    # the fraction is a parameter; None keeps every latent
    np.testing.assert_array_equal(ilab.features.active_latents(sae, model, TEXT, top=3, max_density=0.6).ids, plain.ids)
    np.testing.assert_array_equal(
        ilab.features.active_latents(sae, model, TEXT, top=3, max_density=None).ids, plain.ids
    )
    # a density given by the caller comes first
    given = np.zeros(48)
    np.testing.assert_array_equal(ilab.features.active_latents(sae, model, TEXT, top=3, density=given).ids, plain.ids)


def test_text_latents_take_the_density_of_feature_data():
    model, sae = tiny_model("gemma3"), make_sae(d_sae=48, seed=1)
    data = ilab.feature_data(sae, model, [TEXT, "a dog ran to the house"], progress=False, n_top=2, n_quantile=2,
                             context=4, lead=2, seq_len=8)  # fmt: skip
    assert latent_density(sae, data).source == f"feature data over {data.n_tokens} tokens"
    out = text_latents(sae, model, TEXT, latent=0, top=4, density=data)
    acts = sae.encode(model.collect(TEXT, SITE)[SITE][0, 1:]).detach()
    dense = data.density > 0.1
    assert dense.any() and (~dense).sum() >= 4
    np.testing.assert_array_equal(out["top_ids"], top_without(acts, dense, 4))
    assert "feature data over" in out["density_filter"]


@pytest.mark.embedded
def test_the_densest_embedded_latents_leave_the_lists(embedded):
    """The packaged layer-6 SAE's densest latents (firing on 40-60% of tokens) top every token's list unless the
    filter is on; by default none of them is listed."""
    sae = ilab.load_sae("embedded", layer=6)
    dense = set(np.flatnonzero(sae.firing_rates.numpy() > 0.1).tolist())
    text = "The council will meet on Friday evening in the city hall."
    unfiltered = ilab.features.active_latents(sae, embedded, text, max_density=None)
    assert len(set(unfiltered.ids.ravel().tolist()) & dense) >= 3
    found = ilab.features.active_latents(sae, embedded, text)
    assert not set(found.ids.ravel().tolist()) & dense
