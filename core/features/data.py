"""FeatureData: the plain-data result of :func:`interplab.feature_data` (numpy arrays, no widget code).

Example
-------
>>> data.latent(7)["top"][0]          # strongest example: tokens, per-token acts, where it is
>>> data.table().head()               # one row per latent (pandas)
>>> data.save("dash/"); FeatureData.load("dash/")
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import check_int, check_latent
from ..memory.budget import check_memory
from ..storage.atomic import reads_folder
from ..storage.readers import Fields, FileError, in_folder, inside, load_npy, read_json
from .distinct import distinct_order, gather
from .explanations import check_records, explanation_records, shown_label
from .folder_format import ARRAYS, FORMAT, check_array_headers, check_array_values, write_arrays
from .labels import FILE as LABELS_FILE
from .labels import check_label, read_labels, update_label


@dataclass(repr=False, eq=False)
class FeatureData:
    """Dashboard data for every latent of one SAE. Arrays are indexed by latent first.

    Examples (``top_*``: the highest activations, ``quantile_*``: spread over the activation
    distribution) are windows of ``context`` token ids (-1 = padding) with the example's max at
    index ``lead``; ``*_where`` is (document index, token position) of that max, where a position
    counts BOS as 0. ``*_max`` is sorted descending, 0 for an empty slot. Histograms: linear bins
    from 0 to at least ``max_act`` (the top edge is within 1/8 of it; a dead latent has edges 0..1).
    Logit effects: the decoder row through the final norm's weight and the unembedding (no softcap).
    """

    site: str
    d_sae: int
    n_tokens: int
    context: int
    lead: int
    density: np.ndarray  # [d_sae] fraction of tokens where the latent fired (> 0)
    max_act: np.ndarray  # [d_sae]
    mean_act: np.ndarray  # [d_sae] mean over the tokens where it fired
    hist_edges: np.ndarray  # [d_sae, n_bins + 1]
    hist_counts: np.ndarray  # [d_sae, n_bins]
    top_tokens: np.ndarray  # [d_sae, n_top, context] int32
    top_acts: np.ndarray  # [d_sae, n_top, context] float32
    top_max: np.ndarray  # [d_sae, n_top]
    top_where: np.ndarray  # [d_sae, n_top, 2]
    quantile_tokens: np.ndarray  # [d_sae, n_quantile, context]
    quantile_acts: np.ndarray
    quantile_max: np.ndarray
    quantile_where: np.ndarray
    logit_top_ids: np.ndarray  # [d_sae, n_logit] promoted most
    logit_top_values: np.ndarray
    logit_bottom_ids: np.ndarray  # [d_sae, n_logit] suppressed most (most negative first)
    logit_bottom_values: np.ndarray
    neighbour_ids: np.ndarray  # [d_sae, n_neighbours] by decoder cosine similarity
    neighbour_sims: np.ndarray
    token_strings: dict[int, str] = field(default_factory=dict)
    labels: dict[int, str] = field(default_factory=dict)
    #: Automatic explanations by latent (:mod:`.explanations`); a label set by hand wins over them.
    explanations: dict[int, dict[str, Any]] = field(default_factory=dict)
    model_name: str = ""
    labels_path: str = ""
    complete: bool = True
    config: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage of the pass (not saved)

    # ---------------------------------------------------------------- shapes
    @property
    def n_top(self) -> int:
        """Top-activation examples kept per latent."""
        return int(self.top_max.shape[1])

    @property
    def n_quantile(self) -> int:
        """Examples across the activation range kept per latent."""
        return int(self.quantile_max.shape[1])

    def __repr__(self) -> str:
        state = "" if self.complete else ", partial"
        return f"FeatureData({self.site!r}, {self.d_sae} latents, {self.n_tokens} tokens, n_top={self.n_top}{state})"

    def _index(self, i: Any) -> int:
        return check_latent(i, self.d_sae)

    def token_str(self, token_id: int) -> str:
        """The decoded string of a token id ('' for padding)."""
        token_id = check_int("token id", token_id)
        return "" if token_id < 0 else self.token_strings.get(int(token_id), f"<{token_id}>")

    # ------------------------------------------------------------- one latent
    def distinct_top(self, ids: Any) -> dict[str, np.ndarray]:
        """The top examples of latents ``ids`` a card shows: near-duplicate contexts left out
        (:mod:`~interplab.core.features.distinct`), the rest moved up, empty examples after them.

        >>> data.distinct_top([3])["top_max"][0]      # 0 where an example repeated a stronger one
        """
        idx = np.array([self._index(i) for i in np.asarray(ids).reshape(-1).tolist()], dtype=np.int64)
        order = distinct_order(self.top_tokens[idx], self.top_max[idx], self.lead)
        names = ("top_tokens", "top_acts", "top_max", "top_where")
        return gather({k: getattr(self, k)[idx] for k in names}, order)

    def _examples(self, prefix: str, i: int) -> list[dict[str, Any]]:
        arrays = self.distinct_top([i]) if prefix == "top" else {
            f"{prefix}_{k}": getattr(self, f"{prefix}_{k}")[[i]] for k in ("tokens", "acts", "max", "where")
        }  # fmt: skip
        vals = arrays[f"{prefix}_max"][0]
        out = []
        for j in np.flatnonzero(vals > 0):
            ids = arrays[f"{prefix}_tokens"][0, j]
            where = arrays[f"{prefix}_where"][0, j]
            out.append(
                {
                    "max": float(vals[j]),
                    "doc": int(where[0]),
                    "pos": int(where[1]),
                    "token_ids": ids.tolist(),
                    "tokens": [self.token_str(t) for t in ids.tolist()],
                    "acts": arrays[f"{prefix}_acts"][0, j].tolist(),
                }
            )
        return out

    def latent(self, i: int) -> dict[str, Any]:
        """One latent's card as plain Python data (lists, str, float).

        >>> card = data.latent(7); card["density"], card["logits"]["top"][:3]
        """
        i = self._index(i)
        logits = {
            side: [
                (self.token_str(t), float(v))
                for t, v in zip(
                    getattr(self, f"logit_{side}_ids")[i].tolist(), getattr(self, f"logit_{side}_values")[i].tolist()
                )
            ]
            for side in ("top", "bottom")
        }
        return {
            "id": i,
            "label": self.labels.get(i, ""),
            "suggested_label": self.suggest_label(i),
            "explanation": dict(self.explanations.get(i, {})),
            "shown_label": shown_label(self.labels, self.explanations, i),
            "density": float(self.density[i]),
            "max_act": float(self.max_act[i]),
            "mean_act": float(self.mean_act[i]),
            "hist": {"edges": self.hist_edges[i].tolist(), "counts": self.hist_counts[i].tolist()},
            "top": self._examples("top", i),
            "quantiles": self._examples("quantile", i),
            "logits": logits,
            "neighbours": [(int(n), float(s)) for n, s in zip(self.neighbour_ids[i], self.neighbour_sims[i])],
            "lead": self.lead,
        }

    def max_tokens(self, i: int) -> list[str]:
        """The token at the max of each top example of latent ``i``."""
        i = self._index(i)
        return [self.token_str(t) for t, v in zip(self.top_tokens[i, :, self.lead], self.top_max[i]) if v > 0]

    def suggest_label(self, i: int) -> str:
        """A short label from the tokens it fires on and the tokens it promotes, e.g. "' Paris'/' London' → ' is'"."""
        i = self._index(i)
        fired = Counter(self.max_tokens(i)).most_common()
        if not fired:
            fires = "never fired"
        elif fired[0][1] * 2 >= sum(c for _, c in fired):
            fires = repr(fired[0][0])
        else:
            fires = "/".join(repr(t) for t, _ in fired[:3])
        promotes = ", ".join(repr(self.token_str(t)) for t in self.logit_top_ids[i, :3].tolist())
        return f"{fires} → {promotes}" if promotes else fires

    def set_label(self, i: int, text: str, save: bool = True) -> None:
        """Label latent ``i`` (an empty text removes the label) and save the labels beside the SAE."""
        i = self._index(i)
        check_label(text)
        if text.strip():
            self.labels[i] = text.strip()
        else:
            self.labels.pop(i, None)
        if save and self.labels_path:
            update_label(Path(self.labels_path), i, text)

    def set_explanations(self, explained: Any, scores: Any = None, scorer: str = "detection",
                         metric: str = "auroc") -> None:  # fmt: skip
        """Keep ``ilab.autointerp.explain``'s explanations (and ``score``'s ``scorer`` ``metric`` with its baselines)
        with this data: shown on the dashboard's cards and list, searched, saved. Hand labels win over them.

        >>> data.set_explanations(explained, scores); data.explanations[7]["score"]
        """
        records = explanation_records(explained, scores, scorer, metric)
        for i in records:
            self._index(i)
        self.explanations = {**self.explanations, **records}

    def to_neuronpedia(self, folder: str | Path, model_id: str | None = None, sae_set: str = "interplab",
                       dataset: str = "", batch_size: int = 128) -> list[Path]:  # fmt: skip
        """Write this data as Neuronpedia imports it (:mod:`.neuronpedia`: SAEDashboard's batch layout, and the
        automatic explanations with their scores); returns the files written inside ``folder``.

        >>> data.to_neuronpedia("np/", model_id="gemma-3-270m", sae_set="interplab-res")
        """
        from .neuronpedia import to_neuronpedia

        return to_neuronpedia(self, folder, model_id, sae_set, dataset, batch_size)

    # ----------------------------------------------------------------- table
    def table(self) -> Any:
        """One row per latent: label, density, max_act, mean_act, top promoted and suppressed tokens (pandas); the
        automatic explanation and its score too when the data has explanations."""
        import pandas as pd

        def joined(ids: np.ndarray) -> list[str]:
            return [" ".join(repr(self.token_str(t)) for t in row[:5]) for row in ids.tolist()]

        explained = {}
        if self.explanations:
            records = [self.explanations.get(i, {}) for i in range(self.d_sae)]
            explained = {"explanation": [r.get("text", "") for r in records],
                         "explanation_score": [r.get("score") for r in records]}  # fmt: skip
        return pd.DataFrame(
            {
                "label": [self.labels.get(i, "") for i in range(self.d_sae)],
                "density": self.density,
                "max_act": self.max_act,
                "mean_act": self.mean_act,
                "promotes": joined(self.logit_top_ids),
                "suppresses": joined(self.logit_bottom_ids),
                **explained,
            },
            index=pd.RangeIndex(self.d_sae, name="latent"),
        )

    def attach(self, sae: Any) -> FeatureData:
        """Keep labels where ``sae``'s are kept (beside it, or in the cache): the SAE this data was made from.

        Its saved labels become this data's; refused when the data was made from another SAE.
        """
        from .labels import labels_path

        made_from = self.config.get("sae")
        if made_from and sae.fingerprint() != made_from:
            raise ValueError(
                f"This feature data was made from SAE {made_from}, not from this one ({sae.fingerprint()}); "
                "its labels would go to the wrong SAE."
            )
        path = labels_path(sae)
        self.labels_path = str(path)
        if path.exists():
            self.labels = read_labels(path, self.d_sae)
        return self

    # ------------------------------------------------------------- save/load
    def save(self, path: str | Path) -> Path:
        """Write a folder of ``meta.json`` + one ``.npy`` per array, atomically (temp folder, then rename).

        Labels are saved in ``meta.json``; where they are kept for editing is never saved as a path
        (a shared folder must not point anywhere): see :meth:`load`.
        """
        meta = {
            "format": FORMAT,
            "version": 2,
            "site": self.site,
            "d_sae": self.d_sae,
            "n_tokens": self.n_tokens,
            "context": self.context,
            "lead": self.lead,
            "model_name": self.model_name,
            "complete": self.complete,
            "config": self.config,
            "token_strings": {str(k): v for k, v in self.token_strings.items()},
            "labels": {str(k): v for k, v in self.labels.items()},
            "explanations": {str(k): v for k, v in self.explanations.items()},
        }
        root = Path(path)
        own = root / LABELS_FILE
        extra = {LABELS_FILE: own.read_bytes()} if own.is_file() and not own.is_symlink() else {}
        write_arrays(root, meta, {name: getattr(self, name) for name in ARRAYS}, extra)
        return root

    @classmethod
    @reads_folder("path")
    def load(cls, path: str | Path, sae: Any = None) -> FeatureData:
        """Load a folder written by :meth:`save`, every field and array header checked before anything is read.

        Labels: those saved with the data, or those of ``labels.json`` inside this folder when it is
        there (edits of a loaded copy are kept there). With ``sae`` (the SAE the data was made from)
        they are kept where that SAE's are, whose labels file then is the reference (see :meth:`attach`).
        No path stored in the folder is ever followed.
        """
        root = Path(path)
        file = in_folder(root, "meta.json")
        if not file.exists():
            raise FileNotFoundError(f"{str(root)!r} holds no feature data (no meta.json).")
        meta = Fields(file, read_json(file))
        if meta.raw("format", None) != FORMAT:
            raise FileError(file, "format", f"is {meta.raw('format', None)!r}, not interplab feature data")
        d_sae = meta.int("d_sae", minimum=1)
        context = meta.int("context", minimum=1)
        config = meta.obj("config", {})
        known = {key: config.int(key, None, minimum=1) for key in ("n_top", "n_quantile", "n_bins", "n_logit")}
        infos = check_array_headers(root, d_sae, context, {k: v for k, v in known.items() if v is not None})
        check_memory(f"Loading feature data from {str(root)!r}", sum(i.nbytes for i in infos.values()))
        arrays: dict[str, Any] = {name: load_npy(in_folder(root, f"{name}.npy"), info) for name, info in infos.items()}
        strings = meta.str_map("token_strings")
        labels = {k: v for k, v in meta.str_map("labels", {}).items() if 0 <= k < d_sae}
        check_array_values(root, d_sae, arrays, strings, labels)
        data = cls(
            site=meta.str("site"), d_sae=d_sae, n_tokens=meta.int("n_tokens", minimum=0), context=context,
            lead=meta.int("lead", minimum=0, maximum=context - 1), **arrays,
            token_strings={k: v for k, v in strings.items() if k >= 0},
            labels=labels, model_name=meta.str("model_name", ""),
            explanations=check_records(file, meta.raw("explanations", {}), d_sae),
            complete=meta.bool("complete", True), config=config.data,
        )  # fmt: skip
        if sae is not None:
            return data.attach(sae)
        own = inside(root, LABELS_FILE, file, "labels file")
        data.labels_path = str(own)
        if own.is_file():
            data.labels = read_labels(own, d_sae)  # edits made after the save
        return data
