"""The latent search's index: the tokens each latent fires on most and the tokens it promotes most."""

from __future__ import annotations

import numpy as np
from interplab.core.features.search_index import FIRES, PROMOTES, search_index

import interplab as ilab
from tests.widgets.test_dashboard import hand_feature_data


def test_search_finds_a_latent_by_a_token_it_only_promotes():
    """' tok120' is promoted by some latents and fired on by none: the search finds exactly the promoters."""
    data = hand_feature_data()
    token = 120
    fired = set(np.where(data.top_max > 0, data.top_tokens[:, :, data.lead], -1).ravel().tolist())
    assert token not in fired
    promoters = sorted({int(i) for i in np.flatnonzero((data.logit_top_ids == token).any(1))})
    assert promoters
    assert ilab.features.search_latents(data, "TOK120 ").tolist() == promoters
    # a promoted token with a negative effect is not "promoted"
    data.logit_top_values[promoters[0]] = -1.0
    assert promoters[0] not in ilab.features.search_latents(data, "tok120").tolist()


def test_the_index_names_why_each_text_is_there():
    data = hand_feature_data()
    index = search_index(data, n_promoted=2)
    assert index.starts.shape == (data.d_sae + 1,) and index.entries.shape == index.kinds.shape
    for i in (0, 5):
        part = slice(index.starts[i], index.starts[i + 1])
        texts = {(index.texts[e], int(k)) for e, k in zip(index.entries[part], index.kinds[part])}
        fires = {(t.strip().lower(), FIRES) for t in data.max_tokens(i) if t.strip()}
        promotes = {(data.token_str(t).strip().lower(), PROMOTES) for t in data.logit_top_ids[i, :2].tolist()}
        assert texts == fires | promotes
    assert len(set(index.texts)) == len(index.texts)  # each distinct text once
    assert index.searched == "id, label, the tokens it fires on most, the 2 tokens it promotes most"
    fires, promotes = index.token_hits("tok1")
    assert fires.shape == promotes.shape == (data.d_sae,) and promotes.any()
