"""The logit lens (core/readout/lens.py) and its LogitLens view (widgets/lens.py, Python side; the browser half is
tests/browser/test_lens_attention.py).

The reference is a plain Hugging Face forward: every hidden state read through the model's own final norm
and unembedding, at every position asked for (``positions=``).
"""

from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pytest
import torch
import traitlets
from interplab.core.readout.lens import LensView, LogitLensResult, lens_view
from interplab.widgets import _kit
from interplab.widgets.lens import LogitLens

import interplab as ilab
from tests.tiny import TEXTS, tiny_model

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def hf_lens(model, texts) -> torch.Tensor:
    """[batch, n_layers, pos, vocab]: each block's output through the final norm and the unembedding, by hand."""
    hf = model.module
    enc = model.to_tokens(texts)
    outs = []
    blocks = hf.get_submodule(model.family.layers)
    keep = lambda m, a, o: outs.append(o[0] if isinstance(o, tuple) else o)  # noqa: E731
    handles = [b.register_forward_hook(keep) for b in blocks]
    try:
        with torch.no_grad():
            hf(**enc)
    finally:
        for h in handles:
            h.remove()
    norm, unembed = model.readout_modules()
    with torch.no_grad():
        return torch.stack([model.softcap(unembed(norm(h))) for h in outs], 1)


def test_default_is_the_old_tensor(model):
    lens = ilab.logit_lens(model, TEXTS)
    assert isinstance(lens, LogitLensResult) and isinstance(lens, torch.Tensor)
    assert lens.shape == (len(TEXTS), model.n_layers, 64)
    ref = hf_lens(model, TEXTS)
    lengths = model.to_tokens(TEXTS)["attention_mask"].sum(1)
    expected = ref[torch.arange(len(TEXTS)), :, lengths - 1]  # each text's last token
    torch.testing.assert_close(lens.tensor(), expected, atol=1e-5, rtol=0)
    # what nbs/00 does with it keeps working, and gives plain tensors
    column = lens[0, :, 5]
    assert type(column) is torch.Tensor and column.shape == (model.n_layers,)
    assert type(lens[0].argmax(-1)) is torch.Tensor and type(lens - 1) is torch.Tensor
    assert torch.allclose(lens[0, -1], model.logits(TEXTS)[0, -1], atol=1e-4)


def test_positions_like_model_logits(model):
    ref = hf_lens(model, TEXTS)
    every = ilab.logit_lens(model, TEXTS, positions=None)
    assert every.shape == ref.shape
    mask = model.to_tokens(TEXTS)["attention_mask"].bool()
    torch.testing.assert_close(every.tensor().transpose(1, 2)[mask], ref.transpose(1, 2)[mask], atol=1e-5, rtol=0)
    some = ilab.logit_lens(model, TEXTS, positions=[0, -1])
    assert some.shape == (len(TEXTS), model.n_layers, 2, 64)
    torch.testing.assert_close(some[:, :, 1], ilab.logit_lens(model, TEXTS).tensor())
    with pytest.raises(ValueError, match="outside a text of 7 tokens"):
        ilab.logit_lens(model, TEXTS, positions=[9])


def test_positions_is_the_one_spelling():
    model = tiny_model("llama")
    with pytest.raises(TypeError, match="position"):
        ilab.logit_lens(model, TEXTS, position=-2)


def test_view_holds_top_tokens_and_candidate_probabilities(model):
    view = lens_view(model, TEXTS[1], top_k=5, tokens=["Mary"])
    n = len(model.to_str_tokens(TEXTS[1]))
    probs = hf_lens(model, TEXTS[1])[0].softmax(-1)  # [L, P, V]
    assert view.tokens == model.to_str_tokens(TEXTS[1]) and view.layers == [0, 1]
    top = probs.topk(5, dim=-1)
    assert view.top_ids.shape == (model.n_layers, n, 5)
    np.testing.assert_allclose(view.top_probs, top.values.numpy(), atol=1e-6)
    assert (view.top_ids == top.indices.numpy()).mean() > 0.99  # near-ties may swap
    assert set(view.top_ids.ravel().tolist()) <= set(view.candidates.tolist())
    np.testing.assert_allclose(view.candidate_probs, probs[:, :, torch.tensor(view.candidates)].numpy(), atol=1e-6)
    mary = model.tokenizer.convert_tokens_to_ids("Mary")
    np.testing.assert_allclose(view.prob("Mary"), probs[:, :, mary].numpy(), atol=1e-6)
    np.testing.assert_allclose(view.prob(mary), view.prob("Mary"))
    assert view.top(1, n - 1)[0] == (view.candidate_tokens[list(view.candidates).index(view.top_ids[1, -1, 0])],
                                     pytest.approx(float(top.values[1, -1, 0])))  # fmt: skip
    with pytest.raises(ValueError, match="not a candidate"):
        view.prob("zebra")


