"""Causal LMs without a site table (OPT, Falcon, GPT-J, Gemma 4): they load with a warning saying what works,
``model.logits`` equals Hugging Face's own logits and the logit lens reads each block through the final norm and
unembedding found in the module tree (:mod:`interplab.core.model.derive`)."""

from __future__ import annotations

import logging

import pytest
import torch
from interplab.core.model.derive import DerivationError
from interplab.core.model.routing import MOE_TYPES
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    FalconConfig,
    Gemma4TextConfig,
    GPTJConfig,
    LlamaConfig,
    OPTConfig,
)

import interplab as ilab
from tests.tiny import TEXTS, VOCAB_SIZE, tiny_tokenizer

COMMON = dict(vocab_size=VOCAB_SIZE, bos_token_id=1, eos_token_id=2, pad_token_id=0)
CONFIGS = {
    "opt": lambda: OPTConfig(num_hidden_layers=2, hidden_size=64, ffn_dim=128, num_attention_heads=4,
                             word_embed_proj_dim=64, max_position_embeddings=128, **COMMON),
    "falcon": lambda: FalconConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, **COMMON),
    "gptj": lambda: GPTJConfig(n_layer=2, n_embd=64, n_head=4, rotary_dim=8, n_positions=128, **COMMON),
    "gemma4_text": lambda: Gemma4TextConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                            num_attention_heads=4, num_key_value_heads=1, head_dim=16, **COMMON),
}  # fmt: skip
#: Llama-shaped and other types whose configs take these names as they are (MoE, parallel and post-norm blocks).
GENERIC = ("bloom", "phi", "phi3", "olmo2", "stablelm", "starcoder2", "granite", "mixtral", "qwen2_moe", "llama4_text")
for _kind in GENERIC:
    CONFIGS[_kind] = lambda kind=_kind: AutoConfig.for_model(
        kind, num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
        max_position_embeddings=128, **COMMON)  # fmt: skip


def tiny_unmapped(kind: str, **changes) -> torch.nn.Module:
    config = CONFIGS[kind]()
    for key, value in changes.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


@pytest.fixture(params=sorted(CONFIGS))
def unmapped(request, caplog):
    hf = tiny_unmapped(request.param)
    with caplog.at_level(logging.WARNING, logger="interplab.core.model.parts"):
        model = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    return request.param, hf, model, caplog.text


