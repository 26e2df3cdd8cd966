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
