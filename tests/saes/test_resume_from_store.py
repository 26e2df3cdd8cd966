"""Training from a store with ``checkpoint_dir``: a resumed run ends with the same weights as an uninterrupted
one, a checkpoint of other inputs is refused, and a checkpoint write killed half-way keeps the previous one.
"""

from __future__ import annotations

import logging
import shutil

import interplab.core.saes.training.trainer as train_mod
import pytest
import torch
from interplab.core.saes import train_saes
from interplab.core.storage.atomic import leftover_target

from tests.faults import FileOps, Killed
from tests.saes.helpers import BATCH, assert_same_weights

RESUME_SPECS = [
    {"arch": "topk", "width": 32, "k": 3, "lr": 3e-3},
    {"arch": "batchtopk", "width": 48, "k": 2, "lr": 3e-3},
    {"arch": "jumprelu", "width": 32, "lr": 3e-3, "l0_coefficient": 0.01},
]


RESUME_KW = {"n_tokens": BATCH * 20, "batch_size": BATCH, "checkpoint_every": 5, "progress": False, "seed": 3}


class _Stop(KeyboardInterrupt):
    pass


def _interrupt_after(monkeypatch, at_step: int) -> None:
    original = train_mod._save_checkpoint

    def saving_then_stop(path, inputs, state):
        original(path, inputs, state)
        if state["step"] == at_step:
            raise _Stop

    monkeypatch.setattr(train_mod, "_save_checkpoint", saving_then_stop)


def test_resume_gives_the_same_weights_as_an_uninterrupted_run(store, tmp_path, monkeypatch, caplog):
    reference = train_saes(store, RESUME_SPECS, **RESUME_KW)
    ckpt_dir = tmp_path / "ckpt"
    with monkeypatch.context() as m:
        _interrupt_after(m, 10)
        with pytest.raises(_Stop):
            train_saes(store, RESUME_SPECS, checkpoint_dir=ckpt_dir, **RESUME_KW)
    assert sorted(p.name for p in ckpt_dir.iterdir()) == [train_mod.CHECKPOINT]
    assert train_mod.read_checkpoint(ckpt_dir / train_mod.CHECKPOINT)["step"] == 10
    with caplog.at_level(logging.WARNING, logger="interplab.core.saes.training.trainer"):
        resumed = train_saes(store, RESUME_SPECS, checkpoint_dir=ckpt_dir, **RESUME_KW)
    assert "at step 10 of 20" in caplog.text
    for a, b in zip(resumed, reference, strict=True):
        assert type(a) is type(b)
        assert_same_weights(a, b)
        assert a.cfg.metadata == b.cfg.metadata
    # a finished checkpoint: running again returns the same SAEs without training
    assert train_mod.read_checkpoint(ckpt_dir / train_mod.CHECKPOINT)["step"] == 20
    again = train_saes(store, RESUME_SPECS, checkpoint_dir=ckpt_dir, **RESUME_KW)
    for a, b in zip(again, reference, strict=True):
        assert_same_weights(a, b)


def test_resume_with_resampling_matches_uninterrupted(store, tmp_path, monkeypatch):
    """Resampling draws random inputs: a resumed run must still equal the uninterrupted one (same seed)."""
    specs = [{"arch": "standard", "width": 64, "l1_coefficient": 5.0, "lr": 3e-2}]
    kw = {**RESUME_KW, "n_tokens": BATCH * 30, "dead_tokens": BATCH, "resample_every": 3}
    resampled = []
    original = train_mod._resample

    def spy(*args):
        resampled.append(original(*args))
        return resampled[-1]

    monkeypatch.setattr(train_mod, "_resample", spy)
    torch.manual_seed(123)
    reference = train_saes(store, specs, **kw)[0]
    assert sum(resampled[3:]) > 0, "latents are resampled after the interruption point (step 10)"
    with monkeypatch.context() as m:
        _interrupt_after(m, 10)
        with pytest.raises(_Stop):
            train_saes(store, specs, checkpoint_dir=tmp_path, **kw)
    torch.manual_seed(456)  # whatever the global RNG holds, the seed argument decides the result
    resumed = train_saes(store, specs, checkpoint_dir=tmp_path, **kw)[0]
    assert_same_weights(resumed, reference)


