"""The prompts of automated interpretability, as data: shown by ``ilab.autointerp.PROMPTS``, overridable per call.

Each is a ``str.format`` template. ``explain`` fills ``{examples}`` (numbered, marked), ``{tokens}`` (the marked
tokens, most frequent first) and ``{counter}`` (the contrastive variant's non-activating texts); the scorers fill
``{explanation}`` and ``{text}``. Activating tokens are marked ``<<like this>>``.

Example
-------
>>> from interplab.core.autointerp.prompts import PROMPTS, prompts_with
>>> print(PROMPTS["explain"])
>>> mine = prompts_with({"constant": "punctuation"})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MARK_OPEN, MARK_CLOSE = "<<", ">>"

PROMPTS: dict[str, str] = {
    "system": (
        "You are a careful researcher explaining what makes one neuron of a language model fire. "
        "Answer briefly and exactly as asked."
    ),
    "explain": (
        "A neuron fires on the tokens marked between << and >> in these texts:\n\n{examples}\n\n"
        "The marked tokens are: {tokens}.\n\nIn a short phrase, what does the neuron fire on?"
    ),
    "explain_contrastive": (
        "A neuron fires on the tokens marked between << and >> in these texts:\n\n{examples}\n\n"
        "The marked tokens are: {tokens}.\n\nIt does not fire anywhere in these similar texts:\n\n{counter}\n\n"
        "In a short phrase, what does the neuron fire on?"
    ),
    "detection": (
        "A neuron fires on: {explanation}\n\nText: {text}\n\n"
        "Does the neuron fire anywhere in this text? Answer Yes or No."
    ),
    "fuzzing": (
        "A neuron fires on: {explanation}\n\nIn this text some tokens are marked between << and >>:\n{text}\n\n"
        "Are the marked tokens the ones this neuron fires on? Answer Yes or No."
    ),
    "simulation": (
        "A neuron fires on: {explanation}\n\n"
        "For each token below, give how strongly the neuron fires on it, from 0 (not at all) to 9 (strongest), "
        "as the token, a tab and one digit per line."
    ),
    #: The constant-explanation baseline: the same text for every latent.
    "constant": "common words in English text",
}


def prompts_with(overrides: Mapping[str, str] | None) -> dict[str, str]:
    """:data:`PROMPTS` with ``overrides`` in place; an error naming an unknown key or a non-string value."""
    merged = dict(PROMPTS)
    if overrides is None:
        return merged
    if not isinstance(overrides, Mapping):
        raise TypeError(f"prompts must be a dict of templates, got {type(overrides).__name__}.")
    for key, value in overrides.items():
        if key not in PROMPTS:
            raise ValueError(f"prompts has an unknown key {key!r}; the prompts are {sorted(PROMPTS)}.")
        if not isinstance(value, str):
            raise TypeError(f"prompts[{key!r}] must be a str template, got {type(value).__name__}.")
        merged[key] = value
    return merged


def conversation(prompts: Mapping[str, str], key: str, **fields: Any) -> list[dict[str, str]]:
    """The chat messages of prompt ``key`` filled with ``fields``, after the system prompt."""
    return [{"role": "system", "content": prompts["system"]},
            {"role": "user", "content": prompts[key].format(**fields)}]  # fmt: skip
