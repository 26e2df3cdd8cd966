"""The seed paper's interpretability measure: how well single latents align with single IOI attribute values.

Each attribute value (``io=Mary``, ``s=John``, ``order=ABBA``, ...) is a yes/no label of a prompt, and each latent
of a dictionary a score of it at the site and position (an SAE: its activation; the supervised dictionary: the
coefficient of each feature, read from the activation alone by :meth:`SupervisedDictionary.encode`). For each value
the latent of best AUROC on the **fitting** prompts is chosen and its AUROC on the **held-out** prompts reported; a
dictionary's *interpretability* is that held-out AUROC averaged over values. The control is the same measure
with each attribute's labels shuffled across prompts (within each split): it must sit near 0.5.

Example
-------
>>> pairs = ilab.patching.ioi_balanced(model)
>>> fit, held = ilab.das.split_ioi(pairs, held_out=0.25)
>>> sup = ilab.das.supervised_dictionary(model, fit, "blocks.12.hook_resid_post")
>>> ilab.das.latent_alignment(model, fit, held, "blocks.12.hook_resid_post", {"supervised": sup, "suite": sae}).summary
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..checks import check_fraction, check_int
from ..patching.prompts import PromptPairs
from ..saes import SAE
from ..views.charts import offline
from .controllability import ATTRIBUTES
from .dictionaries import SupervisedDictionary, check_same_values, ioi_attributes
from .intervene import check_positions, source_values

if TYPE_CHECKING:
    from ..model.model import Model

Dictionary = SAE | SupervisedDictionary


def _take(pairs: PromptPairs, idx: list[int]) -> PromptPairs:
    return PromptPairs(*([getattr(pairs, f)[i] for i in idx] for f in ("clean", "corrupt", "answers", "wrong")))


def split_ioi(pairs: PromptPairs, held_out: float = 0.25, seed: int = 0) -> tuple[PromptPairs, PromptPairs]:
    """``(fit, held)``: IOI prompts split by prompt, ``held_out`` of them (rounded) drawn by ``seed``, then moved
    between the halves until every IO name, subject name and order is in both; a value that cannot be (a single
    prompt of it) is a ValueError naming it.

    >>> fit, held = ilab.das.split_ioi(ilab.patching.ioi_balanced(model), held_out=0.15, seed=0)
    """
    attrs = ioi_attributes(pairs)
    held_out = check_fraction("held_out", held_out)
    order = list(range(len(pairs)))
    random.Random(check_int("seed", seed, minimum=0)).shuffle(order)
    n_held = min(len(pairs) - 1, max(1, round(held_out * len(pairs))))
    held, fit = order[:n_held], order[n_held:]
    for a in ATTRIBUTES:
        for value in sorted({row[a] for row in attrs}):
            for give, take in ((fit, held), (held, fit)):
                if any(attrs[i][a] == value for i in take):
                    continue
                movable = [i for i in give if attrs[i][a] == value and _spare(attrs, give, i)]
                if movable:  # the first prompt of the value whose other values stay in ``give``
                    give.remove(movable[0])
                    take.append(movable[0])
    check_same_values(*({a: {attrs[i][a] for i in part} for a in ATTRIBUTES} for part in (fit, held)))
    return _take(pairs, sorted(fit)), _take(pairs, sorted(held))


def _spare(attrs: list[dict[str, str]], part: list[int], i: int) -> bool:
    """Whether every value of prompt ``i`` is also held by another prompt of ``part``."""
    return all(any(attrs[j][a] == attrs[i][a] for j in part if j != i) for a in ATTRIBUTES)


def auroc(scores_NF: np.ndarray, labels_N: np.ndarray) -> np.ndarray:
    """[F]: each column's AUROC at telling ``labels_N`` (bool) apart, ties counted half (Mann-Whitney U)."""
    from scipy.stats import rankdata

    pos = int(labels_N.sum())
    neg = len(labels_N) - pos
    ranks_NF = rankdata(scores_NF, axis=0)
    return (ranks_NF[labels_N].sum(0) - pos * (pos + 1) / 2) / (pos * neg)


