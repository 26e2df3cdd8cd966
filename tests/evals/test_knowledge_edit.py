"""The rank-one knowledge edit and its effects on tiny random models (float32), against controls."""

from __future__ import annotations

import pytest
import torch
from interplab.core.evals.knowledge_edit import edited_trace, subject_span

import interplab as ilab
from tests.tiny import tiny_config, tiny_tokenizer

PROMPTS = ["the cat sat on the", "Mary gave a drink to"]
TARGETS = [" house", " bird"]
SUBJECTS = ["the cat", "Mary"]
NEIGHBOURS = [("John ran to the store and {fact} and John ran to the", " store")]


@pytest.fixture(scope="module")
def model() -> ilab.Model:
    from transformers import AutoModelForCausalLM

    cfg = tiny_config("gpt2")
    cfg.initializer_range = 0.2  # sharp enough that one MLP output can carry a fact
    torch.manual_seed(0)
    return ilab.load_model(AutoModelForCausalLM.from_config(cfg).eval(), tokenizer=tiny_tokenizer())


@pytest.fixture(scope="module")
def edit(model: ilab.Model) -> ilab.evals.RankOneEdit:
    return ilab.evals.rank_one_edit(model, PROMPTS, TARGETS, 0, SUBJECTS, steps=20, lr=0.5, progress=False)


def test_subject_span_finds_the_subject_tokens(model: ilab.Model) -> None:
    assert subject_span(model, "John ran and the cat sat", "the cat") == (4, 5)
    assert subject_span(model, "the cat sat", None) == (3, 3)


def test_applied_edit_matches_the_traced_edit_and_restores_the_weights_bit_for_bit(
    model: ilab.Model, edit: ilab.evals.RankOneEdit
) -> None:
    weight = model.module.get_parameter(edit.parameter)  # GPT-2's Conv1D: [F, D]
    original = weight.detach().clone()
    with edit.applied(model, 1):
        assert not torch.equal(weight, original)
        applied = model.logits(PROMPTS[1])[0, -1]
    assert torch.equal(weight, original)
    enc = model.to_tokens(PROMPTS[1:], padding_side="left")
    traced, _ = edited_trace(model, enc, 0, edit.u_NF[1:], edit.delta_ND[1:], [])
    assert torch.allclose(torch.log_softmax(applied, -1), traced[0], atol=1e-4)


def test_edit_succeeds_where_a_random_update_of_the_same_norm_does_not(
    model: ilab.Model, edit: ilab.evals.RankOneEdit
) -> None:
    assert edit.success == 1.0 and (edit.table.p_after > 0.5).all()
    fx = ilab.evals.edit_effects(model, edit, NEIGHBOURS)
    control = edit.random_like(0)
    assert torch.allclose(control.delta_ND.norm(dim=-1), edit.delta_ND.norm(dim=-1))
    fx_random = ilab.evals.edit_effects(model, control, NEIGHBOURS)
    assert fx.summary["success"] == 1.0 and fx_random.summary["success"] == 0.0
    assert len(fx.neighbours) == len(PROMPTS) * len(NEIGHBOURS)


def test_a_zero_update_leaves_attention_and_neighbours_unchanged(
    model: ilab.Model, edit: ilab.evals.RankOneEdit
) -> None:
    zero = edit.random_like(0)
    zero.delta_ND = torch.zeros_like(zero.delta_ND)
    s = ilab.evals.edit_effects(model, zero, NEIGHBOURS).summary
    assert s["drift"] == 0.0 and s["specificity_drop"] == 0.0 and s["success"] == 0.0


def test_sadr_keeps_the_edit_and_moves_attention_less(model: ilab.Model, edit: ilab.evals.RankOneEdit) -> None:
    sadr = ilab.evals.rank_one_edit(model, PROMPTS, TARGETS, 0, SUBJECTS, steps=20, lr=0.5, sadr=10.0, progress=False)
    assert sadr.success == 1.0
    assert (sadr.table.attention_kl < edit.table.attention_kl).all()


def test_a_finished_job_is_found_and_other_inputs_refused(model: ilab.Model, tmp_path) -> None:
    first = ilab.evals.rank_one_edit(model, PROMPTS[0], TARGETS[0], 1, steps=6, folder=tmp_path, progress=False)
    again = ilab.evals.rank_one_edit(model, PROMPTS[0], TARGETS[0], 1, steps=6, folder=tmp_path, progress=False)
    assert torch.equal(first.delta_ND, again.delta_ND)
    assert first.history.equals(again.history)
    with pytest.raises(ValueError, match="lr"):
        ilab.evals.rank_one_edit(model, PROMPTS[0], TARGETS[0], 1, steps=6, lr=0.1, folder=tmp_path, progress=False)


def test_key_direction_moves_the_subject_by_exactly_the_value(model: ilab.Model) -> None:
    from interplab.core.evals.knowledge_edit import key_directions, keys_at

    enc = model.to_tokens(PROMPTS, padding_side="left")
    pad = enc["attention_mask"].shape[1] - enc["attention_mask"].sum(1)
    cols = torch.tensor([subject_span(model, p, s)[1] for p, s in zip(PROMPTS, SUBJECTS, strict=True)]) + pad
    keys = keys_at(model, enc, 0, torch.arange(2), cols)
    u = key_directions(model, keys, 0, ["the dog ran to the house", "John gave a drink to Mary"] * 4)
    assert torch.allclose((u * keys).sum(-1), torch.ones(2), atol=1e-5)  # u . k = 1: the value moves by delta
    assert not torch.allclose(u / u.norm(dim=-1, keepdim=True), keys / keys.norm(dim=-1, keepdim=True))  # C^-1 k
