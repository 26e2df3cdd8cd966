"""The shared-prefix runner against plain passes: the same logits and the same greedy answers, whatever the
padding, on tiny random models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.autointerp.clients import ModelChat
from interplab.core.autointerp.prefix import PrefixRunner, shared_length, takes_prefix_cache

from tests.tiny import tiny_model

PROMPTS = [
    "the cat sat on the mat and the dog ran to the house",
    "the cat sat on the mat and Mary gave a drink",
    "the cat sat on the mat and the quick red fox jumps over the lazy dog",
    "the cat sat",
]
TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}"


def test_shared_length_leaves_each_sequence_a_token():
    assert shared_length([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 9]]) == 2
    assert shared_length([[1, 2, 3], [1, 2, 3]]) == 2
    assert shared_length([[7], [7, 8]]) == 0


def test_models_with_a_sliding_window_take_the_plain_path():
    model = tiny_model("gemma3")
    model.tokenizer.chat_template = TEMPLATE
    assert not takes_prefix_cache(model) and ModelChat(model, prefix_cache=True).runner is None


@pytest.mark.parametrize("family", ["llama", "neox"])
def test_prefix_logits_and_greedy_answers_equal_plain_passes(family):
    model = tiny_model(family)
    assert takes_prefix_cache(model)
    runner = PrefixRunner(model, batch_size=3)  # batches of 3 and 1, shortest first: padding inside the first
    ids = [model.tokenizer(t)["input_ids"] for t in PROMPTS]
    assert shared_length(ids) == 3  # BOS and "the cat" ("sat" is the last one's own)
    got = runner.last_logits(ids)
    plain = torch.cat([model.logits(t) for t in PROMPTS])[:, 0]
    torch.testing.assert_close(got, plain, atol=1e-4, rtol=1e-4)
    several = runner.logits_at(ids, [[5, len(s) - 1] for s in ids[:3]] + [[3]])
    torch.testing.assert_close(several[2], model.logits(PROMPTS[2], positions=[5, -1])[0], atol=1e-4, rtol=1e-4)
    answers = runner.greedy(ids, 6, stop_ids=[])
    for text, answer in zip(PROMPTS, answers):
        by_generate, width = model.generate_ids(text, max_new_tokens=6)
        assert answer == by_generate[0, width:].tolist()


def test_chat_client_answers_the_same_with_and_without_the_prefix_cache():
    model = tiny_model("llama")
    model.tokenizer.chat_template = TEMPLATE
    conversations = [[{"role": "user", "content": t}] for t in PROMPTS]
    cached, plain = ModelChat(model, batch_size=2, prefix_cache=True), ModelChat(model, batch_size=1)
    assert cached.runner is not None and plain.runner is None
    assert cached.complete(conversations, 5) == plain.complete(conversations, 5)
    np.testing.assert_allclose(cached.yes_probability(conversations), plain.yes_probability(conversations), atol=1e-5)
    items = [(c, ["the", " cat"]) for c in conversations[:2]]
    for a, b in zip(cached.digit_expectations_batch(items), [plain.digit_expectations(m, x) for m, x in items]):
        np.testing.assert_allclose(a, b, atol=1e-4)
