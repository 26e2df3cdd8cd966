"""layer_search scored by short DAS fits (the knob paper's linear-time search) on a tiny model: each layer's score
is a short fit's held-out IIA (recomputed here from the site's own prepared pairs), the full swap is reported beside
it, and DAS is fitted in full only at the top layers by that score."""

from __future__ import annotations

import numpy as np
import torch
from interplab.core.das.fit import split
from interplab.core.das.intervene import prepare
from interplab.core.das.search import short_das_iia

import interplab as ilab
from tests.das.test_das import BASE, SOURCE, pairs_for

SEARCH = {"top": 1, "score_pairs": 8, "score_epochs": 2, "lr": 0.05, "batch_size": 4,
          "epochs": 2, "progress": False}  # fmt: skip


def test_das_scoring_ranks_layers_by_short_fits_and_keeps_the_full_swap(gpt2):
    pairs = pairs_for(gpt2, BASE, SOURCE) + pairs_for(gpt2, SOURCE, BASE)
    search = ilab.das.layer_search(gpt2, pairs, score="das", **SEARCH)
    plain = ilab.das.layer_search(gpt2, pairs, **SEARCH)
    assert search.scoring == "das" and plain.scoring == "full_swap"
    assert np.array_equal(search.full_swap, plain.score) and np.array_equal(plain.full_swap, plain.score)
    # the score is a short fit's IIA on the held-out pairs, its training pairs the first score_pairs of the train split
    train, test = split(len(pairs), 0.25, 0)
    for i, layer in enumerate(search.layers):
        prep = prepare(gpt2, pairs[torch.cat([train[:8], test])], f"blocks.{layer}.hook_resid_post", [-1])
        split_idx = (torch.arange(8), torch.arange(8, 8 + len(test)))
        assert search.score[i] == short_das_iia(gpt2, prep, split_idx, 1, 2, 0.05, 4, 0)
    best = int(np.argmax(search.score))  # the earliest of the highest short-fit scores
    assert search.best_layer == int(search.layers[best]) and search.best.site == f"blocks.{best}.hook_resid_post"
    assert [bool(np.isnan(v)) for v in search.iia] == [i != best for i in range(2)]  # top=1: one full fit
    assert search.iia[best] == search.best.iia and search.best.full_iia == search.full_swap[best]
    assert search.full_swap_layer == int(search.layers[int(np.argmax(search.full_swap))])
    df = search.to_pandas()
    assert list(df.columns) == ["layer", "full_swap", "das_iia", "das_score"] and "das_score" not in plain.to_pandas()
    assert "short fits" in str(search.chart().to_dict()) and "scored by DAS" in repr(search)
