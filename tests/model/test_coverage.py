"""Every Hugging Face causal-LM type in :data:`COVERED` loads with sites found from its module tree, each checked
against Hugging Face itself on a tiny random model (2 layers, hidden 64, 4 heads): ``hidden_states`` give
``resid_pre`` and ``resid_post``, ``output_attentions`` with eager attention gives ``attn.hook_pattern``, a
forward hook on the attention module gives what ``attn.hook_z`` projects to, and the residual identities
(``mid = pre + attn_out``, ``post = mid + mlp_out``; parallel blocks ``post = pre + attn_out + mlp_out``) tie
``hook_attn_out`` and ``hook_mlp_out`` to the stream. ``model.logits`` equals Hugging Face's logits.

:data:`NOT_COVERED` lists the types that are not, and why. ``docs/models.md`` lists :data:`COVERED`
(``test_docs_list_the_covered_types`` keeps it equal).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch
from interplab.core.model.eager_attention import eager_attention
from interplab.core.model.sites import FAMILIES, MODEL_TYPES, ROUTING_KINDS, resolve
from transformers import AutoConfig, AutoModelForCausalLM

import interplab as ilab
from tests.tiny import TEXTS, VOCAB_SIZE, tiny_tokenizer

COMMON = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=128, head_dim=16, vocab_size=VOCAB_SIZE, max_position_embeddings=128,
              bos_token_id=1, eos_token_id=2, pad_token_id=0)  # fmt: skip
#: Multi-head latent attention at this size: compressed queries and keys/values, query/key heads of 8 + 8 and value
#: heads of 24 (so attn.hook_z is 4 x 24 wide, neither d_model nor 4 x head_dim), 8 routed experts, a dense block 0.
MLA = dict(kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=24, head_dim=8,
           num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, n_group=2,
           topk_group=1, first_k_dense_replace=1)  # fmt: skip
MLA_TYPES = ("axk1", "axk2", "deepseek_v2", "deepseek_v3", "deepseek_v32", "glm4_moe_lite", "glm_moe_dsa",
             "sarvam_mla")  # fmt: skip
#: The attention settings alone, for a dense MLA type (Youtu).
_MLA_ATTENTION = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "head_dim",
                  "num_key_value_heads")  # fmt: skip
MLA_DENSE = {k: v for k, v in MLA.items() if k in _MLA_ATTENTION}
#: Types whose attn.hook_z differs in width between layers, so model.site_dim (one width per kind) gives the first
#: layer's: Gemma 4's full-attention layers use global_head_dim.
Z_WIDTH_VARIES = {"gemma4_unified_text"}
#: Config changes some types need to build at this size (or to have both kinds of layer in two).
OVERRIDES: dict[str, dict] = {
    **dict.fromkeys(MLA_TYPES, MLA),
    "youtu": MLA_DENSE,
    "gptj": dict(rotary_dim=8),
    "codegen": dict(rotary_dim=8),
    "falcon": dict(head_dim=None),
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1),
    "bamba": dict(attn_layer_indices=[1]),
    "lfm3": dict(layer_types=["conv", "full_attention"]),
    **{
        kind: dict(layer_types=["linear_attention", "full_attention"])
        for kind in (
            "qwen3_next",
            "granitemoehybrid",
            "kimi_linear",
            "qwen3_5_text",
            "qwen3_5_moe_text",
            "bailing_hybrid",
        )
    },
}
_MIXER = ("resid_pre", "resid_mid", "mlp_in", "mlp_out", "resid_post")  # a recurrent mixer, then an MoE MLP
_MIXER_DENSE = ("resid_pre", "resid_mid", "mlp_in", "mlp_post", "mlp_out", "resid_post")  # ... then a dense MLP
_ATTN = ("resid_pre", "hook_z", "pattern", "attn_out", "resid_mid", "mlp_in", "mlp_out", "resid_post")  # MoE MLP
_ATTN_DENSE = ("resid_pre", "hook_z", "pattern", "attn_out", "resid_mid", "mlp_in", "mlp_post", "mlp_out", "resid_post")
#: Types where a block has no attention (a recurrent mixer instead): the kinds each of the two blocks has. A mixer's
#: output is no site (what it adds is resid_mid - resid_pre); OLMo-hybrid's mixer block has no norm before its MLP,
#: so nothing checks its MLP sites and it keeps only the stream.
HYBRID = {
    "bamba": (_MIXER_DENSE, _ATTN_DENSE),
    "jamba": (_MIXER, _ATTN),
    "lara_mini": (_MIXER, _ATTN),
    "olmo_hybrid": (("resid_pre", "resid_post"), _ATTN_DENSE),
    "qwen3_next": (_MIXER, _ATTN),
    "qwen3_5_text": (_MIXER_DENSE, _ATTN_DENSE),
    "qwen3_5_moe_text": (_MIXER, _ATTN),
    "lfm3": (_MIXER_DENSE, _ATTN_DENSE),
}
#: Blocks that run attention and the MLP in parallel (no hook_resid_mid).
PARALLEL = {"codegen", "cohere", "cohere2", "cohere2_moe", "falcon", "gpt_neox", "gptj", "phi"}
#: Types checked, in the order docs/models.md lists them.
COVERED: tuple[str, ...] = (
    "afmoe",
    "apertus",
    "apertus1p5_text",
    "arcee",
    "aria_text",
    "axk1",
    "axk2",
    "bamba",
    "biogpt",
    "bitnet",
    "codegen",
    "cohere",
    "cohere2",
    "cohere2_moe",
    "ctrl",
    "cwm",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v32",
    "diffllama",
    "doge",
    "ernie4_5",
    "ernie4_5_moe",
    "exaone",
    "exaone4",
    "exaone_moe",
    "falcon",
    "flex_olmo",
    "fuyu",
    "gemma",
    "gemma2",
    "gemma3_text",
    "gemma4_unified_text",
    "glm",
    "glm4",
    "glm4_moe",
    "glm4_moe_lite",
    "glm_moe_dsa",
    "gpt-sw3",
    "gpt2",
    "gpt_bigcode",
    "gpt_neox",
    "gpt_neox_japanese",
    "gptj",
    "granite",
    "granite_swa",
    "granitemoe",
    "granitemoe_swa",
    "granitemoeshared",
    "helium",
    "hunyuan_v1_dense",
    "hunyuan_v1_moe",
    "hy_v3",
    "hyperclovax",
    "internlm3",
    "iquestcoder",
    "jais2",
    "jamba",
    "jetmoe",
    "kolibri1",
    "laguna",
    "lara_mini",
    "lfm2",
    "lfm3",
    "llama",
    "mellum",
    "minimax_m2",
    "minimax_m3_vl_text",
    "ministral",
    "ministral3",
    "mistral",
    "mixtral",
    "moshi",
    "nanochat",
    "nemotron",
    "olmo",
    "olmo2",
    "olmo3",
    "olmo_hybrid",
    "olmoe",
    "persimmon",
    "phi",
    "phi3",
    "phimoe",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_5_moe_text",
    "qwen3_5_text",
    "qwen3_moe",
    "qwen3_next",
    "sarvam_mla",
    "sarvam_moe",
    "seed_oss",
    "smollm3",
    "solar_open",
    "stablelm",
    "starcoder2",
    "vaultgemma",
    "xglm",
    "youtu",
    "zaya",
)
_BUILD = "the tiny config does not build or run in transformers 5.24 at this size"
_ENCODER = (
    "an encoder used as a decoder: its layers sit at <model>.encoder.layer, outside the decoder found, so load says "
    "'no decoder-layer list' (and its residual adds sit inside BertOutput-like modules)"
)
_HYBRID_CACHE = "transformers fails on a cache of linear-attention layers only with this two-layer pattern"
#: Causal-LM types of transformers 5.24 not covered, and why (the rest of MODEL_FOR_CAUSAL_LM_MAPPING_NAMES).
NOT_COVERED: dict[str, str] = {
    **dict.fromkeys(
        (
            "dbrx",
            "dots1",
            "dots3_note",
            "dots3_note_text",
            "gpt_neo",
            "gemma3n_text",
            "gemma4_assistant",
            "mamba2",
            "musicgen",
            "musicgen_melody",
            "whisper",
            "xlnet",
            "zamba",
            "zamba2",
            "cohere_compass_text",
            "lfm2_moe",
            "reformer",
            "xlstm",
        ),
        _BUILD,
    ),
    **dict.fromkeys(
        (
            "blt",
            "emu3",
            "gemma3",
            "gemma4",
            "gemma4_unified",
            "gemma4_unified_assistant",
            "got_ocr2",
            "llama4",
            "mllama",
            "moss_transcribe_diarize",
            "qwen3_5",
            "qwen3_5_moe",
            "qwen4_exp",
            "gemma3n",
            "falcon_h1",
        ),
        "a multimodal or byte-level wrapper that takes over 20 s to build here (the text model inside is "
        "found by derive.find_skeleton; its _text type is covered where one exists)",
    ),
    **dict.fromkeys(
        (
            "bert",
            "bert-generation",
            "big_bird",
            "camembert",
            "data2vec-text",
            "electra",
            "ernie",
            "megatron-bert",
            "rembert",
            "roberta",
            "roberta-prelayernorm",
            "roc_bert",
            "roformer",
            "xlm",
            "xlm-roberta",
            "xlm-roberta-xl",
            "xmod",
            "modernbert-decoder",
        ),
        _ENCODER,
    ),
    **dict.fromkeys(
        ("bart", "bigbird_pegasus", "blenderbot", "blenderbot-small", "marian", "mbart", "mvp", "pegasus"),
        "the decoder half of an encoder-decoder model: its depth is decoder_layers, which the shared tiny "
        "config leaves at the default, so no list of num_hidden_layers blocks is found",
    ),
    "trocr": "post-norm blocks: hook_mlp_out and the pattern fail the check at load and are dropped",
    **dict.fromkeys(("qwen4_exp_text", "recurrent_gemma", "kimi_linear", "bailing_hybrid"), _HYBRID_CACHE),
    "longcat_flash": "its blocks hold lists of attention modules, norms and MLPs (two sub-layers each) beside a "
    "shortcut MoE: no one attention module or MLP to find (multi-head latent attention on the MLA config)",
    "minicpm3": "its blocks scale each branch before adding it to the residual (scale_depth): no module reads "
    "resid_pre + attn_out, so attention and MLP sites are dropped at load (multi-head latent attention builds)",
    "mamba": "Mamba has its hand-written family (only the residual stream: no attention, no MLP)",
    "falcon_mamba": "Mamba blocks: no attention and no MLP to find (the mamba family's stream sites apply)",
    "rwkv": "RWKV's first block applies an extra pre-norm, so hidden_states[0] is not the block's input",
    "bloom": "attention and MLP add the residual inside their modules; reading hook_z, hook_attn_out and the pattern "
    "inside one module runs in another order than nnsight's site order",
    "opt": "OPTDecoderLayer flattens the stream to [tokens, d] before the MLP: the MLP sites are dropped at load",
    "beam": "no module's input is resid_pre + attn_out: attention and MLP sites are dropped at load (stream kept)",
    "inkling_text": "no module's input is resid_pre + attn_out: attention and MLP sites are dropped at load",
    "inkling2_loop_text": "no module's input is resid_pre + attn_out: attention and MLP sites are dropped at load",
    "inkling2_text": "its gated output projection takes a second input: the forward with hooks fails",
    "hrm_text": "no list of num_hidden_layers blocks under the decoder (hierarchical recurrent modules)",
    "cpmant": "no list of num_hidden_layers blocks under the decoder",
    "openai-gpt": "post-norm blocks: hook_mlp_out and the pattern fail the check at load and are dropped",
    "git": "no list of num_hidden_layers blocks under the decoder (a BERT-like text decoder)",
    "mpt": "MptBlock adds its MLP output inside the MLP module: hook_mlp_out and mlp.hook_post are dropped at load",
    "llama4_text": "Llama 4's MoE adds shared and routed experts after the mlp module: hook_mlp_out is dropped at load",
    "gemma4_text": "Gemma 4 adds per-layer inputs and scales after the MLP: hook_mlp_out is dropped at load",
    "gpt_oss": "attention sinks: pattern rows do not sum to 1, so the pattern is dropped at load",
    "flint": "its attention rows do not sum to 1 (sinks): the pattern is dropped at load",
    "mimo_v2_flash": "attention sinks in some layers: the pattern is dropped there at load",
    "granitemoehybrid": "its mamba blocks keep the MoE without a checkable norm: MLP sites dropped there at load",
    "minimax": "no module's input is resid_pre + attn_out (it scales the residual): only the stream is kept",
    "nemotron_h": "one mixer per block (mamba, attention, MLP or MoE) and no hook_resid_mid: only the stream is kept",
    "deepseek_v4": "it runs neither sdpa nor eager attention at this size (" + _BUILD + ")",
    "phi4_multimodal": "a multimodal wrapper (audio and vision towers) whose tiny config does not build here",
    "plbart": "the decoder half of an encoder-decoder model (see bart)",
    "prophetnet": "an encoder-decoder model's n-gram decoder: no list of num_hidden_layers blocks",
    "dory": "model.logits differs from Hugging Face's by up to 6e-3 (not yet understood)",
    "hy_v4": "hidden states carry an extra axis ([batch, pos, streams, d]): " + _BUILD,
}


def tiny_config(kind: str):
    """A two-layer config of ``kind``; the attributes a type's config does not take are left out."""
    settings = {**COMMON, **OVERRIDES.get(kind, {})}
    settings = {k: v for k, v in settings.items() if v is not None}
    return AutoConfig.for_model(kind, **settings)


