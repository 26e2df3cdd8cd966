"""Checks of the SAE trainer (core/saes/training/trainer.py): a corpus that runs out, a checkpoint of
another store, settings that are not finite, and a loss or weights that stop being finite.
"""

from __future__ import annotations

import pytest
import torch
from interplab.core.data.store import ActivationStore
from interplab.core.saes import train_sae
from interplab.core.saes.training.trainer import CHECKPOINT, read_checkpoint, train_saes

from tests.contracts.test_crash_safety import CORPUS, SITE

pytestmark = pytest.mark.usefixtures("isolated_cache")


@pytest.fixture
def store(gpt2, tmp_path) -> ActivationStore:
    return gpt2.cache(CORPUS, SITE, tmp_path / "acts", n_tokens=512, context_size=16)


def test_training_on_an_empty_corpus_says_it_ran_out(gpt2):
    with pytest.raises(ValueError, match=r"corpus ran out: it holds 0 tokens"):
        train_saes(gpt2, [{"arch": "topk", "width": 16, "k": 2}], site=SITE, corpus=[""] * 200, n_tokens=64,
                   batch_size=64, progress=False)  # fmt: skip


def test_a_checkpoint_refuses_another_store(gpt2, tmp_path):
    ckpt = tmp_path / "ckpt"
    big = gpt2.cache(CORPUS, SITE, tmp_path / "big", n_tokens=256, context_size=16)
    first = train_saes(big, [{"arch": "topk", "width": 16, "k": 2}], n_tokens=128, batch_size=64,
                       checkpoint_dir=ckpt, progress=False)  # fmt: skip
    other = gpt2.cache(CORPUS[::-1], SITE, tmp_path / "other", n_tokens=256, context_size=16)
    with pytest.raises(ValueError, match=r"other inputs than this call's \(source\.tokens_sha256"):
        train_saes(other, [{"arch": "topk", "width": 16, "k": 2}], n_tokens=128, batch_size=64, checkpoint_dir=ckpt,
                   progress=False)  # refused: the first store's SAE is not returned  # fmt: skip
    assert first


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"arch": "standard", "l1": float("nan")}, r"l1_coefficient must be finite, got nan"),
        ({"arch": "jumprelu", "l0": float("inf")}, r"l0_coefficient must be finite, got inf"),
        ({"arch": "gated", "l1": -1.0}, r"l1_coefficient must be a finite number >= 0, got -1\.0"),
        ({"arch": "standard", "lr": float("nan")}, r"lr must be finite, got nan"),
    ],
)
def test_non_finite_settings_are_refused_before_training(store, kwargs, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        train_sae(store, width=16, n_tokens=128, batch_size=64, checkpoint_dir=tmp_path / "ck", progress=False,
                  **kwargs)  # fmt: skip
    assert not (tmp_path / "ck").exists()


def test_a_loss_or_weights_that_stop_being_finite_stop_training(store, tmp_path, monkeypatch):
    from interplab.core.saes.standard import StandardSAE

    real = StandardSAE.training_loss
    calls = [0]

    def diverging(self, x, dead=None):  # type: ignore[no-untyped-def]
        calls[0] += 1
        loss, info = real(self, x, dead)
        return (loss * float("nan") if calls[0] == 4 else loss), info

    monkeypatch.setattr(StandardSAE, "training_loss", diverging)
    with pytest.raises(
        ValueError,
        match=r"Training diverged at step 3 of 8: the training loss of StandardSAE.* is "
        r"nan",
    ):
        train_sae(store, arch="standard", width=16, n_tokens=512, batch_size=64, checkpoint_dir=tmp_path / "ck",
                  checkpoint_every=1, progress=False)  # fmt: skip
    assert read_checkpoint(tmp_path / "ck" / CHECKPOINT)["step"] == 3, "the last good checkpoint is kept"
    monkeypatch.setattr(StandardSAE, "training_loss", real)

    real_step = torch.optim.Adam.step

    def poisoning(self, *a, **k):  # type: ignore[no-untyped-def]
        out = real_step(self, *a, **k)
        with torch.no_grad():
            self.param_groups[0]["params"][2][0, 0] = float("inf")  # W_dec, while the loss stays finite
        return out

    monkeypatch.setattr(torch.optim.Adam, "step", poisoning)
    with pytest.raises(ValueError, match=r"weights of StandardSAE.* hold NaN or inf in W_dec after step 1"):
        train_sae(store, arch="standard", width=16, n_tokens=512, batch_size=64, checkpoint_dir=tmp_path / "ck2",
                  checkpoint_every=1, progress=False)  # fmt: skip
    assert not (tmp_path / "ck2" / CHECKPOINT).exists(), "nothing non-finite was saved"
