"""The context-sensitivity knob: does the model answer from the context or from what it knows?

A built-in task (the knob paper's design): a context that contradicts a fact ("Paris is in England."),
a question ("Where is Paris?"), and an intent, "use the context" or "use what you know". The context
answer is `` England``, the prior answer `` France``; every city and country is one token for the
model's tokenizer (the others are left out, checked). Pairs swap only the intent, so a subspace that
turns one answer into the other is a knob for context sensitivity. :func:`knob_sweep` moves along a
1-D DAS direction and records the context-minus-prior logit difference at each scale.

Example
-------
>>> task = knob_task(model, n=40)
>>> task.accuracy(model)                          # how often each intent is followed, no intervention
>>> das = ilab.das.fit(model, task.pairs(), "blocks.9.hook_resid_post", k=1)
>>> knob_sweep(model, das, task, scales=[-8, 0, 8]).chart()
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..checks import check_int, check_number, check_texts
from ..steering import SteeringVector
from ..steering import logits as steered_logits
from ..views.charts import offline
from .fit import DASResult
from .pairs import CounterfactualPairs, label_ids

if TYPE_CHECKING:
    from ..model.model import Model

#: (city, its country): the facts the model may know.
FACTS = (
    ("Paris", "France"), ("Rome", "Italy"), ("Madrid", "Spain"), ("Berlin", "Germany"), ("Tokyo", "Japan"),
    ("London", "England"), ("Moscow", "Russia"), ("Beijing", "China"), ("Cairo", "Egypt"), ("Athens", "Greece"),
    ("Lisbon", "Portugal"), ("Vienna", "Austria"), ("Dublin", "Ireland"), ("Ottawa", "Canada"), ("Oslo", "Norway"),
    ("Stockholm", "Sweden"), ("Warsaw", "Poland"), ("Delhi", "India"), ("Seoul", "Korea"), ("Istanbul", "Turkey"),
)  # fmt: skip
INTENTS = {"context": "Use the context.", "prior": "Ignore the context and use what you know."}
TEMPLATE = "Context: {city} is in {fake}.\nQuestion: Where is {city}?\nInstruction: {intent}\nAnswer: {city} is in"


def _intent(intent: Any) -> str:
    if intent not in INTENTS:
        raise ValueError(f"intent={intent!r} is not one of {tuple(INTENTS)}.")
    return intent


@dataclass
class KnobTask:
    """Prompts of the task: each item under both intents, with its context and prior answers."""

    items: list[tuple[str, str, str]]  # (city, true country, country the context claims)
    intents: tuple[str, ...] = tuple(INTENTS)  # the intents the task asks for

    def __post_init__(self) -> None:
        self.intents = tuple(self.intents)
        for intent in self.intents:
            _intent(intent)

    def prompt(self, i: int, intent: str) -> str:
        """Item ``i``'s prompt under ``intent`` (``"context"`` or ``"prior"``)."""
        i = check_int("i", i, 0, len(self.items) - 1)
        city, _, fake = self.items[i]
        return TEMPLATE.format(city=city, fake=fake, intent=INTENTS[_intent(intent)])

    def prompts(self, intent: str) -> list[str]:
        """Every item's prompt under ``intent``."""
        _intent(intent)
        return [self.prompt(i, intent) for i in range(len(self.items))]

    def answers(self, intent: str) -> list[str]:
        """The answer each prompt should give under ``intent`` (with its leading space)."""
        _intent(intent)
        return [" " + (fake if intent == "context" else true) for _, true, fake in self.items]

    def pairs(self) -> CounterfactualPairs:
        """Both directions: base under one intent, source under the other, label the source intent's answer."""
        out = []
        for base, source in (("context", "prior"), ("prior", "context")):
            out.append(CounterfactualPairs(self.prompts(base), self.prompts(source), self.answers(source),
                                           self.answers(base)))  # fmt: skip
        return out[0] + out[1]

    def accuracy(self, model: Model) -> dict[str, float]:
        """Share of items whose intended answer beats the other one, per intent (no intervention)."""
        if not hasattr(model, "logits") or not hasattr(model, "tokenizer"):
            raise TypeError(f"model must be an interplab Model, got {type(model).__name__}.")
        out = {}
        for intent in INTENTS:
            diffs = self.logit_diffs(model, self.prompts(intent))
            out[intent] = float(((diffs > 0) if intent == "context" else (diffs < 0)).float().mean())
        return out

    def logit_diffs(self, model: Model, texts: list[str], steering: Any = None) -> torch.Tensor:
        """Context answer minus prior answer logit at the last token of each item's prompt ([n])."""
        texts = check_texts(texts)
        if len(texts) != len(self.items):
            raise ValueError(f"Got {len(texts)} texts for {len(self.items)} items; give one prompt per item.")
        if steering is None:
            last = model.logits(texts)[:, -1]
        else:
            last = steered_logits(model, texts, steering, positions=-1, start=-1)[:, -1]
        ctx, pri = label_ids(model, self.answers("context")), label_ids(model, self.answers("prior"))
        rows = torch.arange(len(texts))
        return (last[rows, ctx] - last[rows, pri]).float()


