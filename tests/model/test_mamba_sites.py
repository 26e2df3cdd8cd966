"""Mamba and Mamba-2 (``MambaForCausalLM``, ``Mamba2ForCausalLM``): residual-stream sites against Hugging Face's
own hidden states on tiny random models, so SAEs and cross-model similarity run on them with real weights."""

from __future__ import annotations

import pytest
import torch
from interplab.core.saes import SAE
from transformers import Mamba2Config, Mamba2ForCausalLM, MambaConfig, MambaForCausalLM

import interplab as ilab
from tests.tiny import VOCAB_SIZE, tiny_tokenizer

TEXTS = ["the cat sat on the mat", "Mary gave John a drink when John went to the store"]


def tiny_mamba(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    common = dict(vocab_size=VOCAB_SIZE, hidden_size=32, num_hidden_layers=2, bos_token_id=1, eos_token_id=2,
                  pad_token_id=0)  # fmt: skip
    if kind == "mamba":
        return MambaForCausalLM(MambaConfig(state_size=8, expand=2, conv_kernel=4, **common)).eval()
    return Mamba2ForCausalLM(Mamba2Config(num_heads=4, head_dim=16, state_size=8, n_groups=1, expand=2,
                                          chunk_size=16, **common)).eval()  # fmt: skip


@pytest.fixture(params=["mamba", "mamba2"])
def mamba(request):
    hf = tiny_mamba(request.param)
    return hf, ilab.load_model(hf, tokenizer=tiny_tokenizer())


def test_sites_are_the_residual_stream_and_the_mixer(mamba):
    _, model = mamba
    assert model.sites == ["hook_embed", "blocks.0.hook_resid_pre", "blocks.0.hook_mixer_in", "blocks.0.hook_mixer_out",
                           "blocks.0.hook_resid_post", "blocks.1.hook_resid_pre", "blocks.1.hook_mixer_in",
                           "blocks.1.hook_mixer_out", "blocks.1.hook_resid_post"]  # fmt: skip
    with pytest.raises(ValueError, match=r"'blocks\.0\.hook_mlp_out' does not exist in this model: Mamba blocks have"):
        model.parse_sites("blocks.0.hook_mlp_out")


def test_mixer_sites_equal_forward_hooks_on_the_mixer(mamba):
    """The control: torch hooks on each block's mixer, its input (the norm's output) and its output; and the block
    adds the mixer's output to the stream (resid_post = resid_pre + mixer_out)."""
    hf, model = mamba
    acts = model.collect(TEXTS, ["resid_pre", "mixer_in", "mixer_out", "resid_post"])
    seen: dict[str, torch.Tensor] = {}
    hooks = [block.mixer.register_forward_hook(lambda _m, args, out, layer=layer: seen.update(
        {f"blocks.{layer}.hook_mixer_in": args[0], f"blocks.{layer}.hook_mixer_out": out}))
        for layer, block in enumerate(hf.backbone.layers)]  # fmt: skip
    enc = tiny_tokenizer()(TEXTS, return_tensors="pt", padding=True)
    try:
        with torch.no_grad():
            hf(**enc)
    finally:
        for hook in hooks:
            hook.remove()
    assert len(seen) == 4
    for row, n in enumerate(enc["attention_mask"].sum(1).tolist()):
        for site, want in seen.items():
            torch.testing.assert_close(acts[site][row, :n], want[row, :n], rtol=1e-5, atol=1e-5)
        for layer in range(2):
            pre, out, post = (
                acts[f"blocks.{layer}.hook_{k}"][row, :n] for k in ("resid_pre", "mixer_out", "resid_post")
            )
            torch.testing.assert_close(pre + out, post, rtol=1e-5, atol=1e-5)
    assert model.site_dim("blocks.0.hook_mixer_in") == model.site_dim("blocks.0.hook_mixer_out") == 32


def test_residual_sites_equal_hf_hidden_states(mamba):
    """HF's Mamba hidden states are each block's output, then the final norm's: resid_post of every layer."""
    hf, model = mamba
    acts = model.collect(TEXTS, model.sites)
    enc = tiny_tokenizer()(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        hidden = hf(**enc, output_hidden_states=True).hidden_states
        embedded = hf.backbone.embeddings(enc["input_ids"])
    assert len(hidden) == 3
    for row, n in enumerate(enc["attention_mask"].sum(1).tolist()):
        got = {s: acts[s][row, :n] for s in model.sites}
        close = lambda a, b, row=row, n=n: torch.testing.assert_close(a, b[row, :n], rtol=1e-5, atol=1e-5)  # noqa: E731
        close(got["hook_embed"], embedded)
        close(got["blocks.0.hook_resid_pre"], embedded)
        close(got["blocks.0.hook_resid_post"], hidden[0])
        close(got["blocks.1.hook_resid_pre"], hidden[0])
        close(got["blocks.1.hook_resid_post"], hidden[1])
        with torch.no_grad():
            torch.testing.assert_close(hf.backbone.norm_f(got["blocks.1.hook_resid_post"]), hidden[2][row, :n],
                                       rtol=1e-5, atol=1e-5)  # fmt: skip


def test_logits_match_hf_and_similarity_runs_against_a_transformer(mamba):
    hf, model = mamba
    enc = tiny_tokenizer()(TEXTS[:1], return_tensors="pt")
    with torch.no_grad():
        want = hf(**enc).logits[0, -1]
    torch.testing.assert_close(model.logits(TEXTS[0])[0, -1].float(), want, rtol=1e-4, atol=1e-4)
    from tests.tiny import tiny_model

    gpt2 = tiny_model("gpt2")
    sae_a = SAE.create("standard", d_in=32, d_sae=24, site="blocks.1.hook_resid_post", l1_coefficient=1.0)
    sae_b = SAE.create("standard", d_in=32, d_sae=24, site="blocks.1.hook_resid_post", l1_coefficient=1.0)
    sim = ilab.matching.similarity(gpt2, sae_a, model, sae_b, TEXTS)
    assert sim.n_tokens == sum(len(t.split()) for t in TEXTS)
