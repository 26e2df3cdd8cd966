"""One metric vocabulary for the whole package (core/readout/metrics.py), shared by patching and steering."""

from __future__ import annotations

import pytest
import torch
from interplab.core.readout.metrics import BoundMetric, Metric, as_metric

import interplab as ilab
from tests.tiny import tiny_model, tiny_tokenizer


def test_patching_and_steering_share_one_metric_vocabulary():
    # one logit_diff and one prob, whichever namespace they are reached through
    for name in ("logit_diff", "prob"):
        assert getattr(ilab.patching, name) is getattr(ilab.steering, name) is getattr(ilab.metrics, name)
    assert ilab.patching.Metric is Metric
    assert not hasattr(ilab.steering, "Metric") or ilab.steering.Metric is Metric


def test_answers_tokens_sets_and_per_pair_lists():
    tok = tiny_tokenizer()
    ids = {w: tok.convert_tokens_to_ids(w) for w in ("cat", "dog", "bird", "red")}
    logits = torch.randn(3, len(tok))
    one = ilab.metrics.logit_diff("cat", "dog").on(tok)
    torch.testing.assert_close(one(logits), logits[:, ids["cat"]] - logits[:, ids["dog"]])
    group = ilab.metrics.logit_diff({"cat", "bird"}, "dog").on(tok)
    want = (logits[:, ids["cat"]] + logits[:, ids["bird"]]) / 2 - logits[:, ids["dog"]]
    torch.testing.assert_close(group(logits), want)
    assert group.score(logits) == pytest.approx(float(want.mean()))
    per_pair = ilab.metrics.logit_diff(["cat", {"dog", "red"}, "bird"], "red").bind(tok, 3)
    got = per_pair(logits, torch.arange(3))
    torch.testing.assert_close(got[1], (logits[1, ids["dog"]] + logits[1, ids["red"]]) / 2 - logits[1, ids["red"]])
    p = ilab.metrics.prob({"cat", "dog"}).on(tok)(logits)
    soft = logits.softmax(-1)
    torch.testing.assert_close(p, soft[:, ids["cat"]] + soft[:, ids["dog"]])


def test_bad_answers_are_named_before_any_work():
    tok = tiny_tokenizer()
    with pytest.raises(ValueError, match="'the cat' is 2 tokens, not one"):
        ilab.metrics.logit_diff("the cat", "dog").on(tok)
    with pytest.raises(ValueError, match="empty set"):
        ilab.metrics.logit_diff(set(), "dog").on(tok)
    with pytest.raises(ValueError, match="not bound to pairs"):
        ilab.metrics.logit_diff(["cat", "dog"], "bird").on(tok)
    with pytest.raises(ValueError, match="Got 2 answers for 3 prompt pairs"):
        ilab.metrics.logit_diff(["cat", "dog"], "bird").bind(tok, 3)
    with pytest.raises(TypeError, match="answer must be a token"):
        ilab.metrics.logit_diff(None, "dog").on(tok)
    with pytest.raises(TypeError, match="metric must be"):
        as_metric(3)
    assert isinstance(as_metric(lambda x: x[:, 0]), Metric)


def test_a_metric_scores_steering_sweeps_and_patching_grids_alike():
    model = tiny_model("gpt2")
    metric = ilab.metrics.logit_diff("cat", "dog")
    prompts = ["the cat sat on the mat", "the dog ran to the house"]
    clean = metric.on(model).score(model.logits(prompts)[:, -1])
    vec = ilab.steering.SteeringVector("blocks.0.hook_resid_post", torch.ones(model.d_model))
    res = ilab.steering.sweep(model, vec, [0.0, 1.0], metric, neutral_texts=prompts, prompts=prompts)
    assert res.metric[0] == pytest.approx(clean, abs=1e-6) and res.metric_name == "logit_diff"
    assert isinstance(metric.bind(model.tokenizer, 2), BoundMetric)


def _bpe_tokenizer():
    """A byte-level BPE tokenizer trained here, in which "Paris" and " Paris" are two different single tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    lines = ["Paris is big. Rome is old. I saw Paris and Rome.", "Paris", "Rome", "to the cat and the dog"] * 50
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(lines, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk)


def test_a_bare_word_answer_warns_when_the_spaced_word_is_one_token():
    """logit_diff("Paris", "Rome") measures the bare tokens asked for, and warns that " Paris" is one token too."""
    import warnings

    tok = _bpe_tokenizer()
    ids = {w: tok(w, add_special_tokens=False)["input_ids"] for w in ("Paris", " Paris", "Rome", " Rome")}
    assert all(len(v) == 1 for v in ids.values()) and ids["Paris"] != ids[" Paris"], ids
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        bound = ilab.metrics.logit_diff("Paris", "Rome").on(tok)
    messages = [str(w.message) for w in got]
    assert len(messages) == 2 and all(w.category is UserWarning for w in got), messages
    assert "answer 'Paris' has no leading space, but ' Paris' is one token too" in messages[0]
    assert "wrong answer 'Rome' has no leading space" in messages[1]
    assert bound.ids["answer"][0].tolist() == [ids["Paris"]]  # the bare token is still what was asked for
    with pytest.warns(UserWarning, match="'Paris' has no leading space"):
        ilab.metrics.prob({"Paris", " Rome"}).on(tok)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ilab.metrics.logit_diff(" Paris", " Rome").on(tok)  # spaced answers: no warning
        ilab.metrics.prob(".").on(tok)  # punctuation is not a word
        ilab.metrics.logit_diff("cat", "dog").on(tiny_tokenizer())  # a word-level tokenizer: " cat" is "cat"
