"""The replacement pass runs eager attention on the CPU (fast backward in bfloat16) and switches the model back.

Patterns are constants in the replacement model, so the implementation changes rounding only: a bfloat16
graph built with eager attention equals the one built with the model's fused attention to bfloat16 precision,
and the model runs its own implementation again afterwards, also when the pass fails.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from interplab.core.circuits import attribute

import interplab as ilab
from tests.circuits.test_attribute import PROMPT, transcoders
from tests.tiny import tiny_hf_model, tiny_tokenizer

attribute_module = importlib.import_module("interplab.core.circuits.attribute")


def bf16_model() -> ilab.Model:
    hf = tiny_hf_model("gemma3").to(torch.bfloat16)
    hf.set_attn_implementation("sdpa")
    return ilab.load_model(hf, tokenizer=tiny_tokenizer())


def seen_implementations(model: ilab.Model) -> tuple[list[str], torch.utils.hooks.RemovableHandle]:
    seen: list[str] = []
    attn = model.module.model.layers[0].self_attn
    handle = attn.register_forward_hook(lambda mod, args, out: seen.append(mod.config._attn_implementation))
    return seen, handle


def test_replacement_pass_runs_eager_attention_and_switches_back():
    model = bf16_model()
    seen, handle = seen_implementations(model)
    try:
        attribute(model, transcoders(model.d_model), PROMPT, batch_size=8, progress=False)
    finally:
        handle.remove()
    assert seen and set(seen) == {"eager"}
    assert model.module.config._attn_implementation == "sdpa"


def test_attention_switches_back_when_the_pass_fails():
    model = bf16_model()

    def fail(mod, args, out):
        raise RuntimeError("a failure inside the replacement pass")

    handle = model.module.model.layers[1].register_forward_hook(fail)
    try:
        with pytest.raises(RuntimeError, match="inside the replacement pass"):
            attribute(model, transcoders(model.d_model), PROMPT, batch_size=8, progress=False)
    finally:
        handle.remove()
    assert model.module.config._attn_implementation == "sdpa"


def test_bfloat16_graph_with_eager_attention_equals_the_fused_ones(monkeypatch):
    model = bf16_model()
    tcs = transcoders(model.d_model)
    eager = attribute(model, tcs, PROMPT, batch_size=8, progress=False)
    monkeypatch.setattr(attribute_module, "eager_replacement", lambda m: False)
    fused = attribute(model, tcs, PROMPT, batch_size=8, progress=False)
    assert eager.logit_ids == fused.logit_ids and torch.equal(eager.features, fused.features)
    scale = float(fused.adjacency.abs().max())
    torch.testing.assert_close(eager.adjacency, fused.adjacency, atol=2e-2 * scale, rtol=0)
    assert not torch.equal(eager.adjacency, fused.adjacency)  # two implementations ran


def test_bfloat16_graph_equals_the_float32_one_to_bfloat16_precision():
    """The linear paths run in bfloat16 (no float32 round trips): the graph still matches the float32 model's."""
    hf = tiny_hf_model("gemma3")
    f32 = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    tcs = transcoders(f32.d_model)
    full = attribute(f32, tcs, PROMPT, batch_size=8, progress=False)
    half = attribute(bf16_model(), tcs, PROMPT, batch_size=8, progress=False)
    assert half.logit_ids == full.logit_ids
    common = [f for f in half.features.tolist() if f in full.features.tolist()]
    assert len(common) >= 0.98 * max(half.n_features, full.n_features)  # a feature at its threshold may flip
    rest = list(range(half.n_features, half.n_nodes))  # errors, tokens, logits: the same nodes in both
    ours = torch.tensor([half.feature_index(*f) for f in common] + rest)
    theirs = torch.tensor([full.feature_index(*f) for f in common] + [i - half.n_nodes + full.n_nodes for i in rest])
    scale = float(full.adjacency.abs().max())
    torch.testing.assert_close(half.adjacency[ours][:, ours], full.adjacency[theirs][:, theirs], atol=3e-2 * scale,
                               rtol=0)  # fmt: skip
