"""Attention drift against Hugging Face eager attention with a torch hook / an edited copy of the weights."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from interplab.core.evals.drift import attention_drift, rank_one

import interplab as ilab
from tests.tiny import tiny_config, tiny_tokenizer

TEXT = "Mary and John went to the store and John gave a drink to"


def _hf() -> torch.nn.Module:
    cfg = tiny_config("gpt2")
    cfg.initializer_range = 0.2  # sharp attention, so that a steer moves it
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()


def _reference_mass(hf: torch.nn.Module, ids: torch.Tensor, targets: list[int], hook=None) -> np.ndarray:
    handle = hf.transformer.h[0].register_forward_hook(hook) if hook else None
    try:
        with torch.no_grad():
            att = hf(ids, output_attentions=True).attentions  # per layer [1, heads, q, k]
    finally:
        if handle:
            handle.remove()
    out = np.zeros((len(att), att[0].shape[1]))
    for layer, a in enumerate(att):
        for h in range(a.shape[1]):
            rows = [float(sum(a[0, h, q, k] for k in targets)) for q in range(targets[0], ids.shape[1])]
            out[layer, h] = np.mean(rows)
    return out


def test_steering_drift_matches_a_torch_hook() -> None:
    hf, tok = _hf(), tiny_tokenizer()
    model = ilab.load_model(hf, tokenizer=tok)
    vec = torch.randn(32, generator=torch.Generator().manual_seed(1))
    result = attention_drift(model, TEXT, targets=["John"], steer=("blocks.0.hook_resid_post", vec), scale=3.0)
    ids = tok(TEXT, return_tensors="pt")["input_ids"]
    targets = [i for i, t in enumerate(ids[0].tolist()) if t == tok.convert_tokens_to_ids("John")]
    assert result.targets == targets

    def hook(module, args, output):
        return (output[0] + 3.0 * vec, *output[1:]) if isinstance(output, tuple) else output + 3.0 * vec

    before, after = _reference_mass(hf, ids, targets), _reference_mass(hf, ids, targets, hook)
    table = result.table.set_index(["layer", "head"])
    for layer in range(2):
        for h in range(4):
            assert table.loc[(layer, h), "mass_before"] == pytest.approx(before[layer, h], abs=1e-5)
            assert table.loc[(layer, h), "mass_after"] == pytest.approx(after[layer, h], abs=1e-5)
    assert np.abs(after[1] - before[1]).max() > 1e-3  # layer 1 moved
    assert np.allclose(after[0], before[0], atol=1e-6)  # layer 0 runs before the steer
    assert set(result.tidy.metric) == {"mass_before", "mass_after", "drift"}


def test_rank_one_edit_matches_an_edited_copy_and_is_undone() -> None:
    hf, tok = _hf(), tiny_tokenizer()
    model = ilab.load_model(hf, tokenizer=tok)
    name = "transformer.h.0.mlp.c_proj.weight"  # GPT-2 Conv1D: [intermediate, d_model]
    delta = rank_one(torch.ones(128), torch.linspace(-1, 1, 32))
    original = hf.get_parameter(name).detach().clone()
    result = attention_drift(model, TEXT, targets=[2], edit={name: delta})
    assert torch.equal(hf.get_parameter(name), original)  # restored exactly
    edited = copy.deepcopy(hf)
    with torch.no_grad():
        edited.get_parameter(name).add_(delta)
    ids = tok(TEXT, return_tensors="pt")["input_ids"]
    ref = _reference_mass(edited, ids, [2])
    got = result.table.set_index(["layer", "head"]).mass_after
    assert np.allclose([got[(1, h)] for h in range(4)], ref[1], atol=1e-5)


def test_bad_input_before_any_forward_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    model = ilab.load_model(_hf(), tokenizer=tiny_tokenizer())
    monkeypatch.setattr(model.nn, "trace", lambda *a, **k: pytest.fail("a forward pass ran"))
    with pytest.raises(ValueError, match="Target token 'fox' is not in the text"):
        attention_drift(model, TEXT, ["fox"], steer=("blocks.0.hook_resid_post", torch.ones(32)))
    with pytest.raises(ValueError, match=r"The steering vector has 5 values; blocks\.0\.hook_resid_post has width 32"):
        attention_drift(model, TEXT, ["John"], steer=("blocks.0.hook_resid_post", torch.ones(5)))
    with pytest.raises(ValueError, match=r"'nope\.weight' is not a parameter"):
        attention_drift(model, TEXT, ["John"], edit={"nope.weight": torch.ones(2)})
    with pytest.raises(ValueError, match="Give steer="):
        attention_drift(model, TEXT, ["John"])
