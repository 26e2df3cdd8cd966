"""AttentionPattern.compare: before | after of an attention-drift result, linked."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.evals.drift import attention_drift

import interplab as ilab
from tests.tiny import tiny_model


def test_compare_shows_before_and_after_linked() -> None:
    model = tiny_model("gpt2")
    drift = attention_drift(model, "the cat sat on the mat", ["cat"], steer=("blocks.0.hook_resid_post",
                            torch.ones(32)), scale=5.0)  # fmt: skip
    box = ilab.widgets.AttentionPattern.compare(drift)
    left, right = box.before, box.after
    assert np.array_equal(left.data.patterns, drift.before.patterns)
    assert np.array_equal(right.data.patterns, drift.after.patterns)
    left.layer, left.head, left.selected_token = 1, 2, 3
    assert (right.layer, right.head, right.selected_token) == (1, 2, 3)
    right.head = 0
    assert left.head == 0
    assert not np.array_equal(left.pattern, right.pattern)  # the steer after layer 0 moves layer 1


def test_compare_refuses_other_things() -> None:
    with pytest.raises(TypeError, match="takes a drift result, or two AttentionData"):
        ilab.widgets.AttentionPattern.compare("x")
