"""Bad inputs of ilab.probes: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

from typing import Any

import torch

import interplab as ilab
from tests.contracts.rows import SITE, Ctx, Row, T, V, before_work
from tests.tiny import TEXTS


def _probe(c: Ctx) -> Any:
    return ilab.probes.train(c.model, TEXTS * 2, [0, 1, 0, 1, 0, 1], cv=0, progress=False)


ROWS: list[Row] = [
    Row("ilab.probes.train", lambda c: ilab.probes.train(c.model, TEXTS, [0, 1]), V, "Got 3 texts but 2 labels"),
    Row(
        "ilab.probes.train",
        lambda c: ilab.probes.train(c.model, TEXTS, [[0]] * 3),
        V,
        r"labels\[0\] has 1 entries but text 0 has 7 tokens",
    ),
    Row("ilab.probes.train", lambda c: ilab.probes.train(c.model, TEXTS, [0, 1, 0], C=0), V, "C must be positive"),
    Row(
        "ilab.probes.Probe.predict",
        lambda c: ilab.probes.Probe(SITE, [0, 1], torch.zeros(1, 32), torch.zeros(1)).predict(torch.zeros(2, 5)),
        V,
        r"must be \[N, 32\] for the probe at blocks.1.hook_resid_post, got \(2, 5\)",
    ),
    Row(
        "ilab.probes.ProbeResult.load",
        lambda c: ilab.probes.ProbeResult.load(c.tmp / "nope.safetensors"),
        FileNotFoundError,
        "nope.safetensors",
    ),
    Row("ilab.probes.ProbeResult.save", lambda c: _probe(c).save(c.tmp), IsADirectoryError, "Is a directory"),
    Row(
        "ilab.probes.binding_task",
        lambda c: ilab.probes.binding_task(c.model, "sports"),
        V,
        "domain='sports' is not one of",
    ),
    Row("ilab.probes.binding_task", lambda c: ilab.probes.binding_task(c.model), V, "Fewer than two names"),
    Row(
        "ilab.probes.fit_binding",
        lambda c: ilab.probes.fit_binding(c.model, [1], SITE),
        T,
        "task must be a BindingTask",
    ),
    Row(
        "ilab.probes.BindingTask",
        lambda c: ilab.probes.BindingTask("foods", [("a", "b", "c", "d")]).text(2),
        V,
        r"i must be an integer in 0\.\.0, got 2",
    ),
    Row(
        "ilab.probes.BindingTask.text",
        lambda c: ilab.probes.BindingTask("foods", [("a", "b", "c", "d")]).text(-1),
        V,
        "got -1",
    ),
    Row(
        "ilab.probes.BindingTask.story",
        lambda c: ilab.probes.BindingTask("foods", [("a", "b", "c", "d")]).story(5),
        V,
        "got 5",
    ),
    Row(
        "ilab.probes.binding_task",
        lambda c: ilab.probes.binding_task(c.model, entities=5),
        V,
        r"entities must be an integer in 2\.\.4, got 5",
    ),
    Row(
        "ilab.probes.fit_binding",
        lambda c: ilab.probes.fit_binding(
            c.model, ilab.probes.BindingTask("foods", [("a", "b", "c", "d")]), SITE, features="tokens"
        ),
        V,
        r"features='tokens' is not one of \('activations', 'position'\)",
    ),
    Row(
        "ilab.probes.PropositionResult.decode",
        lambda c: ilab.probes.PropositionResult({}, [], []).decode(c.model, "the cat", ["cat"], ["cat"]),
        V,
        "This result keeps no probes",
    ),
    Row(
        "ilab.probes.decode_propositions",
        lambda c: ilab.probes.decode_propositions(
            c.model, ilab.probes.BindingTask("foods", [("a", "b", "c", "d")]), "binding"
        ),
        T,
        "binding must be a BindingResult of activations",
    ),
    Row(
        "ilab.probes.decode_propositions",
        lambda c: ilab.probes.decode_propositions(c.model, [1], "binding"),
        T,
        "task must be a BindingTask",
    ),
    Row(
        "ilab.probes.BindingTask.text",
        lambda c: ilab.probes.BindingTask("foods", [("a", "b", "c", "d")]).text(0, "poem"),
        V,
        r"phrasing='poem' is not one of \('template', 'story', 'respectively'\)",
    ),
    Row(
        "ilab.probes.BindingTask.pairs",
        lambda c: ilab.probes.BindingTask("foods", [("a", "b", "c", "d")]).pairs(1),
        V,
        r"i must be an integer in 0\.\.0, got 1",
    ),
    Row(
        "ilab.probes.BindingTask.story",
        lambda c: ilab.probes.BindingTask("foods", [("a", "b", "c", "d", "e", "f")]).story(0),
        V,
        "The story phrasing has two entities; this task has 3",
    ),
    Row(
        "ilab.probes.BindingResult.matrix",
        lambda c: ilab.probes.BindingResult(SITE, torch.zeros(32, 2), torch.zeros(32), *[0.0] * 4).matrix(
            c.model, "the cat", [], ["cat"]
        ),
        V,
        "at least one word",
    ),
    Row(
        "ilab.probes.BindingResult.matrix",
        lambda c: ilab.probes.BindingResult(SITE, torch.zeros(32, 2), torch.zeros(32), *[0.0] * 4).matrix(
            c.model, "the cat", ["dog"], ["cat"]
        ),
        V,
        "'dog' is not a token of the context",
    ),
    Row(
        "ilab.probes.train",
        before_work(lambda c: ilab.probes.train(c.model, ["a b", "c d", "e f", "g h"], [0, 1, 0, 1], cv=100)),
        V,
        r"cv=100 folds need at least 100 training texts; 3 of the 4 texts train",
    ),
    Row(
        "ilab.probes.faithfulness",
        before_work(lambda c: ilab.probes.faithfulness(c.model, [1], ilab.probes.PropositionResult({}, [], []))),
        T,
        "task must be a BindingTask",
    ),
    Row(
        "ilab.probes.faithfulness",
        before_work(
            lambda c: ilab.probes.faithfulness(
                c.model,
                ilab.probes.BindingTask("foods", [("a", "b", "c", "d")]),
                ilab.probes.PropositionResult({}, [], []),
            )
        ),
        T,
        "props must be a PropositionResult with its probes",
    ),
    Row("ilab.probes.stereotype_task", lambda c: ilab.probes.stereotype_task(c.model, n=0), V, "n must be"),
    Row("ilab.probes.stereotype_task", lambda c: ilab.probes.stereotype_task(c.model), V, "Too few names"),
]

EXEMPT: dict[str, str] = {
    "ilab.probes.FaithfulnessResult": "a result built by ilab.probes.faithfulness (which has rows)",
    "ilab.probes.PropositionResult": "a result built by ilab.probes.decode_propositions (which has rows)",
    "ilab.probes.ProbeResult": "a result built by ilab.probes.train (which has rows); users do not build it",
    "ilab.probes.BindingResult": "a result built by ilab.probes.fit_binding (which has rows)",
    "ilab.probes.BindingMatrix": "plain data built by BindingResult.matrix (which has rows)",
    "ilab.probes.Probe": "one site's weights inside a ProbeResult (Probe.predict has rows)",
}
