"""Bad inputs of the logit lens and ilab.metrics: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

import torch
from interplab.core.memory.budget import MemoryBudgetError

import interplab as ilab
from tests.contracts.rows import Row, T, V
from tests.memory.bad_input import under_budget
from tests.tiny import TEXTS, tiny_tokenizer


def _opt_without_final_norm() -> ilab.Model:
    """A tiny OPT with post-norm blocks: its decoder has no final norm, so no logit lens."""
    from tests.model.test_any_causal_lm import tiny_unmapped

    return ilab.load_model(tiny_unmapped("opt", do_layer_norm_before=False), tokenizer=tiny_tokenizer())


ROWS: list[Row] = [
    Row("ilab.logit_lens", lambda c: ilab.logit_lens(c.model, TEXTS, positions=99), V, "Position 99 is outside"),
    Row("ilab.logit_lens", lambda c: ilab.logit_lens(c.model, []), V, "texts is empty"),
    Row(
        "ilab.logit_lens",
        lambda c: under_budget("100KB", lambda: ilab.logit_lens(c.model, TEXTS * 10, positions=None)),
        MemoryBudgetError,
        r"logit_lens on 30 texts of up to 15 tokens would need about .* returned.*fewer positions",
    ),
    Row(
        "ilab.logit_lens",
        lambda c: ilab.logit_lens(_opt_without_final_norm(), TEXTS),
        V,
        r"model_type 'opt': no final norm .* under model\.decoder\. Read its modules through model\.nn",
    ),
    Row(
        "ilab.metrics.logit_diff",
        lambda c: ilab.metrics.logit_diff(None, " John"),
        T,
        "answer must be a token .*got NoneType",
    ),
    Row("ilab.metrics.logit_diff", lambda c: ilab.metrics.logit_diff(set(), "a"), V, "answer is an empty set"),
    Row("ilab.metrics.prob", lambda c: ilab.metrics.prob([1.5]), T, r"answer\[0\] must be a token .*got float"),
    Row(
        "ilab.metrics.kl_to_clean",
        lambda c: ilab.metrics.kl_to_clean().on(c.model)(torch.zeros(1, 64)),
        RuntimeError,
        "kl_to_clean needs the clean logits",
    ),
    Row("ilab.metrics.as_metric", lambda c: ilab.metrics.as_metric(3), T, "metric must be logit_diff"),
    Row(
        "ilab.metrics.Metric",
        lambda c: ilab.metrics.Metric("x", "logit_diff", "the cat", "a").on(c.model),
        V,
        "'the cat' is 2 tokens, not one",
    ),
    Row(
        "ilab.metrics.Metric.bind",
        lambda c: ilab.metrics.logit_diff(["a", "b"], "c").bind(c.model.tokenizer),
        V,
        "is a list .* not bound to pairs",
    ),
    Row(
        "ilab.metrics.Metric.on",
        lambda c: ilab.metrics.prob(10**9).on(c.model),
        V,
        "answer token id 1000000000 is outside the vocabulary",
    ),
    Row(
        "ilab.metrics.BoundMetric",
        lambda c: ilab.metrics.as_metric(lambda x: x).on(c.model)(torch.zeros(2, 4)),
        V,
        r"returned shape \(2, 4\) .* one value per row",
    ),
    Row(
        "ilab.metrics.BoundMetric.score",
        lambda c: ilab.metrics.prob("cat").on(c.model).score(torch.zeros(2, 3, 4)),
        V,
        r"final-position logits \[rows, vocab\]; got shape \(2, 3, 4\)",
    ),
    Row(
        "ilab.metrics.BoundMetric.set_clean",
        lambda c: ilab.metrics.prob("cat").on(c.model).set_clean(None),
        T,
        "A metric reads logits, a float tensor .*got NoneType",
    ),
    Row(
        "ilab.LogitLensResult.view_data",
        lambda c: ilab.logit_lens(c.model, "the cat").view_data(text=5),
        V,
        r"text must be an integer in 0\.\.0, got 5",
    ),
    Row(
        "ilab.logit_lens",
        lambda c: ilab.logit_lens(c.model, "the \ud800 cat"),
        V,
        r"texts\[0\] is not valid Unicode: character 4 is a lone surrogate",
    ),
]

ROWS += [
    Row(
        "ilab.patchscope",
        lambda c: ilab.patchscope(c.model, "the cat", target="the cat sat on the mat", layers=[0]),
        V,
        r"The target 'the cat sat on the mat' has no placeholder token '\?' .* pass placeholder=",
    ),
    Row(
        "ilab.patchscope",
        lambda c: ilab.patchscope(
            c.model, "the cat", target="cat cat dog dog bird and", placeholder="bird", layers=[0, 2]
        ),
        V,
        r"Layer 2 is out of range: the model has layers 0\.\.1",
    ),
    Row(
        "ilab.patchscope",
        lambda c: ilab.patchscope(c.model, "the cat", target="cat cat dog bird", placeholder="bird"),
        V,
        r"The placeholder 'bird' is the target's last token",
    ),
    Row(
        "ilab.patchscope",
        lambda c: ilab.patchscope(c.model, "the cat", target="dog bird and", placeholder="bird", position=3),
        V,
        r"position must be an integer in -3\.\.2, got 3",
    ),
    Row(
        "ilab.PatchscopeResult.top",
        lambda c: ilab.patchscope(
            c.model, "the cat", target="dog bird and", placeholder="bird", layers=[1], n_tokens=1
        ).top(0),
        V,
        r"Layer 0 was not patched; the layers are \[1\]",
    ),
]

EXEMPT: dict[str, str] = {
    "ilab.LogitLensResult": "a tensor made by ilab.logit_lens (which has rows); users do not construct it",
    "ilab.LogitLensResult.wrap": "how ilab.logit_lens builds its result from the logits it computed",
    "ilab.PatchscopeResult": "a dataclass made by ilab.patchscope (which has rows); users do not construct it",
}
