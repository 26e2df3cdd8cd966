"""Examples of a latent as text: its windows from :class:`~interplab.core.features.FeatureData`, activating tokens
marked ``<<like this>>``; the held-out examples a scorer reads and the non-activating ones it contrasts them with.

Example
-------
>>> from interplab.core.autointerp.examples import latent_examples, marked_text
>>> top = latent_examples(data, 7, "top")
>>> marked_text(top[0].tokens, top[0].acts > 0.3 * top[0].acts.max())
'the city of<< Paris>> is'
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .prompts import MARK_CLOSE, MARK_OPEN


@dataclass(frozen=True)
class Example:
    """One window of text: its token strings and the latent's activation at each (0 for a non-activating one)."""

    tokens: list[str]
    acts: np.ndarray  # [L] float32

    @property
    def text(self) -> str:
        """The window's text, unmarked."""
        return "".join(self.tokens)

    def active(self, threshold: float) -> np.ndarray:
        """[L] bool: where the activation exceeds ``threshold`` times this window's maximum (none if it is 0)."""
        peak = float(self.acts.max(initial=0.0))
        return self.acts > threshold * peak if peak > 0 else np.zeros(len(self.tokens), dtype=bool)


def latent_examples(data: object, latent: int, kind: str) -> list[Example]:
    """The ``kind`` ("top" or "quantile") examples of ``latent`` with a positive maximum, padding left out."""
    tokens_KL = getattr(data, f"{kind}_tokens")[latent]
    acts_KL = getattr(data, f"{kind}_acts")[latent]
    maxes_K = getattr(data, f"{kind}_max")[latent]
    out = []
    for ids, acts, peak in zip(tokens_KL, acts_KL, maxes_K):
        if peak <= 0:
            continue
        keep = ids >= 0
        strings = [data.token_str(int(t)) for t in ids[keep]]  # type: ignore[attr-defined]
        out.append(Example(strings, np.asarray(acts[keep], dtype=np.float32)))
    return out


def marked_text(tokens: list[str], marks: np.ndarray) -> str:
    """The tokens joined with each run of marked tokens between ``<<`` and ``>>``."""
    parts: list[str] = []
    inside = False
    for token, marked in zip(tokens, marks.tolist()):
        if marked and not inside:
            parts.append(MARK_OPEN)
        elif not marked and inside:
            parts.append(MARK_CLOSE)
        inside = bool(marked)
        parts.append(token)
    if inside:
        parts.append(MARK_CLOSE)
    return "".join(parts)


def split_examples(data: object, latent: int, n_explain: int) -> tuple[list[Example], list[Example]]:
    """(the examples an explainer reads: the first ``n_explain`` top ones; the held-out ones a scorer reads: the
    other top ones and the quantile ones). With too few examples to hold any out, the scorer reads them all."""
    top = latent_examples(data, latent, "top")
    held = top[n_explain:] + latent_examples(data, latent, "quantile")
    return top[:n_explain], held or top


def negative_examples(data: object, latent: int, n: int, rng: np.random.Generator) -> list[Example]:
    """``n`` windows from other latents' top examples, read as non-activating for ``latent`` (activations 0).

    A sparse latent seldom fires in another latent's strongest contexts; these stand in for the random corpus
    windows of delphi's detection scorer, which feature data does not keep.
    """
    others = [j for j in range(int(data.d_sae)) if j != latent and data.top_max[j, 0] > 0]  # type: ignore[attr-defined]
    out: list[Example] = []
    while others and len(out) < n:
        for j in rng.permutation(others).tolist()[: n - len(out)]:
            found = latent_examples(data, j, "top")
            example = found[int(rng.integers(len(found)))]
            out.append(Example(example.tokens, np.zeros(len(example.tokens), dtype=np.float32)))
    return out
