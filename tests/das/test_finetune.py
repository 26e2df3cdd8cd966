"""finetune_intents on a tiny model: the adapter acts only inside ``applied``, the shared weights are never written,
and a finished job in its folder is found by a rerun."""

from __future__ import annotations

import pytest
import torch

import interplab as ilab
from tests.tiny import TEXTS

ITEMS = [("cat", "mat", "house"), ("dog", "tree", "store"), ("bird", "house", "mat"), ("fox", "store", "tree")]
SETTINGS = {"blocks": 1, "rank": 2, "steps": 4, "lr": 0.05, "batch_items": 2, "progress": False}


def _hooks(model: ilab.Model) -> int:
    return sum(len(m._forward_hooks) for m in model.module.modules())


def test_the_adapter_acts_only_inside_applied_and_never_writes_the_weights(gpt2):
    weights = {k: v.clone() for k, v in gpt2.module.state_dict().items()}
    plain = gpt2.logits(TEXTS[:2])
    hooks = _hooks(gpt2)
    tuning = ilab.das.finetune_intents(gpt2, ilab.das.KnobTask(ITEMS), **SETTINGS)
    assert all(torch.equal(weights[k], v) for k, v in gpt2.module.state_dict().items())
    assert torch.equal(gpt2.logits(TEXTS[:2]), plain) and _hooks(gpt2) == hooks
    assert tuning.blocks == [1] and len(tuning.losses) == 4 and len(tuning.adapter) == 4  # GPT-2's four Conv1D layers
    with tuning.applied(gpt2):
        assert not torch.allclose(gpt2.logits(TEXTS[:2]), plain)  # the trained adapter changes the runs
    with pytest.raises(RuntimeError, match="inside"), tuning.applied(gpt2):
        raise RuntimeError("an error inside")
    assert torch.equal(gpt2.logits(TEXTS[:2]), plain) and _hooks(gpt2) == hooks  # removed on every exit
    held = {city for city, _, _ in (ITEMS[i] for i in tuning.test_items)}
    assert held and held.isdisjoint(city for city, _, _ in (ITEMS[i] for i in tuning.train_items))
    assert set(tuning.before) == set(tuning.after) == {"context", "prior"}
    assert tuning.chart() is not None and tuning.to_dict()["steps"] == 4


def test_a_finished_job_is_found_by_a_rerun(gpt2, tmp_path):
    first = ilab.das.finetune_intents(gpt2, ilab.das.KnobTask(ITEMS), path=tmp_path, **SETTINGS)
    again = ilab.das.finetune_intents(gpt2, ilab.das.KnobTask(ITEMS), path=tmp_path, **SETTINGS)
    assert again.losses == first.losses and again.after == first.after and again.before == first.before
    for path, (A, B) in first.adapter.items():
        assert torch.equal(again.adapter[path][0], A) and torch.equal(again.adapter[path][1], B)
    with pytest.raises(ValueError, match="lr"):  # a folder made with other settings is refused
        ilab.das.finetune_intents(gpt2, ilab.das.KnobTask(ITEMS), path=tmp_path, **{**SETTINGS, "lr": 0.5})