def test_remote_local_lens_and_view():
    local, remote = tiny_model("gemma3"), tiny_model("gemma3", remote="local")
    assert torch.equal(ilab.logit_lens(remote, TEXTS).tensor(), ilab.logit_lens(local, TEXTS).tensor())
    a, b = lens_view(local, TEXTS[0]), lens_view(remote, TEXTS[0])
    np.testing.assert_array_equal(a.candidate_probs, b.candidate_probs)


def test_result_copies_and_pickles_as_a_plain_tensor():
    lens = ilab.logit_lens(tiny_model("gpt2"), TEXTS)
    assert type(copy.deepcopy(lens)) is torch.Tensor
    back = pickle.loads(pickle.dumps(lens))
    assert type(back) is torch.Tensor and torch.equal(back, lens.tensor())
    assert "LogitLensResult(3 text(s), 2 layers" in repr(lens)


def test_the_result_displays_as_the_logit_lens_widget():
    lens = ilab.logit_lens(tiny_model("gpt2"), TEXTS)
    bundle = lens._repr_mimebundle_()
    assert WIDGET_VIEW in bundle and bundle["text/plain"].startswith("LogitLensResult(")
    view = lens.view_data(0)
    assert lens.view_data(0) is view  # computed once


def test_widget_payloads_token_and_selection():
    model = tiny_model("llama")
    lens = ilab.logit_lens(model, TEXTS)
    w = LogitLens(lens, 1, token="Mary")
    view = w.view
    n = len(view.tokens)
    assert w.tokens == view.tokens and w.layers == [0, 1]
    top = _kit.payload_array(w.top_index)
    assert top.shape == (2, n, 10)
    assert [w.vocab[i] for i in top[1, -1]] == [t for t, _ in view.top(1, n - 1)]
    assert w.token == "Mary" and w.token_id == model.tokenizer.convert_tokens_to_ids("Mary")
    colours = _kit.payload_array(w.colour_probs)
    np.testing.assert_allclose(colours[:, :, w.colour_index.index(w.vocab_ids.index(w.token_id))], view.prob("Mary"))
    default = LogitLens(lens, 1)
    assert default.token_id == int(view.top_ids[-1, -1, 0])  # the model's own prediction at the last token
    other = view.candidate_tokens[3]
    w.token = other
    assert w.token == other
    with pytest.raises(ValueError, match="not among the tokens"):
        w.token = "zebra"
    with pytest.raises(traitlets.TraitError, match="cannot colour"):
        w.token_id = 10**6
    assert w.selected_top is None
    w.selected = [1, n - 1]
    assert w.selected_top == view.top(1, n - 1)
    assert LogitLens(view).tokens == w.tokens and LogitLens(model, TEXTS[1]).tokens == w.tokens
    with pytest.raises(TypeError, match="text= is the index"):
        LogitLens(lens, "Mary")


def test_colour_columns_are_capped_and_keep_the_chosen_token(monkeypatch):
    model = tiny_model("gpt2")
    view = lens_view(model, TEXTS[0], tokens=["red"])
    cells = len(view.layers) * len(view.tokens)
    monkeypatch.setitem(_kit.OPTIONS, "max_values", cells * 4)
    w = LogitLens(view, token="red")
    assert len(w.colour_index) == 4 < len(view.candidates)
    assert w.vocab[w.vocab_ids.index(w.token_id)] == "red" and w.vocab_ids.index(w.token_id) in w.colour_index
    assert isinstance(view, LensView)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LogitLens(view)  # no warning either way


@pytest.mark.embedded
def test_view_probabilities_of_a_bfloat16_model_are_normalised_in_float32(embedded):
    """The embedded Gemma 3 270M runs in bfloat16: the view's probabilities are the softmax of the lens's own
    float32 logits, and a cell's top-k adds up to at most 1 (a bfloat16 normaliser gave 1.0 for 0.965 and top-10
    lists summing to 1.037)."""
    assert embedded.dtype == torch.bfloat16
    text = "When Mary and John went to the store, John gave a drink to"
    lens = ilab.logit_lens(embedded, text, positions=None)
    view = lens.view_data(0, tokens=[" Mary"])
    reference = torch.softmax(lens.tensor()[0].float(), -1)  # [L, P, V], the control
    mary = int(view.candidates[view.candidate_tokens.index(" Mary")])
    np.testing.assert_allclose(view.prob(" Mary"), reference[:, :, mary].numpy(), atol=1e-3, rtol=0)
    np.testing.assert_allclose(view.candidate_probs, reference[:, :, torch.tensor(view.candidates)].numpy(),
                               atol=1e-3, rtol=0)  # fmt: skip
    assert view.top_probs.sum(-1).max() <= 1 + 1e-5
    assert 0.9 < view.top_probs[12, -1].sum() <= 1 + 1e-5  # layer 12's top-10 holds nearly all of it
