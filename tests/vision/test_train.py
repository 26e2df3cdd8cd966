"""The small CLIP's contrastive training: the loss falls, and a run killed half-way resumes to the same weights."""

from __future__ import annotations

import pytest
import torch

import interplab as ilab
from tests.vision.tiny_vision import images, tiny_clip


def _data():
    pixels = images(16, seed=5)
    ids = torch.tensor([[0, 3 + i % 4, 2] for i in range(16)])
    pixels[ids[:, 1] == 3] += 1.5  # one caption's images brighter
    return pixels, ids


def test_resumed_training_ends_with_the_same_weights(tmp_path):
    pixels, ids = _data()
    whole = ilab.vision.train_clip(tiny_clip(), pixels, ids, steps=6, batch_size=8, eval_every=2, progress=False)
    killed = tiny_clip()
    calls = []

    def stop_at_step_5(*_):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt

    killed.vision_model.embeddings.register_forward_hook(stop_at_step_5)
    with pytest.raises(KeyboardInterrupt):
        ilab.vision.train_clip(killed, pixels, ids, steps=6, batch_size=8, eval_every=2, path=tmp_path / "run",
                               checkpoint_every=3, progress=False)  # fmt: skip
    first = ilab.vision.train_clip(tiny_clip(), pixels, ids, steps=6, batch_size=8, eval_every=2,
                                   path=tmp_path / "run", checkpoint_every=3, progress=False)  # fmt: skip
    assert first.history["step"] == [2, 4, 6]
    for a, b in zip(whole.module.state_dict().values(), first.module.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)
    again = ilab.vision.train_clip(tiny_clip(), pixels, ids, steps=6, batch_size=8, eval_every=2,
                                   path=tmp_path / "run", checkpoint_every=3, progress=False)  # fmt: skip
    assert again.history == first.history  # the finished job is found, nothing retrained
    for a, b in zip(whole.module.state_dict().values(), again.module.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)