def hf_logits(hf: torch.nn.Module, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    enc = tiny_tokenizer()(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        return hf(**enc).logits.float(), enc["attention_mask"].sum(1)


def test_unlisted_type_loads_with_sites_found_from_its_module_tree(unmapped):
    """Without a hand-written family the blocks' sites are derived (tests/model/test_coverage.py checks them against
    Hugging Face); the residual stream is always among them."""
    kind, hf, model, _ = unmapped
    assert model.family is not None and model.family.derived and model.family.name == kind
    assert {"blocks.0.hook_resid_pre", "blocks.0.hook_resid_post"} <= set(model.sites)
    enc = tiny_tokenizer()(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        want = hf(**enc, output_hidden_states=True).hidden_states[1]
    got = model.collect(TEXTS, "blocks.0.hook_resid_post").values["blocks.0.hook_resid_post"]
    for row, n in enumerate(enc["attention_mask"].sum(1).tolist()):
        torch.testing.assert_close(got[row, :n], want[row, :n].float(), rtol=1e-4, atol=1e-4)


def test_type_without_a_decoder_layer_list_loads_with_a_warning_naming_it_and_what_works(caplog):
    """CPM-Ant's blocks are not a list of num_hidden_layers modules under its decoder: no sites are derived, and the
    warning says which part was not found, what still works and where to go instead."""
    config = AutoConfig.for_model("cpmant", num_hidden_layers=2, dim_model=64, num_heads=4, dim_head=16, dim_ff=128,
                                  vocab_size=VOCAB_SIZE)  # fmt: skip
    torch.manual_seed(0)
    with caplog.at_level(logging.WARNING, logger="interplab.core.model.parts"):
        model = ilab.load_model(AutoModelForCausalLM.from_config(config).eval(), tokenizer=tiny_tokenizer())
    warned = caplog.text
    assert model.family is None and model.sites == []
    assert "model_type 'cpmant': no decoder-layer list of 2 blocks under cpmant" in warned
    assert "model.nn" in warned and "load_model(module, sites={...})" in warned
    assert "model.logits works" in warned and "logit_lens cannot run" in warned


@pytest.mark.parametrize("kind", [k for k in MOE_TYPES if k in CONFIGS])
def test_a_moe_type_has_routing_sites_beside_the_derived_ones(kind):
    """The router is found whatever found the blocks' sites (:mod:`interplab.core.model.routing`): block 0 has
    the stream, the MLP's output and the routing sites, in forward order."""
    model = ilab.load_model(tiny_unmapped(kind), tokenizer=tiny_tokenizer())
    block0 = [s for s in model.sites if s.startswith("blocks.0.")]
    routing = ["blocks.0.mlp.hook_router_logits", "blocks.0.mlp.hook_expert_ids", "blocks.0.mlp.hook_expert_weights"]
    assert [s for s in block0 if s in routing] == routing
    assert block0.index("blocks.0.hook_resid_pre") < block0.index(routing[0]) < block0.index("blocks.0.hook_resid_post")
    ids = model.collect(TEXTS, "blocks.0.mlp.hook_expert_ids").values["blocks.0.mlp.hook_expert_ids"]
    assert ids.shape[:2] == model.to_tokens(TEXTS)["input_ids"].shape


def test_logits_of_an_unmapped_model_equal_hf_logits(unmapped):
    _, hf, model, _ = unmapped
    want, lengths = hf_logits(hf, TEXTS)
    last = want[torch.arange(len(TEXTS)), lengths - 1]
    torch.testing.assert_close(model.logits(TEXTS)[:, 0], last, rtol=1e-5, atol=1e-5)
    every = model.logits(TEXTS, positions=None)
    for row, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(every[row, :n], want[row, :n], rtol=1e-5, atol=1e-5)
    two = model.logits(TEXTS, positions=[0, -2])
    torch.testing.assert_close(two[:, 0], want[:, 0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(two[:, 1], want[torch.arange(len(TEXTS)), lengths - 2], rtol=1e-5, atol=1e-5)


def test_logit_lens_of_an_unmapped_model_reads_every_block(unmapped):
    """The last layer's lens is the model's logits; an earlier one is the final norm and unembedding of that block's
    output, read by a torch hook (the control)."""
    _, hf, model, _ = unmapped
    lens = ilab.logit_lens(model, TEXTS)
    assert lens.shape == (len(TEXTS), 2, VOCAB_SIZE)
    want, lengths = hf_logits(hf, TEXTS)
    rows = torch.arange(len(TEXTS))
    torch.testing.assert_close(lens[:, 1], want[rows, lengths - 1], rtol=1e-4, atol=1e-4)
    norm, unembed = model.readout_modules()
    seen = []
    block = model.block(0)._module
    hook = block.register_forward_hook(lambda _m, _i, out: seen.append(out[0] if isinstance(out, tuple) else out))
    try:
        hf_logits(hf, TEXTS)
    finally:
        hook.remove()
    with torch.no_grad():
        first = unembed(norm(seen[0][rows, lengths - 1])).float()
    torch.testing.assert_close(lens[:, 0], first, rtol=1e-4, atol=1e-4)


def test_gemma4_loads_unmapped_with_its_dimensions():
    model = ilab.load_model(tiny_unmapped("gemma4_text"), tokenizer=tiny_tokenizer())
    assert (model.n_layers, model.d_model, model.n_heads, model.d_mlp) == (2, 64, 4, 128)


def test_lens_without_a_final_norm_names_what_was_not_found():
    """OPT with post-norm blocks (do_layer_norm_before=False) has no final norm: logits work, the lens says why not."""
    hf = tiny_unmapped("opt", do_layer_norm_before=False)
    hf = AutoModelForCausalLM.from_config(hf.config).eval()
    model = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    want, _ = hf_logits(hf, TEXTS[:1])
    torch.testing.assert_close(model.logits(TEXTS[:1])[0, 0], want[0, -1], rtol=1e-5, atol=1e-5)
    with pytest.raises(
        DerivationError, match=r"no final norm .* under model\.decoder\. Read its modules through model"
    ):
        ilab.logit_lens(model, TEXTS)


def test_mapped_type_without_its_layer_list_is_refused_at_load_naming_it():
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                                                      num_attention_heads=4, **COMMON)).eval()  # fmt: skip
    del hf.model.layers
    with pytest.raises(DerivationError, match=r"no decoder-layer list of 2 blocks under model \(module lists: none\)"):
        ilab.load_model(hf, tokenizer=tiny_tokenizer())


def test_lens_is_refused_where_the_model_scales_its_logits():
    """Cohere multiplies the unembedding's output by logit_scale: the final norm and unembedding alone are not its
    logits, so the lens says so (a one-token forward shows it) instead of reading wrong numbers; logits still work."""
    torch.manual_seed(0)
    config = AutoConfig.for_model("cohere", num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                  intermediate_size=128, logit_scale=0.0625, **COMMON)  # fmt: skip
    hf = AutoModelForCausalLM.from_config(config).eval()
    model = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    want, _ = hf_logits(hf, TEXTS[:1])
    torch.testing.assert_close(model.logits(TEXTS[:1])[0, 0], want[0, -1], rtol=1e-5, atol=1e-5)
    with pytest.raises(DerivationError, match=r"model\.norm and the unembedding lm_head found do not give the model's"):
        ilab.logit_lens(model, TEXTS)
