"""Labelled text the project ships: Brown corpus genres from the default corpus, for sparse probing.

The default corpus starts with the 500 Brown samples in catalogue order (``ca01`` .. ``cr09``), so
each sample's genre follows from its index and the catalogue's counts per genre (:data:`BROWN_GENRES`).
:func:`brown_genres` cuts samples into short passages and labels each with a coarse class: press
(A-C), general non-fiction (D-G), learned and government (H, J) or fiction (K-R).

Example
-------
>>> texts, labels = brown_genres(n_per_class=50)
>>> sorted(set(labels))
['fiction', 'general', 'learned', 'press']
"""

from __future__ import annotations

import random

from ..checks import check_positive_int
from ..data.corpus import default_corpus

#: Brown catalogue genres in order, with their sample counts (500 in all).
BROWN_GENRES = [
    ("A", "press: reportage", 44), ("B", "press: editorial", 27), ("C", "press: reviews", 17),
    ("D", "religion", 17), ("E", "skill and hobbies", 36), ("F", "popular lore", 48),
    ("G", "belles-lettres", 75), ("H", "miscellaneous: government", 30), ("J", "learned", 80),
    ("K", "general fiction", 29), ("L", "mystery fiction", 24), ("M", "science fiction", 6),
    ("N", "adventure fiction", 29), ("P", "romance fiction", 29), ("R", "humor", 9),
]  # fmt: skip
COARSE = {"A": "press", "B": "press", "C": "press", "D": "general", "E": "general", "F": "general",
          "G": "general", "H": "learned", "J": "learned", "K": "fiction", "L": "fiction", "M": "fiction",
          "N": "fiction", "P": "fiction", "R": "fiction"}  # fmt: skip
FIRST_SAMPLE = "The Fulton County Grand Jury"  # ca01


def brown_letters() -> list[str]:
    """The genre letter of each of the 500 Brown samples, in corpus order."""
    return [letter for letter, _, n in BROWN_GENRES for _ in range(n)]


def passages(doc: str, n_words: int) -> list[str]:
    """``doc`` cut into passages of about ``n_words`` words (the last partial one dropped)."""
    words = doc.split()
    return [" ".join(words[i : i + n_words]) for i in range(0, len(words) - n_words + 1, n_words)]


def brown_genres(
    n_per_class: int = 60, n_words: int = 60, per_sample: int = 2, seed: int = 0, coarse: bool = True,
    corpus: list[str] | None = None,
) -> tuple[list[str], list[str]]:  # fmt: skip
    """Passages of Brown samples and their genre labels (coarse classes, or the 15 letters with ``coarse=False``).

    Each sample gives at most ``per_sample`` passages of ``n_words`` words; each class at most ``n_per_class``
    passages, drawn with ``seed``.
    """
    for name, value in (("n_per_class", n_per_class), ("n_words", n_words), ("per_sample", per_sample)):
        check_positive_int(name, value)
    docs = default_corpus() if corpus is None else corpus
    if len(docs) < 500 or not docs[0].startswith(FIRST_SAMPLE):
        raise ValueError("The corpus does not start with the 500 Brown samples in catalogue order (ca01 first).")
    by_class: dict[str, list[str]] = {}
    for doc, letter in zip(docs[:500], brown_letters(), strict=True):
        label = COARSE[letter] if coarse else letter
        by_class.setdefault(label, []).extend(passages(doc, n_words)[:per_sample])
    rng = random.Random(seed)
    texts, labels = [], []
    for label in sorted(by_class):
        chosen = by_class[label]
        chosen = rng.sample(chosen, min(n_per_class, len(chosen)))
        texts.extend(chosen)
        labels.extend([label] * len(chosen))
    return texts, labels
