"""Patchscopes (core/readout/patchscope.py) against a manual nnsight patch written with the model's own modules.

The reference reads a block's hidden state in one nnsight trace of the source text and writes it over the
placeholder in a second trace of the target, by hand; the control patches a prompt's own state back into
itself (nothing may change).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.model.sites import resolve
from interplab.core.readout.patchscope import IDENTITY_TARGET
from interplab.widgets.lens import LogitLens

import interplab as ilab
from tests.tiny import tiny_model

SOURCE = "Mary and John went to the store"
TARGET = "cat cat dog dog bird and"  # the placeholder is "bird": the tiny vocabulary has no "?"


def _hidden(out):
    return out[0] if isinstance(out, tuple) else out


def manual_patch(model, source, position, target, placeholder, layer):
    """Last-position logits of ``target`` with layer ``layer``'s state at ``position`` of ``source`` over the
    placeholder, by two plain nnsight traces."""
    blocks = resolve(model.nn, model.family.layers)
    src, tgt = model.to_tokens(source), model.to_tokens(target)
    with torch.no_grad(), model.nn.trace(src):
        state = _hidden(blocks[layer].output)[0, position].clone().save()
    with torch.no_grad(), model.nn.trace(tgt):
        hidden = _hidden(blocks[layer].output)
        hidden[0, placeholder] = state
        logits = model.nn.output.logits[0, -1].save()
    return logits.float()


@pytest.mark.parametrize("family", ["gemma3", "llama", "gpt2"])
def test_every_layer_equals_a_manual_nnsight_patch(family):
    model = tiny_model(family)
    scope = ilab.patchscope(model, SOURCE, TARGET, position=3, placeholder="bird", n_tokens=3)
    assert scope.layers == list(range(model.n_layers)) and scope.target_tokens[scope.placeholder] == "bird"
    for row, layer in enumerate(scope.layers):
        expected = manual_patch(model, SOURCE, 3, TARGET, scope.placeholder, layer)
        torch.testing.assert_close(scope.logits[row], expected, atol=1e-5, rtol=0)
    assert scope.generated_ids.shape == (model.n_layers, 3)
    assert (scope.view.top_ids[:, 0, 0] == scope.logits.argmax(-1).numpy()).all()


def test_greedy_tokens_continue_the_patched_prompt():
    model = tiny_model("llama")
    scope = ilab.patchscope(model, SOURCE, TARGET, layers=[1], position=-1, placeholder="bird", n_tokens=3)
    # step 2 decodes the target plus step 1's token, with the same state patched in
    first = model.tokenizer.decode([int(scope.generated_ids[0, 0])])
    longer = ilab.patchscope(model, SOURCE, f"{TARGET} {first}", layers=[1], position=-1, placeholder="bird",
                             n_tokens=1)  # fmt: skip
    assert int(longer.generated_ids[0, 0]) == int(scope.generated_ids[0, 1])
    torch.testing.assert_close(torch.from_numpy(longer.view.top_probs[0, 0]),
                               torch.from_numpy(scope.view.top_probs[0, 1]), atol=1e-5, rtol=0)  # fmt: skip


def test_patching_a_prompt_into_itself_changes_nothing():
    """Control: the target's own state at the placeholder, patched back in, gives the unpatched logits."""
    model = tiny_model("gemma3")
    target = "the cat sat on the mat and the dog"
    scope = ilab.patchscope(model, target, target, position=4, placeholder="the", n_tokens=1)
    assert scope.placeholder == 8  # the last "the" (after BOS)
    scope = ilab.patchscope(model, target, target, position=8, placeholder="the", n_tokens=1)
    plain = model.logits(target)[0, -1].float()
    for row in range(model.n_layers):
        torch.testing.assert_close(scope.logits[row], plain, atol=1e-5, rtol=0)
    other = ilab.patchscope(model, "Mary gave a drink to John", target, position=2, placeholder="the", n_tokens=1)
    assert not torch.allclose(other.logits[0], plain, atol=1e-3)  # a different state does change them


def test_target_layer_writes_every_state_at_one_layer():
    model = tiny_model("gemma3")
    scope = ilab.patchscope(model, SOURCE, TARGET, position=2, placeholder="bird", target_layer=0, n_tokens=1)
    blocks = resolve(model.nn, model.family.layers)
    src, tgt = model.to_tokens(SOURCE), model.to_tokens(TARGET)
    with torch.no_grad(), model.nn.trace(src):
        state = _hidden(blocks[1].output)[0, 2].clone().save()
    with torch.no_grad(), model.nn.trace(tgt):
        _hidden(blocks[0].output)[0, scope.placeholder] = state
        logits = model.nn.output.logits[0, -1].save()
    torch.testing.assert_close(scope.logits[1], logits.float(), atol=1e-5, rtol=0)


def test_shows_as_a_lens_view_of_layers_by_steps():
    model = tiny_model("llama")
    scope = ilab.patchscope(model, SOURCE, TARGET, layers=[0, 1], placeholder="bird", n_tokens=2, tokens=["Mary"])
    widget = LogitLens(scope)
    assert widget.layers == [0, 1] and widget.tokens == ["+1", "+2"]
    assert "application/vnd.jupyter.widget-view+json" in scope._repr_mimebundle_()
    np.testing.assert_allclose(scope.view.prob("Mary")[:, 0],
                               scope.logits.softmax(-1)[:, model.tokenizer.convert_tokens_to_ids("Mary")].numpy(),
                               atol=1e-6)  # fmt: skip
    assert scope.top(1)[0][0] == model.tokenizer.decode([int(scope.logits[1].argmax())])
    assert "PatchscopeResult(2 layers" in repr(scope)


@pytest.mark.embedded
def test_embedded_model_equals_a_manual_nnsight_patch_and_decodes_its_subject(embedded):
    source = "Michael Jordan played basketball"
    scope = ilab.patchscope(embedded, source, layers=[1, 3, 12], position=2, n_tokens=2, tokens=[" Jordan"])
    assert scope.source_tokens[2] == " Jordan" and scope.target_tokens[scope.placeholder] == " ?"
    for row, layer in enumerate(scope.layers):
        expected = manual_patch(embedded, source, 2, IDENTITY_TARGET,
                                scope.placeholder, layer)  # fmt: skip
        torch.testing.assert_close(scope.logits[row], expected, atol=0.05 * float(expected.abs().max()), rtol=0)
        assert int(scope.logits[row].argmax()) == int(expected.argmax())
    # an early layer's state of " Jordan" is repeated; a different subject's is not (the control)
    assert scope.generated[0].startswith(" Jordan")
    other = ilab.patchscope(embedded, "Kobe Bryant played basketball", layers=[1], position=2, n_tokens=1,
                            tokens=[" Jordan"])  # fmt: skip
    mine, control = scope.view.prob(" Jordan")[0, 0], other.view.prob(" Jordan")[0, 0]
    assert mine > 10 * control, (mine, control)
