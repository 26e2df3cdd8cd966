"""The binding subspace on a tiny model: contexts, token positions, training, held-out and story accuracy."""

from __future__ import annotations

import pytest
import torch
from interplab.core.probes import binding

import interplab as ilab
from tests.tiny import tiny_model


@pytest.fixture
def tiny_domain(monkeypatch):
    """The tiny vocabulary's words stand in for names and attributes; phrasings of its words only."""
    monkeypatch.setattr(binding, "NAMES", ("Mary", "John", "cat", "dog", "fox", "bird"))
    monkeypatch.setitem(binding.DOMAINS, "occupations", ("red", "blue", "green", "big", "small", "happy", "sad"))
    monkeypatch.setitem(binding.PHRASES, "occupations", "{e} sat on the {a} mat and")
    story = "the {e0} went to the {a0} house and the {e1} ran to the {a1} tree"
    monkeypatch.setitem(binding.STORIES, "occupations", story)
    return tiny_model("gpt2")


def test_binding_task_and_fit(tiny_domain):
    model = tiny_domain
    task = ilab.probes.binding_task(model, n=40)
    assert len(task) == 40 and all(e0 != e1 and a0 != a1 for e0, a0, e1, a1 in task.items)
    e0, a0, e1, a1 = task.items[0]
    assert task.text(0) == f"{e0} sat on the {a0} mat and {e1} sat on the {a1} mat and"
    ent, att = binding.read_tokens(model, task, "blocks.1.hook_resid_post")
    assert ent.shape == att.shape == (40, 2, 32)
    # Each read vector is the activation at that word's token.
    x = model.collect(task.text(0), "blocks.1.hook_resid_post")
    toks = x.flat_str_tokens()
    torch.testing.assert_close(ent[0, 0], x.flat("blocks.1.hook_resid_post")[toks.index(e0)].float())
    res = ilab.probes.fit_binding(model, task, "blocks.1.hook_resid_post", rank=4, steps=200, lr=0.05)
    assert res.losses[-1] < res.losses[0]
    assert res.train_accuracy >= 0.9  # in a 2-layer model the attribute's token sees the preceding name
    assert 0 <= res.accuracy <= 1 and 0 <= res.story_accuracy <= 1 and "binding accuracy" in repr(res)
    m = res.matrix(model, task.text(0), [e0, e1], [a0, a1])
    assert m.values.shape == (2, 2) and "binding similarity" in str(m.chart().to_dict())


def test_binding_bad_input(tiny_domain):
    model = tiny_domain
    with pytest.raises(ValueError, match="domain='sports' is not one of"):
        ilab.probes.binding_task(model, "sports")
    task = ilab.probes.binding_task(model, n=4)
    with pytest.raises(ValueError, match=r"rank=99 is larger than the width of blocks.1.hook_resid_post \(d=32\)"):
        ilab.probes.fit_binding(model, task, "blocks.1.hook_resid_post", rank=99)
    with pytest.raises(TypeError, match="task must be a BindingTask"):
        ilab.probes.fit_binding(model, [1], "blocks.1.hook_resid_post")
