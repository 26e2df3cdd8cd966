"""Gemma 3's multimodal checkpoint (``Gemma3ForConditionalGeneration``, model_type ``gemma3``): the text decoder
inside (``model.language_model``) is found and mapped with the Gemma family, and text-only traces (collect, logits,
the logit lens, patching grids) match Hugging Face's own hidden states and logits on a tiny random checkpoint."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import Gemma3Config, Gemma3ForConditionalGeneration

import interplab as ilab
from tests.tiny import TEXTS, VOCAB_SIZE, tiny_config, tiny_tokenizer


@pytest.fixture(scope="module")
def gemma3_mm():
    text = tiny_config("gemma3").to_dict()  # the tiny Gemma 3 text model of tests/tiny.py
    vision = dict(
        num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2, image_size=28, patch_size=14
    )
    config = Gemma3Config(
        text_config=text, vision_config=vision, mm_tokens_per_image=4, image_token_index=VOCAB_SIZE - 1
    )
    torch.manual_seed(0)
    hf = Gemma3ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            if p.ndim > 1:
                p.mul_(0.25 / p.std())  # patches move the logits by units
    return hf, ilab.load_model(hf, tokenizer=tiny_tokenizer())


def test_text_decoder_is_found_and_mapped(gemma3_mm):
    _, model = gemma3_mm
    assert (model.n_layers, model.d_model, model.n_heads, model.family.name) == (2, 32, 4, "gemma")
    assert model.family.layers == "model.language_model.layers"
    assert model.family.final_norm == "model.language_model.norm"
    assert model.sites[:3] == ["hook_embed", "blocks.0.hook_resid_pre", "blocks.0.attn.hook_z"]
    assert model.softcap_value is None  # Gemma3ForConditionalGeneration applies none (its text config says none)


def test_collect_logits_and_lens_match_hf(gemma3_mm):
    hf, model = gemma3_mm
    enc = tiny_tokenizer()(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = hf(**enc, output_hidden_states=True)
    lengths = enc["attention_mask"].sum(1)
    acts = model.collect(TEXTS, ["blocks.0.hook_resid_post", "blocks.1.hook_resid_pre", "hook_embed"])
    for row, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(acts["hook_embed"][row, :n], out.hidden_states[0][row, :n], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(acts["blocks.0.hook_resid_post"][row, :n], out.hidden_states[1][row, :n],
                                   rtol=1e-5, atol=1e-5)  # fmt: skip
    rows = torch.arange(len(TEXTS))
    last = out.logits[rows, lengths - 1].float()
    torch.testing.assert_close(model.logits(TEXTS)[:, 0], last, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ilab.logit_lens(model, TEXTS)[:, -1], last, rtol=1e-4, atol=1e-4)


def test_patching_grid_runs_and_cached_equals_full(gemma3_mm):
    _, model = gemma3_mm
    clean = "Mary and John went to the store and John gave a drink to"
    corrupt = "Mary and John went to the store and Mary gave a drink to"
    metric = ilab.patching.logit_diff(" Mary", " John")
    fast = ilab.patching.grid(model, clean, corrupt, metric)
    full = ilab.patching.grid(model, clean, corrupt, metric, reuse_cache=False)
    assert fast.values.shape == (2, len(clean.split()) + 1)
    np.testing.assert_allclose(fast.values, full.values, atol=1e-5)
    assert np.abs(full.values - full.corrupt_baseline).max() > 0.01
