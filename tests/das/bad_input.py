"""Bad inputs of ilab.das: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import interplab as ilab
from tests.contracts.rows import SITE, Ctx, Row, T, V, a_file, before_work


def _das_pairs(c: Ctx) -> Any:
    return ilab.das.counterfactual_pairs(c.model, ["the cat sat", "the dog ran"], ["the dog sat", "a cat ran"],
                                         ["on", "to"])  # fmt: skip


def _das_result(k: int, n_pairs: int = 2) -> ilab.das.DASResult:
    return ilab.das.DASResult(SITE, [-1], torch.eye(32)[:, :k], *[0.0] * 5, [], {"n_pairs": n_pairs})


_KNOB = [("cat", "mat", "house"), ("dog", "tree", "store")]


def _tuning(adapter: dict[str, Any] | None = None) -> ilab.das.IntentTuning:
    return ilab.das.IntentTuning(ilab.das.KnobTask(_KNOB), [1], 1, adapter or {}, [0], [1], {}, {})


def _ioi_split(c: Ctx) -> tuple[Any, Any]:
    template = "When{A} and{B} went to the store,{S} gave a drink to"
    pairs = ilab.patching.ioi_balanced(c.model, ["Mary", "cat"], ["John", "dog"], [template] * 2, corruption="flip")
    return ilab.das.split_ioi(pairs, held_out=0.5)


def _without_cat(pairs: Any) -> Any:
    keep = [i for i, a in enumerate(pairs.answers) if a != " cat"]
    return ilab.patching.PromptPairs(*([getattr(pairs, f)[i] for i in keep] for f in ("clean", "corrupt", "answers",
                                                                                        "wrong")))  # fmt: skip


ROWS: list[Row] = [
    Row(
        "ilab.das.split_ioi",
        lambda c: ilab.das.split_ioi(_ioi_split(c)[0][:1], held_out=0.5),
        V,
        r"io='(Mary|cat)' is in fit_pairs but never in the held-out pairs",
    ),
    Row("ilab.das.split_ioi", lambda c: ilab.das.split_ioi(_ioi_split(c)[0], held_out=0), V, "held_out must be in"),
    Row(
        "ilab.das.latent_alignment",
        before_work(
            lambda c: ilab.das.latent_alignment(
                c.model, _ioi_split(c)[0], _without_cat(_ioi_split(c)[1]), SITE, {"sae": c.sae}
            )
        ),
        V,
        r"io='cat' is in fit_pairs but never in the held-out pairs, which have \['Mary'\]",
    ),
    Row(
        "ilab.das.latent_alignment",
        lambda c: ilab.das.latent_alignment(c.model, *_ioi_split(c), SITE, {"sae": "topk"}),
        T,
        r"dictionaries\['sae'\] must be an SAE or a SupervisedDictionary, got str",
    ),
    Row(
        "ilab.das.compare_dictionaries",
        before_work(
            lambda c: ilab.das.compare_dictionaries(
                c.model, _without_cat(_ioi_split(c)[1]), SITE, fit_pairs=_ioi_split(c)[0], ks=[1]
            )
        ),
        V,
        r"io='cat' is in fit_pairs but never in the held-out pairs",
    ),
    Row(
        "ilab.das.compare_dictionaries",
        before_work(
            lambda c: ilab.das.compare_dictionaries(
                c.model, _ioi_split(c)[1], SITE, {"sae": c.sae}, fit_pairs=_ioi_split(c)[0], ks=[25]
            )
        ),
        V,
        r"k=25 is larger than the dictionary 'supervised', which has 6 latents: k must be in 1\.\.6",
    ),
    Row(
        "ilab.das.SupervisedDictionary.encode",
        lambda c: ilab.das.SupervisedDictionary(SITE, torch.zeros(32), {}).encode(torch.zeros(2, 8)),
        V,
        r"x_ND must be activations \[N, 32\] of blocks.1.hook_resid_post, got \(2, 8\)",
    ),
    Row(
        "ilab.das.SupervisedDictionary.randomized",
        lambda c: ilab.das.SupervisedDictionary(SITE, torch.zeros(32), {}).randomized(seed=-1),
        V,
        r"seed must be an integer >= 0, got -1",
    ),
    Row("ilab.das.ioi_attributes", lambda c: ilab.das.ioi_attributes(["a"]), T, "pairs must be IOI PromptPairs"),
    Row(
        "ilab.das.supervised_dictionary",
        lambda c: ilab.das.supervised_dictionary(c.model, c.pairs, SITE),
        V,
        "The names 'on' and 'to' are not both in the prompt 'the cat sat'",
    ),
    Row(
        "ilab.das.compare_dictionaries",
        lambda c: ilab.das.compare_dictionaries(c.model, c.pairs, SITE, {"x": 1}),
        T,
        r"saes\['x'\] must be an interplab SAE",
    ),
    Row(
        "ilab.das.SupervisedDictionary.reconstruct",
        lambda c: ilab.das.SupervisedDictionary(
            SITE, torch.zeros(32), {"io": {"Mary": torch.zeros(32)}, "s": {}, "order": {}}
        ).reconstruct([{"io": "Bob"}]),
        V,
        r"io='Bob' has no feature; this dictionary knows \['Mary'\]",
    ),
    Row(
        "ilab.das.counterfactual_pairs",
        lambda c: ilab.das.counterfactual_pairs(c.model, ["a", "b"], ["c"], ["d"]),
        V,
        "Got 2 base prompts but 1 source prompts",
    ),
    Row(
        "ilab.das.counterfactual_pairs",
        lambda c: ilab.das.counterfactual_pairs(c.model, ["a"], ["c"], ["the cat"]),
        V,
        r"labels\[0\]",
    ),
    Row(
        "ilab.das.CounterfactualPairs",
        lambda c: ilab.das.fit(c.model, ilab.das.CounterfactualPairs(["a"], ["b", "c"], ["d"]), SITE),
        V,
        "Got 1 base prompts but 2 source prompts",
    ),
    Row("ilab.das.as_pairs", lambda c: ilab.das.as_pairs(c.model, ["a"]), T, "pairs must be CounterfactualPairs"),
    Row(
        "ilab.das.fit",
        lambda c: ilab.das.fit(c.model, _das_pairs(c), SITE, k=33),
        V,
        r"k=33 is larger than the width of blocks.1.hook_resid_post \(d=32\)",
    ),
    Row(
        "ilab.das.fit",
        lambda c: ilab.das.fit(c.model, _das_pairs(c), SITE, positions=[0, 0]),
        V,
        "positions repeats an index",
    ),
    Row(
        "ilab.das.DASResult",
        lambda c: ilab.das.DASResult(SITE, [-1], torch.zeros(32, 2), *[0.0] * 5).direction,
        V,
        "k=2 dimensions; a direction needs k=1",
    ),
    Row(
        "ilab.das.DASResult.load",
        lambda c: ilab.das.DASResult.load(c.tmp / "nope.safetensors"),
        FileNotFoundError,
        "nope.safetensors",
    ),
    Row(
        "ilab.das.DASResult.save",
        lambda c: ilab.das.DASResult(SITE, [-1], torch.zeros(32, 1), *[0.0] * 5).save(c.tmp),
        IsADirectoryError,
        "Is a directory",
    ),
    Row(
        "ilab.das.layer_search",
        lambda c: ilab.das.layer_search(c.model, _das_pairs(c), kind="heads"),
        V,
        "kind='heads' is not one of",
    ),
    Row(
        "ilab.das.layer_search",
        lambda c: ilab.das.layer_search(c.model, _das_pairs(c), layers=[5]),
        V,
        r"layer must be an integer in 0\.\.1, got 5",
    ),
    Row("ilab.das.LayerSearch", lambda c: ilab.das.layer_search(c.model, _das_pairs(c), top=0), V, "top must be"),
    Row(
        "ilab.das.layer_search",
        before_work(lambda c: ilab.das.layer_search(c.model, _das_pairs(c), score="swap")),
        V,
        r"score='swap' is not one of \('full_swap', 'das'\)",
    ),
    Row(
        "ilab.das.layer_search",
        before_work(lambda c: ilab.das.layer_search(c.model, _das_pairs(c), score="das", score_pairs=0)),
        V,
        "score_pairs must be",
    ),
    Row("ilab.das.knob_task", lambda c: ilab.das.knob_task(c.model), V, "Fewer than two facts"),
    Row(
        "ilab.das.KnobTask",
        lambda c: ilab.das.KnobTask([("a", "b", "c")]).prompt(3, "context"),
        V,
        r"i must be an integer in 0\.\.0, got 3",
    ),
    Row(
        "ilab.das.KnobTask.prompt",
        lambda c: ilab.das.KnobTask([("a", "b", "c")]).prompt(0, "guess"),
        V,
        r"intent='guess' is not one of \('context', 'prior'\)",
    ),
    Row(
        "ilab.das.KnobTask.prompts",
        lambda c: ilab.das.KnobTask([("a", "b", "c")]).prompts("guess"),
        V,
        "intent='guess'",
    ),
    Row(
        "ilab.das.KnobTask.answers",
        lambda c: ilab.das.KnobTask([("a", "b", "c")]).answers("guess"),
        V,
        "intent='guess'",
    ),
    Row(
        "ilab.das.KnobTask.logit_diffs",
        lambda c: ilab.das.KnobTask([("a", "b", "c")]).logit_diffs(c.model, ["a", "b"]),
        V,
        "Got 2 texts for 1 items",
    ),
    Row(
        "ilab.das.KnobTask.accuracy",
        lambda c: ilab.das.KnobTask([("a", "b", "c")]).accuracy("model"),
        T,
        "model must be an interplab Model, got str",
    ),
    Row("ilab.das.knob_sweep", lambda c: ilab.das.knob_sweep(c.model, "das", None), T, "das must be a DASResult"),
    Row(
        "ilab.das.KnobSweep",
        lambda c: ilab.das.knob_sweep(
            c.model,
            ilab.das.DASResult(SITE, [-1], torch.zeros(32, 1), *[0.0] * 5),
            ilab.das.KnobTask([("a", "b", "c")]),
            scales=[],
        ),
        V,
        "scales is empty",
    ),
    Row(
        "ilab.das.fit",
        lambda c: ilab.das.fit(
            c.model,
            ilab.das.counterfactual_pairs(c.model, ["the cat sat", "the big dog ran"], ["a", "b"], ["on", "to"]),
            SITE,
            positions="learned",
        ),
        V,
        r"positions='learned' selects one position of one template, but the prompts have 3 token lengths: 2 \('a'\)",
    ),
    Row(
        "ilab.das.fit",
        lambda c: ilab.das.fit(c.model, _das_pairs(c), SITE, positions="middle"),
        V,
        "positions='middle': give token indices or 'learned'",
    ),
    Row(
        "ilab.das.position_search",
        lambda c: ilab.das.position_search(
            c.model,
            ilab.das.counterfactual_pairs(c.model, ["the cat sat", "the big dog ran"], ["a", "b"], ["on", "to"]),
            SITE,
        ),
        V,
        "selects one position of one template, but the prompts have 3 token lengths",
    ),
    Row(
        "ilab.das.random_baseline",
        lambda c: ilab.das.random_baseline(c.model, _das_pairs(c), _das_result(k=1), metric="bits"),
        V,
        r"metric='bits' is not one of \('iia', 'logit_diff'\)",
    ),
    Row(
        "ilab.das.random_baseline",
        lambda c: ilab.das.random_baseline(c.model, _das_pairs(c), _das_result(k=1, n_pairs=5)),
        V,
        "pairs has 2 pairs but das was fitted on 5",
    ),
    Row(
        "ilab.das.random_subspaces", lambda c: ilab.das.random_subspaces(4, 5, 2), V, "k=5 is larger than the width d=4"
    ),
    Row("ilab.das.random_das", lambda c: ilab.das.random_das("das"), T, "das must be a DASResult"),
    Row(
        "ilab.das.knob_control",
        lambda c: ilab.das.knob_control(c.model, _das_result(k=2), ilab.das.KnobTask([("a", "b", "c")])),
        V,
        "k=2 dimensions; a direction needs k=1",
    ),
    Row(
        "ilab.das.knob_control",
        lambda c: ilab.das.knob_control(c.model, _das_result(k=1), ilab.das.KnobTask([("a", "b", "c")]), scale=0),
        V,
        r"scale must be positive .*got 0",
    ),
    Row(
        "ilab.das.Control.exceeds",
        lambda c: ilab.das.Control("iia", 0.5, np.zeros(3), SITE, 1).exceeds(float("nan")),
        V,
        "q must be finite, got nan",
    ),
    Row(
        "ilab.das.Control.quantile",
        lambda c: ilab.das.Control("iia", 0.5, np.zeros(3), SITE, 1).quantile("high"),
        T,
        "q must be a number, got str: 'high'",
    ),
    Row(
        "ilab.das.fit",
        before_work(
            lambda c: ilab.das.fit(
                c.model, ilab.das.as_pairs(c.model, c.pairs), SITE, k=1, test_size=0, path=a_file(c.tmp)
            )
        ),
        V,
        r"das\.fit folder='.*a-file' is an existing file, not a folder",
    ),
    Row(
        "ilab.das.finetune_intents",
        before_work(lambda c: ilab.das.finetune_intents(c.model, ilab.das.KnobTask(_KNOB, intents=("context",)))),
        V,
        r"task has one intent \('context',\): fine-tuning needs both of \('context', 'prior'\)",
    ),
    Row(
        "ilab.das.finetune_intents",
        before_work(lambda c: ilab.das.finetune_intents(c.model, ilab.das.KnobTask(_KNOB), blocks=3)),
        V,
        r"blocks must be an integer in 1\.\.2, got 3",
    ),
    Row(
        "ilab.das.finetune_intents",
        before_work(lambda c: ilab.das.finetune_intents(c.model, ilab.das.KnobTask(_KNOB[:1]))),
        V,
        "task has 1 items of one city: held-out questions need two cities or more",
    ),
    Row(
        "ilab.das.KnobTask",
        lambda c: ilab.das.KnobTask(_KNOB, intents=("context", "guess")),
        V,
        r"intent='guess' is not one of \('context', 'prior'\)",
    ),
    Row("ilab.das.IntentTuning.pairs", lambda c: _tuning().pairs("dev"), V, r"split='dev' is not one of"),
    Row("ilab.das.IntentTuning.at", lambda c: _tuning().at(4), V, r"step=4 has no snapshot; the kept steps are \[\]"),
    Row(
        "ilab.das.finetune_intents",
        before_work(lambda c: ilab.das.finetune_intents(c.model, ilab.das.KnobTask(_KNOB), steps=4, snapshots=[4])),
        V,
        r"snapshot step must be an integer in 1\.\.3, got 4",
    ),
    Row(
        "ilab.das.knob_separation",
        before_work(
            lambda c: ilab.das.knob_separation(
                c.model, ilab.das.KnobTask(_KNOB), _das_result(k=1), {"plain": None, "tuned": _tuning()}
            )
        ),
        V,
        r"variants has 2 models \['plain', 'tuned'\]: a correlation needs three or more",
    ),
    Row(
        "ilab.das.knob_separation",
        before_work(
            lambda c: ilab.das.knob_separation(
                c.model, ilab.das.KnobTask(_KNOB), _das_result(k=2), {"a": None, "b": None, "c": None}
            )
        ),
        V,
        "k=2 dimensions; a direction needs k=1",
    ),
    Row(
        "ilab.das.knob_separation",
        before_work(
            lambda c: ilab.das.knob_separation(
                c.model, ilab.das.KnobTask(_KNOB), _das_result(k=1), {"a": None, "b": None, "c": "tuned"}
            )
        ),
        T,
        r"variants\['c'\] must be an IntentTuning or None",
    ),
    Row(
        "ilab.das.knob_separation",
        before_work(
            lambda c: ilab.das.knob_separation(
                c.model,
                ilab.das.KnobTask(_KNOB),
                {"a": _das_result(k=1), "b": _das_result(k=1)},
                {"a": None, "b": None, "c": None},
            )
        ),
        V,
        r"das names the models \['a', 'b'\] but variants has \['a', 'b', 'c'\]: give one knob per model",
    ),
    Row(
        "ilab.das.fit_knobs",
        before_work(lambda c: ilab.das.fit_knobs(c.model, _das_pairs(c), {"plain": None}, SITE, k=2)),
        V,
        r"k=2: a knob is one direction \(k=1\)",
    ),
    Row(
        "ilab.das.fit_knobs",
        before_work(lambda c: ilab.das.fit_knobs(c.model, _das_pairs(c), {"plain": 3}, SITE)),
        T,
        r"variants\['plain'\] must be an IntentTuning or None",
    ),
    Row(
        "ilab.das.IntentTuning.applied",
        lambda c: _tuning(adapter={"lm.head": (torch.zeros(2, 1), torch.zeros(1, 2))}).applied(c.model).__enter__(),
        V,
        r"The adapter names modules \['lm.head'\] that .* has not",
    ),
]

EXEMPT: dict[str, str] = {
    "ilab.das.Control": "the result random_baseline and knob_control build (which have rows)",
    "ilab.das.PositionSearch": "the result position_search builds (which has rows)",
    "ilab.das.DictionaryComparison": "the result compare_dictionaries builds (which has rows)",
    "ilab.das.SupervisedDictionary": "built by ilab.das.supervised_dictionary (which has rows)",
    "ilab.das.LatentAlignment": "the result latent_alignment builds (which has rows)",
    "ilab.das.IntentTuning": "the result finetune_intents builds (which has rows, as have its methods)",
    "ilab.das.KnobSeparation": "the result knob_separation builds (which has rows); its members take no input",
}
