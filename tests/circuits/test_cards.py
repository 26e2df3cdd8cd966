"""Feature cards from a graph's own transcoders (core/circuits/cards.py): a card per feature of the graph, its
top activations where the transcoder fires most on the texts, its density, and the tokens its decoder row
promotes and suppresses through the final norm and the unembedding, each checked against a direct computation."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from interplab.core.circuits import attribute, feature_cards
from interplab.core.circuits.view import visible_token

from tests.circuits.test_attribute import PROMPT, transcoders
from tests.tiny import tiny_model

TEXTS = ["the dog sat on the cat", PROMPT, "a mat and a dog and a cat ran on"]


@pytest.fixture(scope="module")
def built():
    model = tiny_model("gemma3")
    tcs = transcoders(model.d_model)
    return model, tcs, attribute(model, tcs, PROMPT, batch_size=16, progress=False)


def direct_acts(model, tc, layer: int, text: str) -> torch.Tensor:
    """The transcoder's activations [tokens - 1, d_sae] on ``text``, BOS left out."""
    enc = model.to_tokens(text)
    (x,) = model.run_sites(enc, [f"blocks.{layer}.hook_mlp_in"])
    with torch.no_grad():
        return tc.encode(x[0, 1:])


def test_a_card_for_every_feature_with_its_strongest_activations(built):
    model, tcs, graph = built
    cards = feature_cards(graph, model, tcs, TEXTS, n_examples=2, context=3)
    assert set(cards) == {f"{int(f[0])}_{int(f[2])}" for f in graph.features}
    layer, _, latent = (int(v) for v in graph.features[len(graph.features) // 2])
    card = cards[f"{layer}_{latent}"]
    acts = [direct_acts(model, tcs[layer], layer, t)[:, latent] for t in TEXTS]
    best = sorted(((float(a.max()), k) for k, a in enumerate(acts) if float(a.max()) > 0), reverse=True)[:2]
    assert [round(e["max"], 4) for e in card["examples"]] == [round(v, 4) for v, _ in best]
    for example, (_, k) in zip(card["examples"], best, strict=True):
        tokens = [visible_token(t) for t in model.to_str_tokens(TEXTS[k])][1:]
        at = int(acts[k].argmax())
        assert example["tokens"][example["at"]] == tokens[at] and example["acts"][example["at"]] == pytest.approx(
            float(acts[k][at]), abs=1e-3)  # fmt: skip
        assert len(example["tokens"]) == len(example["acts"]) <= 3 + 3
    fired = sum(int((a > 0).sum()) for a in acts) / sum(len(a) for a in acts)
    assert card["density"] == pytest.approx(fired)


def test_logit_effects_are_the_decoder_row_through_the_norm_and_the_unembedding(built):
    model, tcs, graph = built
    cards = feature_cards(graph, model, tcs, n_logits=4)
    layer, _, latent = (int(v) for v in graph.features[0])
    norm, unembed = model.readout_modules()
    row = tcs[layer].W_dec[latent].detach().float()
    effects = (row / row.norm()) * (1.0 + norm.weight.detach().float()) @ unembed.weight.detach().float().T
    top, bottom = effects.topk(4), effects.topk(4, largest=False)
    decode = model.tokenizer.decode
    card = cards[f"{layer}_{latent}"]
    assert [t for t, _ in card["promotes"]] == [visible_token(decode([int(i)])) for i in top.indices]
    assert [v for _, v in card["promotes"]] == pytest.approx(top.values.tolist(), abs=1e-3)
    assert [t for t, _ in card["suppresses"]] == [visible_token(decode([int(i)])) for i in bottom.indices]
    assert card["examples"] and card["examples"][0]["max"] > 0  # over the graph's own prompt: it fires there


def test_bad_settings_are_named(built):
    model, tcs, graph = built
    with pytest.raises(ValueError, match="n_examples"):
        feature_cards(graph, model, tcs, n_examples=0)


def test_a_graph_without_features_has_no_cards(built):
    model, tcs, graph = built
    empty = dataclasses.replace(graph, features=graph.features[:0], activations=graph.activations[:0])
    assert feature_cards(empty, model, tcs) == {}
