"""The Transformers-vs-Mambas notebook's induction claim holds for the models its shipped jobs trained and fails
when untrained models of the same shape replace them. The runs resume from a copy of the shipped job folder
(finished: nothing trains) with the notebook's settings (nbs/papers/transformers_vs_mambas.ipynb)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from interplab.core.train import mamba

import interplab as ilab

RUNS = Path(__file__).resolve().parents[2] / "nbs" / "papers" / "transformers_vs_mambas_runs"
#: The notebook's models and steps (a resume with other settings is refused).
BUILD = {"gpt-2": lambda: mamba.TinyGPT(32, d=32), "mamba": lambda: mamba.TinyMamba(32, d=32)}
STEPS = {"gpt-2": 1000, "mamba": 1500}


def untrained(name: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return BUILD[name]()


@pytest.mark.parametrize("name", list(BUILD))
def test_induction_claim_holds_for_the_trained_model_and_fails_for_an_untrained_one(name, tmp_path):
    task = ilab.train.repeated_tokens(n_tokens=32, half_len=8, n_rows=2048)
    run = ilab.train.tiny(untrained(name), task, steps=STEPS[name], lr=3e-3, batch_size=32, eval_every=250,
                          checkpoint_every=250, path=Path(shutil.copytree(RUNS, tmp_path / "runs")) / name,
                          progress=False)  # fmt: skip
    held = task.inputs_NL[~task.train_N][:200]
    control = mamba.halves_accuracy(untrained(name).eval(), held)
    assert mamba.induction_claim(mamba.halves_accuracy(run.module, held), control)["holds"]
    in_place = mamba.induction_claim(mamba.halves_accuracy(untrained(name, seed=1).eval(), held), control)
    assert not in_place["holds"] and not in_place["repeat_predicted"]