def knob_task(model: Model, n: int = 20, seed: int = 0) -> KnobTask:
    """``n`` items (a city, its country, another country the context claims), single tokens for ``model``.

    >>> task = knob_task(model, n=20)
    """
    n = check_int("n", n, minimum=1)
    tok = model.tokenizer

    def one(word: str) -> bool:  # one token that is the word itself (not an unknown-word token)
        ids = tok(" " + word, add_special_tokens=False)["input_ids"]
        return len(ids) == 1 and ids[0] != tok.unk_token_id and tok.decode(ids).strip() == word

    facts = [(c, k) for c, k in FACTS if one(c) and one(k)]
    if len(facts) < 2:
        raise ValueError(f"Fewer than two facts of the knob task are single tokens for {model.name!r}.")
    rng = np.random.default_rng(seed)
    items: list[tuple[str, str, str]] = []
    while len(items) < n:
        for i in rng.permutation(len(facts)):
            city, true = facts[i]
            j = (i + 1 + int(rng.integers(len(facts) - 1))) % len(facts)
            items.append((city, true, facts[j][1]))
            if len(items) == n:
                break
    return KnobTask(items)


@dataclass(repr=False)
class KnobSweep:
    """Mean context-minus-prior logit difference per scale along a direction, for each intent's prompts."""

    scales: np.ndarray
    context: np.ndarray
    prior: np.ndarray
    site: str

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame({"scale": self.scales, "intent: context": self.context, "intent: prior": self.prior})

    def chart(self) -> Any:
        """Altair: the logit difference against the scale, one line per intent."""
        import altair as alt

        df = self.to_pandas().melt(id_vars=["scale"], var_name="prompts", value_name="context - prior logit")
        return offline(alt.Chart(df).mark_line(point=True).encode(
            x="scale:Q", y="context - prior logit:Q", color="prompts:N").properties(
            title=f"moving along the knob at {self.site}", width=380, height=220))  # fmt: skip

    def __repr__(self) -> str:
        rows = ", ".join(f"{s:+g}: {c:+.2f}/{p:+.2f}" for s, c, p in zip(self.scales, self.context, self.prior,
                                                                          strict=True))  # fmt: skip
        return f"KnobSweep({self.site}; scale: context-intent/prior-intent logit diff: {rows})"


def knob_sweep(model: Model, das: DASResult, task: KnobTask, scales: Sequence[float] = (-8, -4, 0, 4, 8)
               ) -> KnobSweep:  # fmt: skip
    """Add ``scale * direction`` at the last token of each prompt and measure the context - prior logit diff.

    The direction is the 1-D DAS subspace (``das.direction``, unit norm, pointing from base to source).
    """
    if not isinstance(das, DASResult):
        raise TypeError(f"das must be a DASResult (ilab.das.fit), got {type(das).__name__}.")
    if not isinstance(task, KnobTask):
        raise TypeError(f"task must be a KnobTask (ilab.das.knob_task), got {type(task).__name__}.")
    scale_arr = np.array([check_number(s, "scale") for s in scales], dtype=np.float64)
    if not len(scale_arr):
        raise ValueError("scales is empty: give at least one scale.")
    vec = SteeringVector(das.site, das.direction, 1.0, {"method": "das", "k": 1})
    ctx, pri = [], []
    for s in scale_arr:
        steer = None if s == 0 else (vec, float(s))
        ctx.append(float(task.logit_diffs(model, task.prompts("context"), steer).mean()))
        pri.append(float(task.logit_diffs(model, task.prompts("prior"), steer).mean()))
    return KnobSweep(scale_arr, np.array(ctx), np.array(pri), das.site)
