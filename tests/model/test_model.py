"""Model: logits, tokens, generate, remote="local", loading and bad input, on tiny models.

The last few tests (marked ``embedded``) use the real Gemma 3 270M.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from transformers import AutoModelForCausalLM, CpmAntConfig

import interplab as ilab
from tests.tiny import TEXTS, VOCAB_SIZE, tiny_hf_model, tiny_model, tiny_tokenizer

ATOL = 1e-5
LENGTHS = [7, 15, 10]  # tokens of each of TEXTS, BOS included


def hf_logits(family: str, texts=TEXTS, hf: torch.nn.Module | None = None):
    """Full-forward logits of a fresh HF model with the fixture's weights, and the lengths."""
    hf = hf if hf is not None else tiny_hf_model(family)
    enc = tiny_tokenizer()(texts, return_tensors="pt", padding=True, padding_side="right")
    with torch.no_grad():
        logits = hf(**enc).logits
    return logits, enc["attention_mask"].sum(1)


# ------------------------------------------------------------------ logits
@pytest.mark.parametrize("batch_size", [8, 2])
def test_logits_last_position_matches_hf(model, family, batch_size):
    full, lengths = hf_logits(family)
    assert lengths.tolist() == LENGTHS
    got = model.logits(TEXTS, batch_size=batch_size)
    assert got.shape == (3, 1, VOCAB_SIZE)
    expected = full[torch.arange(3), lengths - 1]  # each text's own last real token
    torch.testing.assert_close(got[:, 0], expected, atol=ATOL, rtol=0)
    # not the padded batch's last column, which differs for the shorter texts
    assert not torch.allclose(got[0, 0], full[0, -1], atol=1e-3)


def test_logits_positions_list(model, family):
    full, lengths = hf_logits(family)
    got = model.logits(TEXTS, positions=[0, 2, -2])
    assert got.shape == (3, 3, VOCAB_SIZE)
    for b, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(got[b], full[b, [0, 2, n - 2]], atol=ATOL, rtol=0)


@pytest.mark.parametrize("batch_size", [8, 2])
def test_logits_all_positions(model, family, batch_size):
    full, lengths = hf_logits(family)
    got = model.logits(TEXTS, positions=None, batch_size=batch_size)
    assert got.shape == (3, max(LENGTHS), VOCAB_SIZE)
    for b, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(got[b, :n], full[b, :n], atol=ATOL, rtol=0)


@pytest.mark.parametrize("position", [7, 15, -8, -100])
def test_logits_position_out_of_range(position):
    model = tiny_model("llama")  # shortest text has 7 tokens
    with pytest.raises(ValueError, match=rf"Position {position} .*7 tokens"):
        model.logits(TEXTS, positions=position)
    with pytest.raises(ValueError, match=rf"Position {position}"):
        model.logits(TEXTS, positions=[0, position])


def test_logits_softcapping_matches_hf():
    """Gemma's final logit soft-capping is applied like HF applies it."""
    hf = tiny_hf_model("gemma3")
    hf.config.final_logit_softcapping = 0.05  # small enough to bite on tiny random logits
    model = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    full, lengths = hf_logits("gemma3", hf=hf)
    got = model.logits(TEXTS, positions=None)
    for b, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(got[b, :n], full[b, :n], atol=ATOL, rtol=0)
    assert got.abs().max() < 0.05
    uncapped, _ = hf_logits("gemma3")
    assert not torch.allclose(full, uncapped, atol=1e-3)  # the cap really changed them


def test_remote_local_logits_equal_local(model, family):
    remote = tiny_model(family, remote="local")
    assert torch.equal(remote.logits(TEXTS), model.logits(TEXTS))
    assert torch.equal(remote.logits(TEXTS, positions=None), model.logits(TEXTS, positions=None))


