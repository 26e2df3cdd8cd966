"""Training a cross-layer transcoder on a tiny model: the loss falls, and a resumed run ends where one run does."""

from __future__ import annotations

import pytest
import torch
from interplab.core.saes import clt_train
from interplab.core.saes.clt_train import folded, train_clt

from tests.tiny import TEXTS, tiny_model

SETTINGS = dict(d_sae=16, k=4, seq_len=8, batch_size=2, lr=3e-2, progress=False)


@pytest.fixture(scope="module")
def model():
    return tiny_model("gemma3")


def test_the_loss_falls(model):
    res = train_clt(model, TEXTS * 8, **SETTINGS)
    loss = res.history["loss"]
    assert len(loss) >= 20
    first, last = sum(loss[:3]) / 3, sum(loss[-3:]) / 3
    assert last < 0.5 * first, (first, last)
    assert res.tokens_per_second > 0 and res.clt.n_layers == model.n_layers


def test_the_trained_clt_reads_and_writes_raw_activations():
    """Training runs on each layer's activations over their RMS norms; the returned CLT has the norms folded in."""
    from tests.saes.test_clt import random_clt

    clt = random_clt()
    scale = torch.tensor([[2.0, 0.5, 3.0], [4.0, 0.25, 1.5]])
    x = torch.randn(3, 5, 8)
    expected = clt(x / scale[0][:, None, None]) * scale[1][:, None, None]
    acts = clt.encode(x / scale[0][:, None, None])
    torch.testing.assert_close(folded(clt, scale)(x), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(clt.encode(x), acts, rtol=1e-5, atol=1e-5)


def test_a_run_killed_and_resumed_gives_the_weights_of_one_run(model, tmp_path, monkeypatch):
    whole = train_clt(model, TEXTS * 2, **SETTINGS)
    real_loss, calls = clt_train.clt_loss, [0]

    def killed_at_step_5(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 5:
            raise KeyboardInterrupt
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(clt_train, "clt_loss", killed_at_step_5)
    with pytest.raises(KeyboardInterrupt):
        train_clt(model, TEXTS * 2, **SETTINGS, path=tmp_path / "run", checkpoint_every=3)
    monkeypatch.setattr(clt_train, "clt_loss", real_loss)
    resumed = train_clt(model, TEXTS * 2, **SETTINGS, path=tmp_path / "run", checkpoint_every=3)
    assert resumed.history["step"] == whole.history["step"]
    assert resumed.clt.fingerprint() == whole.clt.fingerprint()
    again = train_clt(model, TEXTS * 2, **SETTINGS, path=tmp_path / "run", checkpoint_every=3)
    assert again.clt.fingerprint() == whole.clt.fingerprint() and again.tokens_per_second == 0.0
    with pytest.raises(ValueError, match=r"other inputs than this call's \(lr: 0\.03 there, 0\.01 now\)"):
        train_clt(model, TEXTS * 2, **{**SETTINGS, "lr": 1e-2}, path=tmp_path / "run")
