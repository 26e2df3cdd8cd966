"""Learned positions: a soft position selector trained with the DAS rotation, against a brute-force position search."""

from __future__ import annotations

import itertools

import pytest
import torch
from interplab.core.das.intervene import evaluate, prepare

import interplab as ilab
from tests.das.test_das import pairs_for
from tests.tiny import no_forward, tiny_model

SITE = "blocks.0.hook_resid_post"
WORDS = ("cat", "dog", "fox", "bird", "tree", "house")


def one_template_pairs(model):
    """Prompts of one template and length; base and source differ in two of the words."""
    both = list(itertools.permutations(WORDS, 2))[:24]
    return pairs_for(model, [f"the {a} sat on the {b}" for a, b in both], [f"the {b} sat on the {a}" for a, b in both])


def test_the_selector_finds_the_position_a_brute_force_search_finds(tmp_path):
    model = tiny_model("gpt2")
    pairs = one_template_pairs(model)
    length = len(model.to_tokens(pairs.base[0])["input_ids"][0])
    every = torch.arange(len(pairs))
    full = [evaluate(model, prepare(model, pairs, SITE, [p]), every, None)["iia"] for p in range(length)]
    known = max(range(length), key=lambda p: full[p])
    assert sorted(full)[-2] < full[known]  # the brute-force search has one answer
    search = ilab.das.position_search(model, pairs, SITE)
    assert search.best == known and search.iia.tolist() == full and "best" in repr(search)
    assert "full swap per position" in str(search.chart().to_dict())
    kw = dict(k=4, epochs=6, lr=0.05, batch_size=8, progress=False)
    at_known = ilab.das.fit(model, pairs, SITE, positions=known, **kw)
    learned = ilab.das.fit(model, pairs, SITE, positions="learned", **kw)
    assert learned.selector is not None and len(learned.selector) == length
    assert learned.selector[known] >= 0.8 and learned.positions == [known]
    assert abs(learned.iia - at_known.iia) <= 0.1
    assert at_known.selector is None and learned.settings["positions"] == "learned"
    assert "learned position selector" in str(learned.chart().to_dict())
    back = ilab.das.DASResult.load(learned.save(tmp_path / "learned.safetensors"))
    assert back.selector == learned.selector and back.positions == [known]


def test_learned_positions_refuse_prompts_of_several_lengths_before_any_forward():
    model = tiny_model("gpt2")
    pairs = ilab.das.counterfactual_pairs(model, ["the cat sat", "the big dog sat"], ["the dog sat", "a cat sat on"],
                                          ["on", "on"])  # fmt: skip
    with no_forward(model):
        with pytest.raises(ValueError, match=r"positions='learned' selects one position of one template, but the "
                                             r"prompts have 2 token lengths: 4 \('the cat sat'\), 5"):  # fmt: skip
            ilab.das.fit(model, pairs, SITE, positions="learned")
        with pytest.raises(ValueError, match="positions='middle': give token indices or 'learned'"):
            ilab.das.fit(model, pairs, SITE, positions="middle")
        same = pairs[[0]]
        with pytest.raises(ValueError, match="positions='learned' trains in memory: leave path=None"):
            ilab.das.fit(model, same, SITE, positions="learned", test_size=0, path="somewhere")
