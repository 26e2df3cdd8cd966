"""The CLT recipe's ``--stop-at-checkpoint``: what a :func:`train_clt` checkpoint holds, rebuilt with its scales
folded in, is what training returns at that step (here the last one, where both exist); other settings are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from interplab.core.jobs.clt import clt_from_checkpoint
from interplab.core.saes.clt_train import train_clt

from tests.tiny import TEXTS, tiny_model


def test_stop_at_checkpoint_rebuilds_the_trained_clt(tmp_path: Path):
    model = tiny_model("gemma3")
    trained = train_clt(model, TEXTS * 4, d_sae=12, k=3, n_tokens=200, seq_len=16, batch_size=4, path=tmp_path,
                        checkpoint_every=2, progress=False)  # fmt: skip
    rebuilt, history = clt_from_checkpoint(tmp_path, model.n_layers, model.d_model, 12, 3)
    assert history["tokens"] == trained.history["tokens"] and len(history["tokens"]) > 1
    for name, p in trained.clt.state_dict().items():
        torch.testing.assert_close(rebuilt.state_dict()[name], p, msg=name)
    with pytest.raises(ValueError, match=r"is of d_sae=12, k=3; the settings name d_sae=16, k=3"):
        clt_from_checkpoint(tmp_path, model.n_layers, model.d_model, 16, 3)
