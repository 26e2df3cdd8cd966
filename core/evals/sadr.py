"""What a knowledge edit does beyond its fact: success, attention drift on the subject and specificity failure.

The SADR paper (Selective Attention Drift Restriction) finds that an edit such as ROME's makes the model
fail on *distracting neighbours*: with the edited fact in the context, a prompt about something else is
drawn to the edited subject ("Greg is a nurse. The Eiffel Tower is in the city of Rome. Greg works as a"
continues with "Rome" rather than "nurse"). It traces the failure to **attention drift**: heads at the last
token attend more to the edited subject than before the edit.

:func:`edit_effects` measures the three for a :class:`~interplab.core.evals.knowledge_edit.RankOneEdit` (or its
:meth:`~interplab.core.evals.knowledge_edit.RankOneEdit.random_like` control): **success**, the share of facts whose
target becomes the top token; **drift**, the attention mass of the last token on the subject's tokens in the
neighbour prompt (summed over the subject, mean over heads and the layers after the edit), after minus
before; **specificity drop**, the neighbour answer's log-probability before minus after (positive: the edit
hurt it). Neighbours are templates with ``{fact}`` where the edited sentence (prompt + target) goes.

Example
-------
>>> fx = edit_effects(model, edit, [("Greg is a nurse. {fact}. Greg works as a", " nurse")])
>>> fx.summary        # success, drift, specificity_drop, neighbour_accuracy, p_target_in_neighbour
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from ..checks import single_token_id
from ..views.charts import offline
from .knowledge_edit import edited_trace, subject_span

if TYPE_CHECKING:
    from ..model.model import Model
    from .knowledge_edit import RankOneEdit


def check_neighbours(model: Model, neighbours: Sequence[tuple[str, str]]) -> list[tuple[str, str, int]]:
    """Each neighbour as (template with ``{fact}``, answer, answer id); a clear error before any forward pass."""
    if isinstance(neighbours, (str, bytes)) or not isinstance(neighbours, Sequence) or not neighbours:
        raise ValueError("neighbours must be a non-empty list of (template with '{fact}', answer) pairs.")
    out = []
    for i, pair in enumerate(neighbours):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(isinstance(p, str) for p in pair):
            raise ValueError(f"neighbours[{i}] must be a (template, answer) pair of strings, got {pair!r}.")
        template, answer = pair
        if "{fact}" not in template:
            raise ValueError(f"neighbours[{i}] template {template!r} has no '{{fact}}' where the edited fact goes.")
        out.append((template, answer, single_token_id(model.tokenizer, answer, f"neighbours[{i}] answer")))
    return out


@dataclass(repr=False)
class EditEffects:
    """Per fact ``facts`` (fact, p_target, top1) and per (fact, neighbour) ``neighbours`` (drift, log-probs)."""

    kind: str
    facts: pd.DataFrame
    neighbours: pd.DataFrame

    @property
    def summary(self) -> dict[str, float]:
        """Success, mean drift, mean specificity drop, neighbour accuracy after, target probability in neighbours."""
        nb = self.neighbours
        return {"success": float(self.facts.top1.mean()), "drift": float(nb.drift.mean()),
                "specificity_drop": float(nb.specificity_drop.mean()),
                "neighbour_accuracy": float(nb.top1_after.mean()),
                "p_target_in_neighbour": float(nb.p_target_after.mean())}  # fmt: skip

    def chart(self) -> Any:
        """Drift against specificity drop, one point per (fact, neighbour)."""
        import altair as alt

        return offline(alt.Chart(self.neighbours).mark_point(filled=True).encode(
            x=alt.X("drift:Q", title="attention drift on the subject"),
            y=alt.Y("specificity_drop:Q", title="log p(answer): before - after"), color="fact:N",
            tooltip=["fact", "neighbour", "drift", "specificity_drop"],
        ).properties(title=f"Distracting neighbours ({self.kind})", width=280, height=200))  # fmt: skip

    def __repr__(self) -> str:
        s = self.summary
        return (f"EditEffects({self.kind}: success {s['success']:.2f}, drift {s['drift']:+.4f}, "
                f"specificity drop {s['specificity_drop']:+.3f})")  # fmt: skip


def rows_of(edit: RankOneEdit, facts: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's key direction and value, by its fact."""
    return edit.u_NF[facts], edit.delta_ND[facts]


def edit_effects(model: Model, edit: RankOneEdit, neighbours: Sequence[tuple[str, str]]) -> EditEffects:
    """Success, attention drift on the subject and specificity drop of ``edit`` on distracting ``neighbours``.

    >>> edit_effects(model, edit, [("Greg is a nurse. {fact}. Greg works as a", " nurse")]).summary
    """
    checked = check_neighbours(model, neighbours)
    n_facts = len(edit.prompts)
    facts_enc = model.to_tokens(edit.prompts, padding_side="left")
    later = list(range(edit.layer + 1, model.n_layers))
    logp_fact, _ = edited_trace(model, facts_enc, edit.layer, edit.u_NF, edit.delta_ND, [])
    target_N = torch.tensor([single_token_id(model.tokenizer, t, "target") for t in edit.targets])
    facts = pd.DataFrame({"fact": range(n_facts), "target": edit.targets,
                          "p_target": logp_fact[torch.arange(n_facts), target_N].exp().numpy(),
                          "top1": (logp_fact.argmax(-1) == target_N).numpy()})  # fmt: skip
    pairs = [(f, j) for f in range(n_facts) for j in range(len(checked))]
    texts = [checked[j][0].replace("{fact}", edit.prompts[f] + edit.targets[f]) for f, j in pairs]
    enc = model.to_tokens(texts, padding_side="left")
    u, delta = rows_of(edit, [f for f, _ in pairs])
    logp0, attn0 = edited_trace(model, enc, edit.layer, u, torch.zeros_like(delta), later)
    logp1, attn1 = edited_trace(model, enc, edit.layer, u, delta, later)
    pad = (enc["attention_mask"].shape[1] - enc["attention_mask"].sum(1)).tolist()
    rows = []
    for r, ((f, j), text) in enumerate(zip(pairs, texts, strict=True)):
        first, last = subject_span(model, text, edit.subjects[f] or edit.prompts[f])
        span = slice(first + pad[r], last + pad[r] + 1)
        answer, tgt = checked[j][2], int(target_N[f])
        drift_LH = (attn1[r, ..., span].sum(-1) - attn0[r, ..., span].sum(-1)).numpy() if later else np.zeros(1)
        rows.append({"fact": f, "neighbour": j, "text": text, "drift": float(drift_LH.mean()),
                     "drift_max": float(drift_LH.max()),
                     "logp_answer_before": float(logp0[r, answer]), "logp_answer_after": float(logp1[r, answer]),
                     "specificity_drop": float(logp0[r, answer] - logp1[r, answer]),
                     "top1_before": int(logp0[r].argmax()) == answer, "top1_after": int(logp1[r].argmax()) == answer,
                     "p_target_before": float(logp0[r, tgt].exp()),
                     "p_target_after": float(logp1[r, tgt].exp())})  # fmt: skip
    return EditEffects(kind=edit.kind, facts=facts, neighbours=pd.DataFrame(rows))
