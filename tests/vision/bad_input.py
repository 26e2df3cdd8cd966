"""Bad inputs of vision models and ``ilab.vision``: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``.
"""

from __future__ import annotations

import functools

import torch

import interplab as ilab
from tests.contracts.rows import Row, T, V
from tests.vision.tiny_vision import tiny_clip


@functools.cache
def _clip() -> ilab.Model:
    return ilab.load_model(tiny_clip())


ROWS: list[Row] = [
    Row("Model.check_inputs", lambda c: _clip().check_inputs(torch.rand(2, 3, 8, 8)), V,
        r"image batch for CLIPModel is a float tensor \[batch, 3, 16, 16\]; got torch.float32 \[2, 3, 8, 8\]"),
    Row("Model.check_inputs", lambda c: _clip().check_inputs(["a cat"]), T,
        r"takes images as a float tensor \[batch, 3, 16, 16\] \(pixel values\), got list"),
    Row("Model.check_inputs", lambda c: c.model.check_inputs(["the cat", 3]), T, r"texts\[1\] is int"),
    Row("Model.collect", lambda c: _clip().collect(torch.rand(2, 1, 16, 16), "resid_post"), V,
        r"\[batch, 3, 16, 16\]; got torch.float32 \[2, 1, 16, 16\]"),
]  # fmt: skip
