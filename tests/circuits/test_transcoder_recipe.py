"""The transcoder recipe's ``--stop-at-checkpoint``: what a training checkpoint holds, rebuilt with its scales
folded in, is exactly what training returns at that step (here the last one, where both exist)."""

from __future__ import annotations

from pathlib import Path

import torch
from interplab.core.jobs.transcoders import transcoders_from_checkpoint
from interplab.core.saes.training.trainer import train_saes

from tests.tiny import TEXTS, tiny_model


def test_stop_at_checkpoint_rebuilds_the_trained_transcoders(tmp_path: Path):
    model = tiny_model("gemma3")
    specs = [{"arch": "batchtopk", "width": 48, "k": 4, "site": f"blocks.{layer}.hook_mlp_in",
              "site_out": f"blocks.{layer}.hook_mlp_out", "skip": True} for layer in range(2)]  # fmt: skip
    trained = train_saes(model, specs, n_tokens=1024, batch_size=128, corpus=TEXTS * 200,
                         checkpoint_dir=tmp_path, checkpoint_every=8, progress=False)  # fmt: skip
    rebuilt, step = transcoders_from_checkpoint(tmp_path, specs, model.name, model.d_model)
    assert step == 8
    x = torch.randn(6, model.d_model) * 3
    for a, b in zip(trained, rebuilt, strict=True):
        assert (a.site, a.site_out, a.cfg.skip) == (b.site, b.site_out, True)
        for name, p in a.state_dict().items():
            torch.testing.assert_close(b.state_dict()[name], p, msg=name)
        with torch.no_grad():
            torch.testing.assert_close(b(x), a(x))  # raw input in, raw MLP output out: the scales folded in