def test_checkpoint_of_another_run_is_refused(store, tmp_path, monkeypatch):
    with monkeypatch.context() as m:
        _interrupt_after(m, 5)
        with pytest.raises(_Stop):
            train_saes(store, RESUME_SPECS, checkpoint_dir=tmp_path, **RESUME_KW)
    before = (tmp_path / train_mod.CHECKPOINT).read_bytes()
    other = [dict(RESUME_SPECS[0], width=64), *RESUME_SPECS[1:]]
    with pytest.raises(
        ValueError,
        match=r"checkpoint\.safetensors.*other inputs than this call's "
        r"\(specs\[0\]\.width: 32 there, 64",
    ):
        train_saes(store, other, checkpoint_dir=tmp_path, **RESUME_KW)
    with pytest.raises(ValueError, match=r"other inputs than this call's \(.*n_tokens: 5120 there, 7680 now"):
        train_saes(store, RESUME_SPECS, checkpoint_dir=tmp_path, **{**RESUME_KW, "n_tokens": BATCH * 30})
    with pytest.raises(ValueError, match=r"other inputs than this call's \(seed: 3 there, 4 now"):
        train_saes(store, RESUME_SPECS, checkpoint_dir=tmp_path, **{**RESUME_KW, "seed": 4})
    assert (tmp_path / train_mod.CHECKPOINT).read_bytes() == before


def test_checkpoint_is_written_atomically(store, tmp_path, monkeypatch):
    """A kill half-way through writing a checkpoint keeps the previous one, and the resume cleans up."""
    reference = train_saes(store, RESUME_SPECS, **RESUME_KW)
    ckpt_dir = tmp_path / "a"
    with monkeypatch.context() as m:
        _interrupt_after(m, 10)
        with pytest.raises(_Stop):
            train_saes(store, RESUME_SPECS, checkpoint_dir=ckpt_dir, **RESUME_KW)
    good = (ckpt_dir / train_mod.CHECKPOINT).read_bytes()
    shutil.copytree(ckpt_dir, tmp_path / "b")
    ops = FileOps()
    with ops.counting():
        train_saes(store, RESUME_SPECS, checkpoint_dir=tmp_path / "b", **RESUME_KW)
    first_write = next(i for i, op in enumerate(ops.log, 1) if op.startswith("write"))
    with ops.kill_at(first_write), pytest.raises(Killed):
        train_saes(store, RESUME_SPECS, checkpoint_dir=ckpt_dir, **RESUME_KW)
    assert (ckpt_dir / train_mod.CHECKPOINT).read_bytes() == good, "a killed write never replaces the checkpoint"
    assert [p for p in ckpt_dir.iterdir() if leftover_target(p.name)], "the torn temporary file is there"
    resumed = train_saes(store, RESUME_SPECS, checkpoint_dir=ckpt_dir, **RESUME_KW)
    for a, b in zip(resumed, reference, strict=True):
        assert_same_weights(a, b)
    assert sorted(p.name for p in ckpt_dir.iterdir()) == [train_mod.CHECKPOINT], "leftovers are cleaned"


@pytest.mark.parametrize(("key", "value", "match"), [
    ("step", 21, r"state\.step must be an integer in 0\.\.20, got 21"),
    ("step", 10**9, r"state\.step must be an integer in 0\.\.20, got 1000000000"),
    ("scales", "nan", r"state\.scales must be a JSON object, got str"),
    ("scales", {"blocks.0.hook_resid_post": -1e30}, r"state\.scales\.blocks\.0\.hook_resid_post must be a number > 0"),
    ("scales", {"blocks.0.hook_resid_post": "nan"}, r"hook_resid_post must be a finite number, got str 'nan'"),
    ("scales", {"blocks.0.hook_resid_post": 1.0, "blocks.0.x": 1.0}, r"names sites \['blocks\.0\.x'\]"),
    ("tail", [[0.0, -1.0]] * 3, r"state\.tail\[0\] must be two finite sums >= 0"),
    ("since_fired", [torch.zeros(2, dtype=torch.long) for _ in range(3)], r"since_fired\[0\] must be an integer"),
])  # fmt: skip
def test_a_crafted_checkpoint_is_refused_naming_its_field(store, tmp_path, monkeypatch, key, value, match):
    """A checkpoint's numbers are validated like every other file's: bounded step, finite positive scales."""
    from interplab.core.storage.checkpoint import read_state_file, save_state
    from interplab.core.storage.readers import FileError

    with monkeypatch.context() as m:
        _interrupt_after(m, 5)
        with pytest.raises(_Stop):
            train_saes(store, RESUME_SPECS, checkpoint_dir=tmp_path, **RESUME_KW)
    file = tmp_path / train_mod.CHECKPOINT
    inputs, state = read_state_file(file, train_mod.JOB)
    save_state(file, train_mod.JOB, inputs, {**state, key: value})
    with pytest.raises(FileError, match=match):
        train_saes(store, RESUME_SPECS, checkpoint_dir=tmp_path, **RESUME_KW)
