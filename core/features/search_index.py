"""What a latent search looks in: per latent, the tokens it fires on most and the tokens it promotes most.

Built once from :class:`~interplab.core.features.data.FeatureData`, used by :func:`search_latents` in Python and
shipped to the dashboard, whose search box applies the same rule in the browser (in exported HTML too). A
query finds a latent when the latent's id starts with it (digits), its label (set by hand, or its automatic
explanation) contains it, or one of its
token texts does, case and surrounding spaces aside:

* the tokens it **fires on**: the token at the max of each of its top examples;
* the tokens it **promotes**: its :data:`N_PROMOTED` strongest positive logit effects.

Example
-------
>>> index = search_index(data)
>>> index.find(data, "evening")          # latents firing on, or promoting, a token containing "evening"
>>> index.searched
'id, label, the tokens it fires on most, the 10 tokens it promotes most'
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_positive_int
from .data import FeatureData

#: Promoted tokens per latent a search looks in (its strongest positive logit effects).
N_PROMOTED = 10
#: Kinds of an index entry.
FIRES, PROMOTES = 0, 1


@dataclass(frozen=True)
class SearchIndex:
    """Per latent, its token texts (stripped, lower-cased): ``entries[starts[i]:starts[i+1]]`` index ``texts``
    (each distinct text once), with ``kinds`` (:data:`FIRES` or :data:`PROMOTES`) saying why each is there."""

    texts: list[str]
    starts: np.ndarray  # int32 [d_sae + 1]
    entries: np.ndarray  # int32 [n_entries]
    kinds: np.ndarray  # uint8 [n_entries]
    n_promoted: int

    @property
    def searched(self) -> str:
        """What a search looks in, in words (the dashboard shows it when nothing is found)."""
        return f"id, label, the tokens it fires on most, the {self.n_promoted} tokens it promotes most"

    def token_hits(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """Latents one of whose texts contains ``query`` (already stripped and lower-cased): masks [d_sae] of
        those firing on such a token and of those promoting one."""
        d_sae = self.starts.shape[0] - 1
        hit_text = np.fromiter((query in t for t in self.texts), dtype=bool, count=len(self.texts))
        hit_entry = hit_text[self.entries] if self.entries.size else np.zeros(0, dtype=bool)
        owner = np.repeat(np.arange(d_sae), np.diff(self.starts))
        masks = []
        for kind in (FIRES, PROMOTES):
            mask = np.zeros(d_sae, dtype=bool)
            mask[owner[hit_entry & (self.kinds == kind)]] = True
            masks.append(mask)
        return masks[0], masks[1]

    def find(self, data: FeatureData, query: str) -> np.ndarray:
        """Latent ids (ascending) matching ``query`` by id, label or token text (see the module docstring)."""
        q = query.strip().lower()
        if not q:
            return np.arange(data.d_sae, dtype=np.int64)
        found = np.zeros(data.d_sae, dtype=bool)
        if q.isdigit():
            found |= np.char.startswith(np.arange(data.d_sae).astype(str), q)
        for i, label in data.labels.items():
            found[i] |= q in label.lower()
        for i, record in data.explanations.items():
            found[i] |= q in str(record.get("text", "")).lower()
        fires, promotes = self.token_hits(q)
        return np.flatnonzero(found | fires | promotes).astype(np.int64)


def search_index(data: FeatureData, n_promoted: int = N_PROMOTED) -> SearchIndex:
    """The token texts a search looks in for every latent of ``data`` (see the module docstring).

    >>> search_index(data).searched
    """
    n_promoted = min(check_positive_int("n_promoted", n_promoted), int(data.logit_top_ids.shape[1]))
    fired = np.where(data.top_max > 0, data.top_tokens[:, :, data.lead], -1)
    promoted = np.where(data.logit_top_values[:, :n_promoted] > 0, data.logit_top_ids[:, :n_promoted], -1)
    text_ids: dict[str, int] = {}
    normal: dict[int, int] = {}  # token id -> text id (-1: blank)

    def text_of(token: int) -> int:
        if token not in normal:
            text = data.token_str(token).strip().lower()
            normal[token] = text_ids.setdefault(text, len(text_ids)) if text else -1
        return normal[token]

    starts, entries, kinds = [0], [], []
    for i in range(data.d_sae):
        seen: set[tuple[int, int]] = set()
        for kind, row in ((FIRES, fired[i]), (PROMOTES, promoted[i])):
            for token in row.tolist():
                text = text_of(token) if token >= 0 else -1
                if text >= 0 and (text, kind) not in seen:
                    seen.add((text, kind))
                    entries.append(text)
                    kinds.append(kind)
        starts.append(len(entries))
    return SearchIndex(
        texts=list(text_ids),
        starts=np.asarray(starts, dtype=np.int32),
        entries=np.asarray(entries, dtype=np.int32),
        kinds=np.asarray(kinds, dtype=np.uint8),
        n_promoted=n_promoted,
    )