def tiny_hf(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(tiny_config(kind)).eval()


def hf_truth(hf: torch.nn.Module, enc: dict[str, torch.Tensor], attn_paths: list[str]):
    """Hugging Face's own hidden states, eager attentions, logits and attention-module outputs for ``enc``."""
    seen: dict[str, torch.Tensor] = {}

    def keep(path: str):
        def hook(_module, _inputs, out) -> None:
            seen.setdefault(path, out[0] if isinstance(out, tuple) else out)

        return hook

    hooks = [resolve(hf, p).register_forward_hook(keep(p)) for p in attn_paths]
    # eager for the whole model (Falcon's output_attentions under sdpa adds its boolean mask to the scores)
    try:
        with eager_attention(hf), torch.no_grad():
            out = hf(**enc, output_hidden_states=True, output_attentions=True, use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    return out, seen


def assert_sites_match_hf(kind: str, model: ilab.Model, hf: torch.nn.Module) -> None:
    enc = model.to_tokens(TEXTS)
    mask = enc["attention_mask"].bool()
    acts = model.collect(TEXTS, model.sites)
    family = model.family
    attn_paths = [f"{family.layers}.{layer}.{family.attn}" for layer in range(model.n_layers)
                  if "hook_z" in model.layer_kinds(layer)]  # fmt: skip
    out, attn_module = hf_truth(hf, enc, attn_paths)

    def site(layer: int, kind_: str) -> torch.Tensor | None:
        name = ilab.core.model.site_name(layer, kind_)
        return acts.values.get(name)

    def same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
        got, want = got.float()[mask], want.float()[mask]
        scale = max(1.0, float(want.abs().max()))
        assert float((got - want).abs().max()) <= 1e-4 * scale, f"{kind} {what}"

    for layer in range(model.n_layers):
        kinds = model.layer_kinds(layer)
        pre, post = site(layer, "resid_pre"), site(layer, "resid_post")
        same(pre, out.hidden_states[layer], f"blocks.{layer}.hook_resid_pre vs hidden_states[{layer}]")
        if layer + 1 < model.n_layers:
            same(post, out.hidden_states[layer + 1], f"blocks.{layer}.hook_resid_post vs hidden_states[{layer + 1}]")
        attn, mlp, mid = site(layer, "attn_out"), site(layer, "mlp_out"), site(layer, "resid_mid")
        if "resid_mid" in kinds and "attn_out" in kinds:
            same(mid, pre + attn, f"blocks.{layer}: resid_mid = resid_pre + attn_out")
        if "resid_mid" in kinds and "mlp_out" in kinds:
            same(post, mid + mlp, f"blocks.{layer}: resid_post = resid_mid + mlp_out")
        if model.family.parallel:
            same(post, pre + attn + mlp, f"blocks.{layer}: resid_post = resid_pre + attn_out + mlp_out (parallel)")
        if "pattern" in kinds:  # a hybrid model's attentions are its attention layers' only
            with_pattern = [n for n in range(model.n_layers) if "pattern" in model.layer_kinds(n)]
            index = layer if len(out.attentions) == model.n_layers else with_pattern.index(layer)
            pattern, want = site(layer, "pattern"), out.attentions[index].float()
            for row, n in enumerate(mask.sum(1).tolist()):
                torch.testing.assert_close(pattern[row, :, :n, :n], want[row, :, :n, :n], rtol=1e-4, atol=1e-5)
        if "hook_z" in kinds and kind not in Z_WIDTH_VARIES:
            z_name = ilab.core.model.site_name(layer, "hook_z")
            assert site(layer, "hook_z").shape[-1] == model.site_dim(z_name), f"{kind} {z_name} width"
        if "hook_z" in kinds and family.o_proj != family.attn_out:
            o_proj = resolve(hf, f"{family.layers}.{layer}.{family.o_proj}")
            with torch.no_grad():
                projected = o_proj(site(layer, "hook_z"))
            same(projected, attn_module[f"{family.layers}.{layer}.{family.attn}"], f"blocks.{layer}: o_proj(hook_z)")
    lengths = mask.sum(1)
    want = out.logits.float()[torch.arange(len(TEXTS)), lengths - 1]
    torch.testing.assert_close(model.logits(TEXTS)[:, 0], want, rtol=1e-4, atol=1e-4)


def load(kind: str) -> tuple[ilab.Model, torch.nn.Module, list[str]]:
    hf = tiny_hf(kind)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    return model, hf, [str(w.message) for w in caught if "failed the check at load" in str(w.message)]


@pytest.mark.parametrize("kind", COVERED)
def test_sites_of_each_covered_type_match_hugging_face(kind):
    model, hf, failed = load(kind)
    assert model.family is not None and not failed, failed
    if kind in HYBRID:
        found = tuple(
            tuple(k for k in model.layer_kinds(layer) if k not in ROUTING_KINDS) for layer in range(model.n_layers)
        )
        assert found == HYBRID[kind]  # routing sites are checked in tests/model/test_routing.py
    else:
        wanted = {"resid_pre", "attn_out", "mlp_out", "resid_post"} | ({"resid_mid"} if kind not in PARALLEL else set())
        assert wanted <= set(model.kinds), model.kinds
        assert ("resid_mid" in model.kinds) == (kind not in PARALLEL)
    assert_sites_match_hf(kind, model, hf)


@pytest.mark.parametrize("kind", sorted(k for k, name in MODEL_TYPES.items() if name != "mamba" and k != "gemma3"))
def test_derivation_finds_what_the_hand_written_families_say(kind):
    """The control for derivation: on the types with a hand-written family, the derived one reads the same modules."""
    from interplab.core.model.blocks import derive_family
    from interplab.core.model.derive import find_skeleton

    hf = tiny_hf(kind)
    written = FAMILIES[MODEL_TYPES[kind]]
    derived = derive_family(hf, find_skeleton(hf, hf.config), kind, [1])
    for part in ("layers", "attn", "o_proj", "attn_out", "mlp_out", "down_proj", "final_norm", "embed"):
        assert getattr(derived, part) == getattr(written, part), (kind, part)
    assert derived.mlp_norm in (written.mlp_norm, "") and derived.parallel == (kind == "gpt_neox")


def test_encoder_decoder_types_are_refused_naming_what_is_supported():
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    hf = T5ForConditionalGeneration(T5Config(num_layers=2, d_model=64, d_ff=128, num_heads=4, d_kv=16, vocab_size=64))
    with pytest.raises(ValueError, match=r"model_type 't5' is an encoder-decoder model.*decoder-only causal LMs"):
        ilab.load_model(hf, tokenizer=tiny_tokenizer())


def test_every_causal_lm_type_is_covered_or_says_why_not():
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    assert not set(COVERED) & set(NOT_COVERED)
    assert set(COVERED) | set(NOT_COVERED) == set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def test_docs_list_the_covered_types():
    text = (Path(__file__).parents[2] / "docs" / "models.md").read_text()
    section = text.split("<!-- covered types -->")[1].split("<!-- end covered types -->")[0]
    assert re.findall(r"`([\w-]+)`", section) == list(COVERED)
    assert len(COVERED) >= 60
