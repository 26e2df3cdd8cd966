"""The converged-SAE job: resumed after an interruption it ends as an uninterrupted run; finished, it needs no
activations; its convergence check reads the end of the held-out curve."""

from __future__ import annotations

import pytest
import torch
from interplab.core.matching import ConvergedSAE, train_converged
from interplab.core.matching.converged import _Run
from interplab.core.saes import SAE
from interplab.core.storage.checkpoint import read_state_file

from tests.tiny import TEXTS, no_forward, tiny_model

SITE = "blocks.0.hook_resid_post"
CORPUS = [" ".join(TEXTS) * 3] * 60
SETTINGS = dict(corpus=CORPUS, n_tokens=3000, held_out=256, width=16, k=4, steps=60, batch_size=64, eval_every=5)


def test_an_interrupted_job_resumes_to_the_same_sae_and_the_finished_folder_is_enough(tmp_path, monkeypatch):
    model = tiny_model("gpt2")
    whole = train_converged(model, SITE, tmp_path / "whole", store=tmp_path / "store", progress=False, **SETTINGS)
    calls = {"n": 0}
    original = _Run.train_one

    def stop_at_55(self):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] > 55:
            raise KeyboardInterrupt
        original(self)

    monkeypatch.setattr(_Run, "train_one", stop_at_55)
    with pytest.raises(KeyboardInterrupt):
        train_converged(model, SITE, tmp_path / "cut", store=tmp_path / "store", progress=False, **SETTINGS)
    monkeypatch.setattr(_Run, "train_one", original)
    resumed = train_converged(model, SITE, tmp_path / "cut", store=tmp_path / "store", progress=False, **SETTINGS)
    assert resumed.history == whole.history
    assert torch.equal(resumed.sae.W_dec, whole.sae.W_dec)
    # the finished folder holds the SAE in bfloat16 and its history, no optimiser state; a rerun reads only it
    _, state = read_state_file(tmp_path / "whole" / "checkpoint.safetensors", "matching.converged")
    assert state["done"] and "opt" not in state and state["sae"]["W_dec"].dtype == torch.bfloat16
    with no_forward(model):
        again = train_converged(model, SITE, tmp_path / "whole", store=tmp_path / "absent", progress=False, **SETTINGS)
    assert not (tmp_path / "absent").exists() and again.history == whole.history
    assert torch.equal(again.sae.W_dec, whole.sae.W_dec.bfloat16().float())
    with pytest.raises(ValueError, match=r"width: 16 there, 32 now"):  # another width: the recorded inputs refuse it
        train_converged(model, SITE, tmp_path / "whole", **{**SETTINGS, "width": 32})


def _result(fvu: list[float]) -> ConvergedSAE:
    steps = list(range(10, 10 * len(fvu) + 1, 10))
    history = {"step": steps, "train_fvu": fvu, "heldout_fvu": fvu, "heldout_l0": [4.0] * len(fvu)}
    return ConvergedSAE(SAE.create("batchtopk", d_in=8, d_sae=4, k=2), history, 100, steps[-1], 8)


def test_converged_reads_the_last_fifth_of_the_held_out_curve():
    falling_early = _result([1.0 / (i + 1) for i in range(10)] + [0.05] * 40)
    assert falling_early.converged() and abs(falling_early.tail_change()) < 1e-9
    still_falling = _result([1.0 - 0.015 * i for i in range(50)])
    assert not still_falling.converged() and still_falling.tail_change() < -0.02
    assert still_falling.tail_share() == pytest.approx(-10 / 49)  # 10 of the 49 steps of the fall
    creeping = _result([1.0 / (i + 1) for i in range(10)] + [0.05 - 0.0001 * i for i in range(40)])
    assert creeping.tail_change() < -0.02 and creeping.converged()  # 2% of its value, 0.1% of the fall
    with pytest.raises(ValueError, match=r"3 are needed"):
        _result([1.0, 0.5, 0.4]).tail_change(0.2)


def test_the_shipped_run_is_finished_small_and_converged():
    """nbs/papers/stitching_meta.ipynb's job folder: the finished 512-latent SAE, under 1.5 MB, flat at its end."""
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "nbs" / "papers" / "stitching_meta_run"
    assert sum(f.stat().st_size for f in folder.iterdir()) < 1.5e6
    inputs, state = read_state_file(folder / "checkpoint.safetensors", "matching.converged")
    assert state["done"] and inputs["width"] == 512 and inputs["site"] == "blocks.6.hook_resid_post"
    history = {c: [float(v) for v in state["history"][c]] for c in ("step", "train_fvu", "heldout_fvu", "heldout_l0")}
    sae = SAE.create("batchtopk", d_in=640, d_sae=512, k=inputs["k"])
    run = ConvergedSAE(sae, history, state["n_train_tokens"], inputs["steps"], inputs["batch_size"])
    assert run.converged() and history["step"][-1] == inputs["steps"]
