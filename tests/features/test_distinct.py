"""Near-duplicate top contexts (``core/features/distinct.py``) left out of the cards a dashboard shows."""

from __future__ import annotations

import numpy as np
from interplab.core.features.distinct import distinct_order, gather, repeats
from interplab.widgets import FeatureDashboard
from interplab.widgets._kit import payload_array

from tests.widgets.test_dashboard import hand_feature_data


def test_repeats_catch_the_same_context_and_a_shifted_one():
    sentence = np.arange(100, 130)
    tokens = np.stack([sentence[5:17], sentence[5:17], sentence[6:18], np.arange(12), sentence[12:24]])
    valid = np.ones(5, dtype=bool)
    assert repeats(tokens, valid, lead=8).tolist() == [False, True, True, False, False]  # 7 tokens on: new text
    valid[0] = False  # an empty example repeats nothing
    assert repeats(tokens, valid, lead=8).tolist() == [False, False, True, False, False]


def test_cards_leave_near_duplicate_top_contexts_out():
    data = hand_feature_data()
    data.top_tokens[5, 1] = data.top_tokens[5, 0]  # the same sentence twice among latent 5's top examples
    order = distinct_order(data.top_tokens[[4, 5]], data.top_max[[4, 5]], data.lead)
    assert order.tolist() == [[0, 1, 2], [0, 2, -1]]
    kept = gather({"top_max": data.top_max[[5]], "top_where": data.top_where[[5]]}, order[1:])
    assert kept["top_max"][0].tolist() == [data.top_max[5, 0], data.top_max[5, 2], 0.0]
    assert kept["top_where"][0, 2].tolist() == [-1, -1]
    card = data.latent(5)
    assert [e["max"] for e in card["top"]] == [float(data.top_max[5, 0]), float(data.top_max[5, 2])]
    assert data.top_max[5, 1] > 0  # the data keeps every example; the card shows the distinct ones
    w = FeatureDashboard(data, n_cards=12)
    row = w.sent.index(5)
    ex_max = payload_array(w.cards["ex_max"])[row, : data.n_top]
    np.testing.assert_array_equal(ex_max, [data.top_max[5, 0], data.top_max[5, 2], 0.0])
