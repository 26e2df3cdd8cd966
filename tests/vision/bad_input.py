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


def _so() -> ilab.vision.SecondOrder:
    return ilab.vision.second_order(_clip(), (0, 1), torch.rand(2, 3, 16, 16))


ROWS += [
    Row("ilab.vision.second_order", lambda c: ilab.vision.second_order(_clip(), (0, 1), torch.rand(2, 3, 16, 15)), V,
        r"\[batch, 3, 16, 16\]; got torch.float32 \[2, 3, 16, 15\]"),
    Row("ilab.vision.second_order", lambda c: ilab.vision.second_order(_clip(), (0, 64), torch.rand(2, 3, 16, 16)),
        V, r"neuron index 64 is out of range: block 0 has neurons 0..63"),
    Row("ilab.vision.second_order", lambda c: ilab.vision.second_order(_clip(), (2, 1), torch.rand(2, 3, 16, 16)),
        V, r"neuron layer 2 is out of range: a neuron with later attention heads is in blocks 0..1"),
    Row("ilab.vision.second_order", lambda c: ilab.vision.second_order(_clip(), 5, torch.rand(2, 3, 16, 16)),
        T, r"neuron is a \(layer, index\) pair of ints, got 5"),
    Row("ilab.vision.second_order", lambda c: ilab.vision.second_order(c.model, (0, 1), torch.rand(2, 3, 16, 16)),
        T, r"second_order reads a vision model \(a CLIP or ViT loaded with ilab.load_model\); got Model"),
    Row("ilab.vision.SecondOrder.significant", lambda c: _so().significant(-1.0), V, "threshold is a share"),
    Row("ilab.vision.SecondOrder.top_share", lambda c: _so().top_share(0.0), V, "fraction"),
    Row("ilab.vision.SecondOrder.describe", lambda c: _so().describe(["red"], k=2), V,
        r"k=2 terms need 1 <= k <= 1"),
    Row("ilab.vision.sparse_decomposition",
        lambda c: ilab.vision.sparse_decomposition(torch.ones(2), torch.eye(2), ["a", "b"], k=0), V, r"k=0"),
]  # fmt: skip

EXEMPT = {
    "ilab.vision.SecondOrder": "a result built by second_order, which checks its inputs",
    "ilab.vision.Rank1": "a result built by SecondOrder.rank1",
    "ilab.vision.Decomposition": "a result built by sparse_decomposition, which checks its inputs",
}

ROWS += [
    Row("ilab.vision.patch_data", lambda c: ilab.vision.patch_data(torch.rand(3, 16, 16), torch.rand(15)), V,
        r"values are one per patch of a square grid \(\[P\] or \[G, G\]\); got shape \[15\]"),
    Row("ilab.vision.patch_data", lambda c: ilab.vision.patch_data(torch.rand(2, 16, 16), torch.rand(16)), V,
        r"image is \[channels, height, width\] with 1 or 3 channels"),
    Row("ilab.widgets.PatchHeatmap", lambda c: ilab.widgets.PatchHeatmap(torch.rand(3, 8, 8), torch.rand(4, 5)), V,
        r"got shape \[4, 5\]"),
]  # fmt: skip
EXEMPT["ilab.vision.PatchData"] = "plain data built by patch_data, which checks its inputs"

ROWS += [
    Row("ilab.vision.train_clip", lambda c: ilab.vision.train_clip(tiny_clip(), torch.rand(4, 3, 16, 16),
        torch.zeros(3, 5, dtype=torch.long), steps=1), V, r"one row per image \(4\); got \[3, 5\]"),
    Row("ilab.vision.train_clip", lambda c: ilab.vision.train_clip(c.model.module, torch.rand(4, 3, 16, 16),
        torch.zeros(4, 5, dtype=torch.long), steps=1), T, "train_clip trains a transformers CLIPModel"),
]  # fmt: skip
EXEMPT["ilab.vision.ClipTraining"] = "a result built by train_clip"


def _grid(site: str = "resid_pre", positions: list[int] | None = None) -> object:
    return ilab.patching.grid(_clip(), torch.rand(1, 3, 16, 16), torch.rand(1, 3, 16, 16), site=site,
                              positions=positions, progress=False)  # fmt: skip


ROWS += [
    Row("ilab.vision.patching_row", lambda c: ilab.vision.patching_row(_grid(), torch.rand(3, 16, 16), 3), V,
        r"layer=3 is not a row of the grid \(layers 0..2\)"),
    Row("ilab.vision.patching_row", lambda c: ilab.vision.patching_row(_grid("heads"), torch.rand(3, 16, 16), 0),
        T, r"patching_row reads a patching grid over image tokens.*got PatchingResult over heads"),
    Row("ilab.vision.patching_row", lambda c: ilab.vision.patching_row(_grid(positions=[0, 1, 2]),
        torch.rand(3, 16, 16), 0), V, r"leaves out patch positions \[3, 4, 5, 6, 7\]\.\.\..*positions=None"),
]  # fmt: skip
