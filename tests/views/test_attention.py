"""The attention view's data on the embedded model, whose weights are bfloat16 by default."""

from __future__ import annotations

import numpy as np
import pytest

import interplab as ilab


@pytest.mark.embedded
def test_attention_rows_are_probabilities_in_bfloat16(embedded):
    """Eager attention rounds a bfloat16 model's probabilities to 8 bits (rows summed to 1 only within
    ~1e-2, and the tour's check failed); the view renormalises each query's row in float32."""
    data = ilab.attention_data(embedded, "When Mary and John went to the store, John gave a drink to", layers=[0, 12])
    assert data.patterns.dtype == np.float32 and data.patterns.shape[:2] == (2, 4)
    np.testing.assert_allclose(data.patterns.sum(-1), 1.0, atol=1e-5)
    assert (np.triu(data.patterns[..., :, :], k=1) == 0).all()  # causal: no weight on later tokens


def test_hiding_the_first_key_renormalises_rows_or_keeps_them():
    from interplab.core.views.attention_pattern import AttentionData, without_first_key

    pattern = np.array([[1.0, 0.0, 0.0], [0.8, 0.2, 0.0], [0.5, 0.25, 0.25]], dtype=np.float32)
    shown = without_first_key(pattern)
    assert np.isnan(shown[:, 0]).all()
    np.testing.assert_allclose(shown[1:, 1:].sum(-1), 1.0)
    np.testing.assert_allclose(shown[2, 1:], [0.5, 0.5])
    assert (shown[0, 1:] == 0).all()  # all its attention was on BOS: nothing left to spread
    np.testing.assert_array_equal(without_first_key(pattern, renormalize=False)[:, 1:], pattern[:, 1:])
    data = AttentionData(["<bos>", "a", "b"], [0], pattern[None, None])
    w = ilab.widgets.AttentionPattern(data, hide_bos=True)
    np.testing.assert_allclose(w.pattern[2, 1:], [0.5, 0.5])
    w.renormalize = False
    np.testing.assert_allclose(w.pattern[2, 1:], [0.25, 0.25])
    w.hide_bos = False
    np.testing.assert_array_equal(w.pattern, pattern)