def _codes(dictionary: Dictionary, x_ND: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        if isinstance(dictionary, SAE):
            return dictionary.encode(x_ND.to(dictionary.W_dec.dtype)).float().cpu().numpy()
        return dictionary.encode(x_ND).cpu().numpy()


def _latent_names(dictionary: Dictionary) -> list[str]:
    if isinstance(dictionary, SAE):
        return [str(i) for i in range(dictionary.d_sae)]
    return [f"{a}={v}" for a, v in dictionary.latents]


@dataclass(repr=False)
class LatentAlignment:
    """``table``: per dictionary and attribute value, the chosen latent, its fitting and held-out AUROC and the same
    with shuffled labels; ``summary``: per dictionary, ``interpretability`` (mean held-out AUROC) and ``shuffled``."""

    site: str
    position: int
    table: Any

    @property
    def summary(self) -> Any:
        """Per dictionary: the held-out AUROC and its shuffled-label control, averaged over attribute values."""
        out = self.table.groupby("dictionary", sort=False)[["held_auroc", "shuffled_auroc"]].mean()
        return out.rename(columns={"held_auroc": "interpretability", "shuffled_auroc": "shuffled"}).reset_index()

    def chart(self) -> Any:
        """Altair: each dictionary's interpretability beside its shuffled-label control."""
        import altair as alt

        bars = self.summary.melt("dictionary", ["interpretability", "shuffled"], var_name="labels",
                                 value_name="auroc")  # fmt: skip
        return offline(
            alt.Chart(bars).mark_bar().encode(
                x=alt.X("labels:N", title=None), y=alt.Y("auroc:Q", scale=alt.Scale(domain=[0, 1]),
                                                         title="best single latent's held-out AUROC"),
                color="labels:N", column=alt.Column("dictionary:N", title=None),
            ).properties(width=90, height=200, title=f"Latents against IOI attribute values at {self.site}")
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"LatentAlignment({self.site} at position {self.position}):\n{self.summary.to_string(index=False)}"

    def _repr_html_(self) -> str:
        return self.summary.to_html(index=False)


def _shuffled(attrs: list[dict[str, str]], rng: np.random.Generator) -> list[dict[str, str]]:
    """``attrs`` with each attribute's column permuted across prompts."""
    columns = {a: [attrs[i][a] for i in rng.permutation(len(attrs))] for a in ATTRIBUTES}
    return [{a: columns[a][n] for a in ATTRIBUTES} for n in range(len(attrs))]


def _check_dictionaries(dictionaries: Any, site: str, d: int) -> dict[str, Dictionary]:
    if not isinstance(dictionaries, Mapping) or not dictionaries:
        raise TypeError(f"dictionaries must be a non-empty dict of name -> SAE or SupervisedDictionary, "
                        f"got {dictionaries!r}.")  # fmt: skip
    for name, dic in dictionaries.items():
        if isinstance(dic, SAE) and dic.W_dec.shape[1] != d:
            raise ValueError(f"dictionaries[{name!r}] writes {dic.W_dec.shape[1]} dimensions but {site} has {d}.")
        if isinstance(dic, SupervisedDictionary) and dic.site != site:
            raise ValueError(f"dictionaries[{name!r}] was fitted at {dic.site}, not at {site}.")
        if not isinstance(dic, (SAE, SupervisedDictionary)):
            raise TypeError(f"dictionaries[{name!r}] must be an SAE or a SupervisedDictionary, "
                            f"got {type(dic).__name__}.")  # fmt: skip
    return dict(dictionaries)


def latent_alignment(model: Model, fit_pairs: PromptPairs, held_pairs: PromptPairs, site: str,
                     dictionaries: Mapping[str, Dictionary], position: int = -1, seed: int = 0
                     ) -> LatentAlignment:  # fmt: skip
    """The interpretability measure of each dictionary at ``site``: for each attribute value, the latent best at
    telling it apart on ``fit_pairs`` and its AUROC on ``held_pairs``, with the shuffled-label control (``seed``).
    Every value of one split must be in the other (checked before any forward pass).

    >>> ilab.das.latent_alignment(model, fit, held, "blocks.12.hook_resid_post", {"topk": topk}).chart()
    """
    import pandas as pd

    fit_attrs, held_attrs = ioi_attributes(fit_pairs), ioi_attributes(held_pairs)
    check_same_values(*({a: {row[a] for row in rows} for a in ATTRIBUTES} for rows in (fit_attrs, held_attrs)))
    parsed = model.parse_site(site)
    dictionaries = _check_dictionaries(dictionaries, parsed.name, model.site_dim(parsed.name))
    position = check_positions(model, [*fit_pairs.clean, *held_pairs.clean], position, "IOI")[0]
    rng = np.random.default_rng(check_int("seed", seed, minimum=0))
    labels = {"true": (fit_attrs, held_attrs), "shuffled": (_shuffled(fit_attrs, rng), _shuffled(held_attrs, rng))}
    x_fit, x_held = (
        source_values(model, parsed.name, p.clean, [position])[:, 0].float() for p in (fit_pairs, held_pairs)
    )
    rows = []
    for name, dic in dictionaries.items():
        codes_fit, codes_held, names = _codes(dic, x_fit), _codes(dic, x_held), _latent_names(dic)
        for a in ATTRIBUTES:
            for value in sorted({row[a] for row in fit_attrs}):
                row: dict[str, Any] = {"dictionary": name, "attribute": a, "value": value}
                for kind, (fit_rows, held_rows) in labels.items():
                    fit_scores = auroc(codes_fit, np.array([r[a] == value for r in fit_rows]))
                    best = int(np.nan_to_num(fit_scores, nan=0.0).argmax())
                    held = auroc(codes_held[:, best : best + 1], np.array([r[a] == value for r in held_rows]))[0]
                    if kind == "true":
                        row.update({"latent": names[best], "fit_auroc": float(fit_scores[best]),
                                    "held_auroc": float(held)})  # fmt: skip
                    else:
                        row["shuffled_auroc"] = float(held)
                rows.append(row)
    return LatentAlignment(parsed.name, position, pd.DataFrame(rows))
