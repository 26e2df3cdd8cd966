"""Prompt pairs (``core/patching/prompts.py``): IOI pairs and their structure, the builder, the embedded tokenizer."""

from __future__ import annotations

import pytest

import interplab as ilab
from tests.patching.torch_reference import CLEAN, CORRUPT
from tests.tiny import tiny_model


def test_ioi_pairs_structure():
    m = tiny_model("gpt2")
    names = ["Mary", "John", "cat", "dog", "bird", "fox"]
    pairs = ilab.patching.ioi(m, n=6, templates=["when{A} and{B} went to the store{S} gave a drink to"], names=names)
    assert len(pairs) == 6 and len(set(map(len, (pairs.clean, pairs.corrupt, pairs.answers, pairs.wrong)))) == 1
    for i, (c, x, a, w) in enumerate(zip(pairs.clean, pairs.corrupt, pairs.answers, pairs.wrong, strict=True)):
        words = c.split()
        first, second, s2 = words[1], words[3], words[-5]
        assert s2 == w.strip() and {first, second} == {a.strip(), w.strip()}
        assert (first == a.strip()) == (i % 2 == 0)  # mixed: ABBA then BABA
        assert not {a.strip(), w.strip()} & set(x.split())  # ABC: three other names
    flip = ilab.patching.ioi(m, n=2, order="BABA", corruption="flip", names=names,
                             templates=["when{A} and{B} went to the store{S} gave a drink to"])  # fmt: skip
    assert flip.corrupt[0].split()[-5] == flip.answers[0].strip()
    assert flip.clean[0].split()[1] == flip.wrong[0].strip()
    r = ilab.patching.grid(m, pairs, site="resid_pre", positions=[-1])  # metric defaults to logit_diff(IO, S)
    assert r.metric == "logit_diff" and r.values.shape == (2, 1)
    with pytest.raises(ValueError, match="not single tokens"):
        ilab.patching.ioi(m, names=["Mary", "Zebedee"])
    with pytest.raises(ValueError, match="order="):
        ilab.patching.ioi(m, order="AB")


def test_prompt_pairs_builder():
    m = tiny_model("gpt2")
    pairs = ilab.patching.prompt_pairs(m, [CLEAN], [CORRUPT], [" Mary"], [" John"])
    assert pairs.logit_diff().answer == [" Mary"]
    with pytest.raises(ValueError, match="answers\\[0\\] 'Mary cat' is 2 tokens"):
        ilab.patching.prompt_pairs(m, [CLEAN], [CORRUPT], ["Mary cat"], [" John"])
    with pytest.raises(ValueError, match="1 clean prompts but 2 corrupt"):
        ilab.patching.prompt_pairs(m, [CLEAN], [CORRUPT, CORRUPT], [" Mary"], [" John"])
    groups = ilab.patching.PromptPairs([CLEAN, "the cat sat"], [CORRUPT, "the dog sat"], ["a", "b"], ["c", "d"])
    assert sorted(len(g) for g in groups.by_length(m).values()) == [1, 1]


@pytest.mark.embedded
def test_ioi_on_the_embedded_tokenizer(embedded):
    names = ilab.patching.single_token_names(embedded)
    assert len(names) >= 10
    for template in ilab.patching.IOI_TEMPLATES:
        pairs = ilab.patching.ioi(embedded, n=4, templates=[template], seed=3)
        assert len(pairs.by_length(embedded)) == 1  # every name one token: all prompts align
        ilab.patching.prompt_pairs(embedded, pairs.clean, pairs.corrupt, pairs.answers, pairs.wrong)
