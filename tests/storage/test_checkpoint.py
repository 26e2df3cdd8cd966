"""The checkpoints of long jobs (core/storage/checkpoint.py): token digests, inputs compared (the recorded
inputs through a job: tests/storage/test_resumable.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.storage.checkpoint import (
    TokenDigest,
    check_tokens,
)


def test_token_digests_do_not_depend_on_chunking():
    a, b = TokenDigest(), TokenDigest()
    a.update([1, 2, 3, 4])
    b.update(torch.tensor([1, 2]))
    b.update(np.array([3, 4], np.int32))
    assert a.record() == b.record() == {"n_tokens": 4, "sha256": TokenDigest.of([1, 2, 3, 4])}
    check_tokens(a.record(), b, "here")
    c = TokenDigest()
    c.update([1, 2, 3, 5])
    with pytest.raises(ValueError, match="'here' was made from another corpus: the first 4 tokens"):
        check_tokens(a.record(), c, "here")
