"""The small trainer: it learns, keeps its history as plain data, and resumes after a kill at any point to the
same weights and history (the job contract)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from interplab.core.storage.checkpoint import read_state_file
from interplab.core.train.trainer import JOB

import interplab as ilab
from tests.faults import kill_at_every_step, sigkill_when
from tests.train.nets import BitsMLP, PairMLP

ROOT = Path(__file__).resolve().parents[2]


def xor_run(path: Path | None, steps: int = 12, **kw) -> ilab.train.TrainResult:
    torch.manual_seed(0)
    return ilab.train.tiny(BitsMLP(hidden=8), ilab.train.boolean("xor"), steps=steps, lr=3e-2, batch_size=3,
                           eval_every=2, checkpoint_every=4, path=path, progress=False, **kw)  # fmt: skip


def same(a: ilab.train.TrainResult, b: ilab.train.TrainResult) -> None:
    assert a.history == b.history
    for (name, x), (_, y) in zip(a.module.state_dict().items(), b.module.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


def test_it_learns_xor_and_keeps_the_history():
    torch.manual_seed(0)
    res = ilab.train.tiny(BitsMLP(hidden=8), ilab.train.boolean("xor"), steps=400, lr=3e-2, eval_every=100,
                          progress=False)  # fmt: skip
    assert res.history["step"] == [100, 200, 300, 400]
    assert res.final["train_acc"] == 1.0 and res.final["test_acc"] is None
    assert res.history["loss"][-1] < res.history["loss"][0]
    assert list(res.frame().columns) == ["step", "loss", "train_acc", "test_acc"]
    assert "hconcat" in res.chart().to_dict()


def test_held_out_rows_are_measured_apart():
    task = ilab.train.group_table("Z7", train_frac=0.5)
    assert task.n_train == round(49 * 0.5) and task.n_classes == 7
    torch.manual_seed(0)
    res = ilab.train.tiny(PairMLP(7), task, steps=50, lr=1e-2, eval_every=50, progress=False)
    assert res.final["train_acc"] > res.final["test_acc"] >= 0.0


def test_a_run_killed_at_every_file_operation_resumes_to_the_uninterrupted_result(tmp_path):
    reference = xor_run(None)

    def check(result, path):
        same(result, reference)

    kills = kill_at_every_step(xor_run, check, tmp_path)
    assert kills > 3


def test_a_resume_with_other_settings_is_refused_naming_them(tmp_path):
    xor_run(tmp_path / "run", steps=4)
    with pytest.raises(ValueError, match=r"steps.*4.*8"):
        xor_run(tmp_path / "run", steps=8)


_CHILD = """
import sys, torch
sys.path.insert(0, {root!r})
torch.set_num_threads(1)
from tests.train.test_trainer import xor_run
xor_run({path!r}, steps=400)
"""


def test_resume_after_sigkill_gives_the_uninterrupted_result(tmp_path):
    path = tmp_path / "run"
    checkpoint = path / "checkpoint.safetensors"
    sigkill_when(
        _CHILD.format(root=str(ROOT), path=str(path)),
        lambda: checkpoint.exists() and read_state_file(checkpoint, JOB)[1]["step"] >= 8,
        what="step 8's checkpoint",
    )
    step = read_state_file(path / "checkpoint.safetensors", JOB)[1]["step"]
    assert 8 <= step < 400
    same(xor_run(path, steps=400), xor_run(None, steps=400))
