"""The check of every site at load (:mod:`interplab.core.model.validate`): a site that does not read what the model
adds to its residual stream is dropped with a warning naming it and what it expected; the others stay."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
from interplab.core.model.sites import FAMILIES, KINDS
from interplab.core.model.validate import check_sites

import interplab as ilab
from tests.tiny import TEXTS, tiny_hf_model, tiny_tokenizer


def test_hand_written_family_passes_the_check_on_its_own_model():
    """The control: Llama's own table on a Llama model fails nothing."""
    family, problems = check_sites(tiny_hf_model("llama"), FAMILIES["llama"], KINDS, n_layers=2, token_id=1)
    assert problems == [] and family == FAMILIES["llama"]


def test_a_site_read_at_the_wrong_module_is_dropped_naming_what_it_expected():
    """hook_attn_out read at the norm before attention is not what attention adds: it and resid_mid are dropped in
    every block, each named with the identity it broke; the MLP's sites stay."""
    wrong = dataclasses.replace(FAMILIES["llama"], attn_out="input_layernorm")
    family, problems = check_sites(tiny_hf_model("llama"), wrong, KINDS, n_layers=2, token_id=1)
    assert "blocks.0.hook_resid_mid: expected hook_resid_pre + hook_attn_out" in problems
    assert "blocks.1.hook_attn_out: expected hook_resid_pre + hook_attn_out" in problems
    assert family.layer_kinds is not None
    for kinds in family.layer_kinds:
        assert "attn_out" not in kinds and "resid_mid" not in kinds
        assert {"resid_pre", "hook_z", "mlp_in", "mlp_post", "resid_post"} <= set(kinds)


def test_model_with_a_failed_site_loads_the_rest_with_one_warning(monkeypatch):
    monkeypatch.setitem(FAMILIES, "llama", dataclasses.replace(FAMILIES["llama"], mlp_out="post_attention_layernorm"))
    with pytest.warns(UserWarning, match=r"2 site\(s\) failed the check at load .*blocks\.0\.hook_mlp_out: expected "
                      r"hook_resid_post - hook_resid_mid"):  # fmt: skip
        model = ilab.load_model(tiny_hf_model("llama"), tokenizer=tiny_tokenizer())
    assert "blocks.0.hook_mlp_out" not in model.sites and "blocks.0.hook_attn_out" in model.sites
    with pytest.raises(ValueError, match=r"'blocks\.1\.hook_mlp_out' does not exist in this model: no block has it: "
                       r"the check at load left it out"):  # fmt: skip
        model.collect(TEXTS, "blocks.1.hook_mlp_out")
    assert set(model.collect(TEXTS, "attn_out").values) == {"blocks.0.hook_attn_out", "blocks.1.hook_attn_out"}


def test_a_module_loaded_again_is_not_checked_again():
    """The check is one forward per torch module: loading the same module again runs none."""
    hf = tiny_hf_model("gemma3")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ilab.load_model(hf, tokenizer=tiny_tokenizer())

    def refuse(*args, **kwargs):
        raise AssertionError("the check ran a forward again")

    forward, hf.forward = hf.forward, refuse
    try:
        model = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    finally:
        hf.forward = forward
    assert len(model.sites) == 1 + 2 * (len(KINDS) - 1)
    assert torch.isfinite(model.logits(TEXTS)).all()