# ------------------------------------------------------------------ tokens
def test_to_tokens_right_padding_with_bos(model):
    enc = model.to_tokens(["the cat", "the cat sat on"])
    tok = tiny_tokenizer()
    the, cat, sat, on = tok.convert_tokens_to_ids(["the", "cat", "sat", "on"])
    assert enc["input_ids"].tolist() == [[1, the, cat, 0, 0], [1, the, cat, sat, on]]
    assert enc["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    one = model.to_tokens("the cat")
    assert one["input_ids"].tolist() == [[1, the, cat]]


def test_to_str_tokens(model):
    assert model.to_str_tokens("the cat sat") == ["<bos>", "the", "cat", "sat"]
    ids = model.to_tokens("Mary gave")["input_ids"]
    assert model.to_str_tokens(ids) == ["<bos>", "Mary", "gave"]
    assert model.to_str_tokens(ids[0].tolist()) == ["<bos>", "Mary", "gave"]
    acts = model.collect(TEXTS, "blocks.0.hook_resid_pre")
    assert acts.str_tokens == [model.to_str_tokens(t) for t in TEXTS]


def test_repr():
    assert repr(tiny_model("gemma3")) == "Model('Gemma3ForCausalLM', 2 layers, d_model=32)"
    assert repr(tiny_model("gpt2", remote="local")) == (
        "Model('GPT2LMHeadModel', 2 layers, d_model=32, remote='local')"
    )


def test_generate_batch_equals_alone(model):
    both = model.generate(TEXTS[:2], max_new_tokens=4)
    assert isinstance(both, list) and len(both) == 2 and all(isinstance(s, str) for s in both)
    # left padding inside generate must not change a text's continuation
    assert both == [model.generate(t, max_new_tokens=4)[0] for t in TEXTS[:2]]


# --------------------------------------------------------------- bad input
S0 = "blocks.0.hook_resid_post"
BAD_CALLS = {  # name: (call, exception, message pattern naming the bad value)
    "empty text": (lambda m: m.collect("", S0), ValueError, r"texts\[0\] is empty \(''\)"),
    "blank text": (lambda m: m.logits(["the cat", "  "]), ValueError, r"texts\[1\] is empty \('  '\)"),
    "empty list": (lambda m: m.collect([], S0), ValueError, r"texts is empty"),
    "int text": (lambda m: m.collect(5, S0), TypeError, r"string or a list of strings, got int"),
    "int list": (lambda m: m.collect([1, 2], S0), TypeError, r"texts\[0\] is int \(1\)"),
    "batch 0": (lambda m: m.collect(TEXTS, S0, batch_size=0), ValueError, r"positive integer, got 0"),
    "batch 1.5": (lambda m: m.logits(TEXTS, batch_size=1.5), ValueError, r"positive integer, got 1\.5"),
    "generate 0": (lambda m: m.generate("the cat", max_new_tokens=0), ValueError, r"max_new_tokens.*got 0"),
    "tokens int": (lambda m: m.to_tokens(7), TypeError, r"got int"),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_input(case):
    call, exc, match = BAD_CALLS[case]
    with pytest.raises(exc, match=match):
        call(tiny_model("gpt2"))


@pytest.mark.parametrize("remote", ["cloud", 1.5, "ftp://x"])
def test_bad_remote(remote):
    with pytest.raises(ValueError, match=rf"remote={remote!r}.*not valid.*False.*True.*'local'"):
        ilab.load_model(tiny_hf_model("gpt2"), tokenizer=tiny_tokenizer(), remote=remote)


@pytest.mark.parametrize("dtype", ["float64", "fp8", 32])
def test_bad_dtype(dtype):
    with pytest.raises(ValueError, match=rf"dtype={dtype!r}.*not valid.*'bfloat16', 'float16', 'float32'"):
        ilab.load_model(tiny_hf_model("gpt2"), tokenizer=tiny_tokenizer(), dtype=dtype)


@pytest.mark.parametrize("remote", [True, "local", "http://127.0.0.1:1"])
def test_plain_module_refuses_remote(remote):
    """nnsight would silently run a plain module locally: load_model must refuse."""
    with pytest.raises(ValueError, match=rf"remote={remote!r}.*plain Linear"):
        ilab.load_model(torch.nn.Linear(2, 2), remote=remote)


@pytest.mark.parametrize("remote", [True, "http://127.0.0.1:1"])
def test_built_hf_model_refuses_true_remote(remote):
    with pytest.raises(ValueError, match=rf"remote={remote!r}.*Hugging Face id"):
        ilab.load_model(tiny_hf_model("gpt2"), tokenizer=tiny_tokenizer(), remote=remote)


def test_built_hf_model_needs_tokenizer():
    with pytest.raises(ValueError, match=r"needs its tokenizer.*tokenizer="):
        ilab.load_model(tiny_hf_model("llama"))


@pytest.mark.parametrize("bad", [123, 1.0, ["gpt2"]])
def test_load_model_bad_type(bad):
    with pytest.raises(TypeError, match=rf"Hugging Face id.*torch\.nn\.Module.*got {type(bad).__name__}"):
        ilab.load_model(bad)


def test_load_model_folder_without_config(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"without config\.json"):
        ilab.load_model(tmp_path)


def test_plain_module_has_no_sites():
    model = ilab.load_model(torch.nn.Linear(2, 2))
    assert model.sites == []
    assert model.remote is False
    with pytest.raises(ValueError, match=r"'Linear'.*model\.nn"):
        model.collect("the cat", "blocks.0.hook_resid_post")


def test_unsupported_model_type():
    # an architecture whose blocks cannot be found (CPM-Ant: no list of num_hidden_layers blocks under its decoder):
    # the error names the bad value (the model type) and the valid choices
    cfg = CpmAntConfig(num_hidden_layers=1, dim_model=16, num_heads=2, dim_head=8, dim_ff=32, vocab_size=VOCAB_SIZE)
    torch.manual_seed(0)
    model = ilab.load_model(AutoModelForCausalLM.from_config(cfg).eval(), tokenizer=tiny_tokenizer())
    assert model.family is None
    assert model.sites == []
    # the error names the model type and the types that are supported
    with pytest.raises(ValueError, match=r"model_type 'cpmant'.*gpt2.*llama") as err:
        model.collect("the cat", "blocks.0.hook_resid_post")
    assert "model.nn" in str(err.value)
    # model.nn still works for anything custom, and model.logits needs no sites: it gives the model's own logits
    with torch.no_grad(), model.nn.trace("the cat"):
        out = nnsight.save(model.nn.output)
    assert out.logits.shape == (1, 3, VOCAB_SIZE)
    # CPM-Ant unembeds only the last position when asked (logits_to_keep): float32 rounding of another matmul shape
    torch.testing.assert_close(model.logits("the cat")[0, 0], out.logits[0, -1].float(), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- embedded
CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


def _token_id(model, word: str) -> int:
    ids = model.tokenizer(word, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1, (word, ids)
    return ids[0]


@pytest.mark.embedded
def test_embedded_loads(embedded):
    assert embedded.n_layers == 18 and embedded.d_model == 640
    assert embedded.config.model_type in ("gemma3", "gemma3_text")
    # the embedding, then per layer: resid_pre, attn.hook_z, attn.hook_pattern, hook_attn_out, hook_resid_mid,
    # hook_mlp_in, mlp.hook_post, hook_mlp_out, hook_resid_post
    assert len(embedded.sites) == 1 + 18 * 9
    assert embedded.sites[0] == "hook_embed" and "blocks.17.mlp.hook_post" in embedded.sites
    assert embedded.to_str_tokens("Hi")[0] == "<bos>"


@pytest.mark.embedded
def test_embedded_collect_and_logit_diff(embedded):
    site = "blocks.6.hook_resid_post"
    acts = embedded.collect(CLEAN, site)
    assert acts[site].shape == (1, 15, 640)
    assert torch.isfinite(acts[site]).all()
    assert acts.str_tokens[0][:3] == ["<bos>", "When", " Mary"]
    logits = embedded.logits([CLEAN, CORRUPT])
    assert logits.shape == (2, 1, 262_144)
    mary, john = _token_id(embedded, " Mary"), _token_id(embedded, " John")
    diff = logits[:, 0, mary] - logits[:, 0, john]
    assert diff[0] > 0 and diff[1] < 0
    assert diff[0] == pytest.approx(5.22, abs=0.05)


@pytest.mark.embedded
def test_embedded_generate(embedded):
    (text,) = embedded.generate("The capital of France is", max_new_tokens=5)
    assert isinstance(text, str) and text.strip()


@pytest.mark.embedded
def test_embedded_remote_local_equals_local(embedded):
    remote = ilab.load_model(remote="local")
    assert remote.remote == "local"
    site = "blocks.6.hook_resid_post"
    text = "When Mary and John went"
    assert torch.equal(remote.collect(text, site)[site], embedded.collect(text, site)[site])


def test_fingerprint_of_weights_on_the_meta_device():
    """A remote model's weights are meta tensors (they live on the server): its fingerprint must still be
    computable (CI found `Cannot copy out of meta tensor` in every remote cache and feature scan)."""
    from interplab.core.model.limits import module_fingerprint

    with torch.device("meta"):
        meta = torch.nn.Linear(4, 3)
    real = torch.nn.Linear(4, 3)
    assert len(module_fingerprint("m", meta)) == 16
    assert module_fingerprint("m", meta) == module_fingerprint("m", meta)
    assert module_fingerprint("m", real) != module_fingerprint("m", meta)


@pytest.mark.embedded
def test_embedded_weights_start_on_64_bytes(embedded):
    """The converted file puts every tensor on a 64-byte boundary, so the memory-mapped weights are aligned
    (with safetensors' own 8-byte layout the bfloat16 forward of 8 x 64 tokens ran 2.4x slower)."""
    params = list(embedded.module.parameters())
    assert params and all(p.data_ptr() % 64 == 0 for p in params)
