"""explain: one explanation per latent from its top examples (activating tokens marked), by any chat model.

The default variant shows the latent's strongest examples with the tokens where it fires marked ``<<so>>``
(delphi's default explainer); ``variant="contrastive"`` adds near-neighbours that do not fire: the strongest
examples of the latents whose decoder directions lie closest, with this latent's activation there unknown but
read as absent.

Example
-------
>>> ex = ilab.autointerp.explain(data, [0, 1, 2])                 # the embedded SmolLM2 explains, offline
>>> ex.texts[0], ex.prompts[0]                                    # the explanation and the prompt it answered
>>> ilab.autointerp.explain(data, [0], explainer="http://127.0.0.1:8080/v1", variant="contrastive")
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..checks import check_float, check_latent, check_positive_int
from .clients import chat_client
from .examples import Example, latent_examples, marked_text, split_examples
from .prompts import conversation, prompts_with

VARIANTS = ("default", "contrastive")


@dataclass
class Explanations:
    """Explanations by latent, with the prompt each answered and who wrote them."""

    texts: dict[int, str]
    prompts: dict[int, str]
    explainer: str
    variant: str
    settings: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Explanations({len(self.texts)} latents, {self.variant}, by {self.explainer!r})"

    def table(self) -> Any:
        """One row per latent: its explanation (pandas)."""
        import pandas as pd

        return pd.DataFrame({"latent": list(self.texts), "explanation": list(self.texts.values())}).set_index("latent")


def check_latents(data: Any, latents: Any) -> list[int]:
    """``latents`` as a list of latent ids of ``data`` that fired; an error naming a bad one, before any work."""
    if isinstance(latents, (int, np.integer)):
        latents = [latents]
    if isinstance(latents, (str, bytes)) or not isinstance(latents, Sequence | np.ndarray) or len(latents) == 0:
        raise ValueError(f"latents={latents!r:.80} must be a non-empty list of latent ids of the feature data.")
    ids = [check_latent(i, int(data.d_sae)) for i in latents]
    dead = [i for i in ids if not data.top_max[i, 0] > 0]
    if dead:
        raise ValueError(f"latents {dead[:5]} never fired in the feature data: they have no examples to explain.")
    return ids


def _block(examples: list[Example], threshold: float) -> str:
    return "\n".join(f"{n + 1}. {marked_text(e.tokens, e.active(threshold))}" for n, e in enumerate(examples))


def _marked_tokens(examples: list[Example], threshold: float, n: int = 5) -> str:
    counts = Counter(t.strip() or t for e in examples for t, on in zip(e.tokens, e.active(threshold)) if on)
    return ", ".join(json.dumps(t, ensure_ascii=False) for t, _ in counts.most_common(n))


def _counter_examples(data: Any, latent: int, n: int) -> list[Example]:
    out: list[Example] = []
    for j in data.neighbour_ids[latent].tolist():
        if 0 <= j < data.d_sae and j != latent and data.top_max[j, 0] > 0:
            out += latent_examples(data, j, "top")[:1]
        if len(out) >= n:
            break
    return out


def explain(
    data: Any,
    latents: Sequence[int] | int,
    explainer: Any = None,
    *,
    variant: str = "default",
    n_examples: int = 8,
    threshold: float = 0.3,
    prompts: Mapping[str, str] | None = None,
    max_new_tokens: int = 30,
) -> Explanations:
    """An explanation of each latent in ``latents`` from its ``n_examples`` strongest examples of ``data``
    (a :class:`~interplab.core.features.FeatureData`), tokens above ``threshold`` x the example's max marked.

    ``explainer``: None (the embedded SmolLM2-135M-Instruct, offline), an embedded model's name, a loaded
    chat model, an OpenAI-compatible server's URL, or a client object (:mod:`.clients`). ``prompts`` overrides
    templates of ``ilab.autointerp.PROMPTS``. The scorers hold out the examples used here (:func:`.score`).
    """
    ids = check_latents(data, latents)
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r:.40} is not known; choose one of {list(VARIANTS)}.")
    n_examples = check_positive_int("n_examples", n_examples)
    threshold = check_float("threshold", threshold, 0.0, 1.0)
    max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
    templates = prompts_with(prompts)
    client = chat_client(explainer)
    conversations = []
    for i in ids:
        shown, _ = split_examples(data, i, n_examples)
        fields = {"examples": _block(shown, threshold), "tokens": _marked_tokens(shown, threshold)}
        key = "explain"
        if variant == "contrastive":
            key, fields["counter"] = "explain_contrastive", _block(_counter_examples(data, i, n_examples // 2), 1.0)
        conversations.append(conversation(templates, key, **fields))
    complete_until = getattr(client, "complete_until", None)
    if complete_until is not None:  # a local model stops once each answer holds its explanation: the same texts
        answers = complete_until(conversations, max_new_tokens, explanation_ended)
    else:
        answers = client.complete(conversations, max_new_tokens)
    texts = {i: _first_line(a) for i, a in zip(ids, answers)}
    shown_prompts = {i: c[-1]["content"] for i, c in zip(ids, conversations)}
    settings = {"n_examples": n_examples, "threshold": threshold, "prompts": templates}
    return Explanations(texts, shown_prompts, client.name, variant, settings)


#: Where an explanation ends inside its line: what small models add after it ("... in the text 1. ...").
_AFTER = r"\.(?:\s|$)| in the text| which | marked "


def _without_lead_in(line: str) -> str:
    return re.sub(r"^(explanation:|answer:|the neuron fires on:?|it fires on:?)\s*", "", line, flags=re.I)


def explanation_ended(answer: str) -> bool:
    """Whether ``answer`` (a prefix of a model's answer) already holds the whole explanation :func:`_first_line`
    reads, so that whatever the model writes next leaves it unchanged: its first line is complete, or holds the end
    of the sentence (a full stop, a space and more) or a marker of :data:`_AFTER`.

    >>> explanation_ended('The neuron fires on the token "way" in the text'), explanation_ended("the U.S")
    (True, False)
    """
    text = answer.strip()  # as the answer is returned: a marker's trailing space must be followed by more
    if "\n" in text:
        return True
    return re.search(_AFTER.replace("|$", ""), _without_lead_in(text)) is not None


def _first_line(answer: str) -> str:
    """The explanation: the answer's first sentence, without a lead-in such as "The neuron fires on" and without
    what small models add after it ("... in the text 1. ...", "... which is ...")."""
    line = next((s.strip() for s in answer.splitlines() if s.strip()), "")
    line = re.split(_AFTER, _without_lead_in(line), maxsplit=1)[0].strip()
    if len(line) > 1 and line[0] == line[-1] and line[0] in "\"'":
        line = line[1:-1]
    return line or "(no explanation)"
