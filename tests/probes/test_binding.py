"""The binding subspace on a tiny model: contexts, token positions, training, held-out and story accuracy."""

from __future__ import annotations

import pytest
import torch
from interplab.core.probes import binding, propositions

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


def test_phrasings_and_three_entities(tiny_domain):
    model = tiny_domain
    task = ilab.probes.binding_task(model, n=6, entities=3)
    assert task.n_entities == 3 and all(len(set(item)) == 6 for item in task.items)
    (e0, e1, e2), (a0, a1, a2) = task.pairs(0)
    assert task.text(0, "respectively") == f"A {a0}, a {a1} and a {a2}, respectively {e0}, {e1} and {e2}."
    with pytest.raises(ValueError, match="The story phrasing has two entities; this task has 3"):
        task.text(0, "story")
    with pytest.raises(ValueError, match="phrasing='poem' is not one of"):
        task.text(0, "poem")
    ent, att, pe, pa = binding.read_positions(model, task, "blocks.1.hook_resid_post", "respectively")
    assert ent.shape == att.shape == (6, 3, 32) and pe.shape == pa.shape == (6, 3)
    assert (pa.max(1).values < pe.min(1).values).all()  # every attribute comes before every name
    res = ilab.probes.fit_binding(model, task, "blocks.1.hook_resid_post", rank=4, steps=50, lr=0.05)
    assert set(res.accuracies) == {"template", "respectively"} and res.chance == pytest.approx(1 / 3)
    assert res.to_pandas().shape == (2, 4) and "binding accuracy" in str(res.chart().to_dict())


def test_order_only_baseline_sees_positions_alone(tiny_domain):
    """The position code binds the training template (its positions never change) but not the reversed order."""
    model = tiny_domain
    task = ilab.probes.binding_task(model, n=24)
    order = ilab.probes.fit_binding(model, task, "blocks.1.hook_resid_post", rank=4, steps=100, lr=0.05,
                                    features="position")  # fmt: skip
    assert order.features == "position" and order.U_DR.shape == (binding.POSITION_DIM, 4)
    assert order.accuracy == 1.0 and order.accuracies["respectively"] <= 0.5
    e0, a0, e1, a1 = task.items[0]
    m = order.matrix(model, task.text(0), [e0, e1], [a0, a1])
    assert m.values[0, 0] > m.values[0, 1] and m.values[1, 1] > m.values[1, 0]
    code = binding.position_code(torch.tensor([[3, 7]]), 8)
    assert code.shape == (1, 2, 8) and torch.isclose(code[0, 0, 4], torch.cos(torch.tensor(3.0)))
    with pytest.raises(ValueError, match="features='tokens' is not one of"):
        ilab.probes.fit_binding(model, task, "blocks.1.hook_resid_post", features="tokens")
    with pytest.raises(ValueError, match="rank=40 is larger than the position code's 32"):
        ilab.probes.fit_binding(model, task, "blocks.1.hook_resid_post", rank=40, features="position")


def test_propositions_compose_domain_probes_through_the_binding(tiny_domain, monkeypatch):
    model = tiny_domain
    task = ilab.probes.binding_task(model, n=24)
    res = ilab.probes.fit_binding(model, task, "blocks.1.hook_resid_post", rank=4, steps=100, lr=0.05)
    props = ilab.probes.decode_propositions(model, task, res, n_probe=48)
    assert set(props.exact) == {"template", "story", "respectively"} and len(props.decoded) == 6
    assert all(len(t) == 2 for t in props.truth) and 0 <= props.exact["template"] <= 1
    # Each decoded proposition pairs a decoded name with the attribute the binding scores highest for it.
    e0, a0, e1, a1 = task.items[int(torch.randperm(24, generator=torch.Generator().manual_seed(0))[0])]
    assert props.truth[0] == {(e0, a0), (e1, a1)}
    # Domain probes that always answer one word never decode two distinct names: nothing is exact.
    monkeypatch.setattr(propositions.DomainProbe, "predict", lambda self, x: [self.classes[0]] * len(x))
    assert ilab.probes.decode_propositions(model, task, res, n_probe=48).exact["template"] == 0.0
    assert "exact propositions" in repr(props) and "decoded propositions" in str(props.chart().to_dict())
    with pytest.raises(TypeError, match="binding must be a BindingResult of activations"):
        order = ilab.probes.fit_binding(model, task, "blocks.1.hook_resid_post", rank=4, steps=5, features="position")
        ilab.probes.decode_propositions(model, task, order)


def test_propositions_of_a_context_survive_a_later_injection(tiny_domain):
    """Decoding reads the first occurrence of each word: what follows the context cannot change its propositions."""
    model = tiny_domain
    task = ilab.probes.binding_task(model, n=24)
    res = ilab.probes.fit_binding(model, task, "blocks.1.hook_resid_post", rank=4, steps=100, lr=0.05)
    props = ilab.probes.decode_propositions(model, task, res, n_probe=48)
    e0, a0, e1, a1 = task.items[0]
    plain = props.decode(model, task.text(0), [e0, e1], [a0, a1])
    injected = props.decode(model, task.text(0) + f" {e0} sat on the {a1} mat", [e0, e1], [a0, a1])
    assert plain == injected and len(plain) <= 2
    with pytest.raises(ValueError, match="keeps no probes"):
        ilab.probes.PropositionResult({}, [], []).decode(model, task.text(0), [e0], [a0])
