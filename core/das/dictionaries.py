"""Supervised dictionaries for IOI: attribute-conditional mean features, judged by interventions, beside SAEs.

With knowledge of the task, the activation of each IOI prompt at a site and position is written as
``x ~ mean + u[io][IO name] + u[s][subject name] + u[order][ABBA or BABA]``, each ``u`` the mean of the
prompts with that value minus the overall mean. Two of the seed paper's comparisons, for this supervised
dictionary and for any SAE (its reconstruction ``decode(encode(x))``), measured by writing vectors into
the site inside a trace (the interventions of :mod:`.intervene`, remote-safe):

* **sufficiency**: the share of the clean logit difference (IO - S) left when the activation is replaced by
  the dictionary's reconstruction;
* **necessity**: the share of it lost when the reconstruction's part (minus its mean) is removed;
* **sparse controllability** (:mod:`.controllability`): the share of attribute edits that succeed when
  k latents are changed, as k grows.

Example
-------
>>> pairs = ilab.patching.ioi(model, n=32, order="mixed")
>>> result = ilab.das.compare_dictionaries(model, pairs, "blocks.12.hook_resid_post", saes={"suite": sae})
>>> result.table, result.controllability, result.chart()
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..checks import check_int
from ..patching.prompts import PromptPairs
from ..saes import SAE
from ..views.charts import offline
from .controllability import ATTRIBUTES, check_ks, controllability
from .intervene import Prepared, check_positions, evaluate, source_values
from .pairs import label_ids

if TYPE_CHECKING:
    from ..model.model import Model


def ioi_attributes(pairs: PromptPairs) -> list[dict[str, str]]:
    """Each clean prompt's IO name, subject name and order (``ABBA``: the IO is named first)."""
    if not isinstance(pairs, PromptPairs):
        raise TypeError(f"pairs must be IOI PromptPairs (ilab.patching.ioi), got {type(pairs).__name__}.")
    out = []
    for text, io, s in zip(pairs.clean, pairs.answers, pairs.wrong, strict=True):
        first_io, first_s = text.find(io.strip()), text.find(s.strip())
        if first_io < 0 or first_s < 0:
            raise ValueError(f"The names {io!r} and {s!r} are not both in the prompt {text!r}.")
        out.append({"io": io.strip(), "s": s.strip(), "order": "ABBA" if first_io < first_s else "BABA"})
    return out


@dataclass
class SupervisedDictionary:
    """``mean_D`` and, per attribute, one feature per value (``features[attribute][value]`` [d])."""

    site: str
    mean_D: torch.Tensor
    features: dict[str, dict[str, torch.Tensor]]

    def reconstruct(self, attributes: list[dict[str, str]]) -> torch.Tensor:
        """[N, d]: the mean plus each prompt's features."""
        rows = []
        for attrs in attributes:
            for a in ATTRIBUTES:
                if attrs.get(a) not in self.features[a]:
                    known = sorted(self.features[a])
                    raise ValueError(f"{a}={attrs.get(a)!r} has no feature; this dictionary knows {known}.")
            rows.append(self.mean_D + sum(self.features[a][attrs[a]] for a in ATTRIBUTES))
        return torch.stack(rows)

    @property
    def latents(self) -> list[tuple[str, str]]:
        """``(attribute, value)`` of each feature, in the order of :attr:`W_FD`'s rows."""
        return [(a, v) for a in ATTRIBUTES for v in self.features[a]]

    @property
    def W_FD(self) -> torch.Tensor:
        """[F, d]: the features as rows, in the order of :attr:`latents`."""
        return torch.stack([self.features[a][v] for a, v in self.latents])

    def encode(self, x_ND: torch.Tensor) -> torch.Tensor:
        """[N, F]: each activation's coefficient on each feature, ``(x - mean) . u / ||u||^2`` (1 when ``x - mean``
        is the feature itself), read from the activation alone, without its labels."""
        if not isinstance(x_ND, torch.Tensor) or x_ND.shape[-1] != self.mean_D.shape[0]:
            got = tuple(x_ND.shape) if isinstance(x_ND, torch.Tensor) else type(x_ND).__name__
            raise ValueError(f"x_ND must be activations [N, {self.mean_D.shape[0]}] of {self.site}, got {got}.")
        W_FD = self.W_FD.to(x_ND.device)
        return (x_ND.float() - self.mean_D.to(x_ND.device)) @ W_FD.T / W_FD.norm(dim=1).clamp_min(1e-12) ** 2

    def randomized(self, seed: int = 0) -> SupervisedDictionary:
        """The control of the same size: the same mean and values, each feature a random direction of its norm.

        >>> control = sup.randomized(seed=1)
        """
        gen = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
        features: dict[str, dict[str, torch.Tensor]] = {}
        for a, feats in self.features.items():
            features[a] = {}
            for v, u in feats.items():
                r = torch.randn(u.shape, generator=gen)
                features[a][v] = (r / r.norm() * u.float().norm().cpu()).to(u.device, u.dtype)
        return SupervisedDictionary(self.site, self.mean_D.clone(), features)


def check_same_values(fit: Mapping[str, set[str]], held: Mapping[str, set[str]]) -> None:
    """Every attribute value of the fitting prompts in the held-out ones and the reverse, or a ValueError naming it."""
    for a in ATTRIBUTES:
        unseen = sorted(held[a] - fit[a])
        if unseen:
            raise ValueError(f"{a}={unseen[0]!r} of pairs is never in fit_pairs, which has {sorted(fit[a])}: "
                             "fit on prompts with every value.")  # fmt: skip
        missing = sorted(fit[a] - held[a])
        if missing:
            raise ValueError(f"{a}={missing[0]!r} is in fit_pairs but never in the held-out pairs, which have "
                             f"{sorted(held[a])}: split with every value in both (ilab.das.split_ioi).")  # fmt: skip


def supervised_dictionary(model: Model, pairs: PromptPairs, site: str, position: int = -1) -> SupervisedDictionary:
    """Attribute-conditional means of the clean prompts' activations at ``site`` and ``position``."""
    attrs = ioi_attributes(pairs)
    parsed = model.parse_site(site)
    x_ND = source_values(model, parsed.name, pairs.clean, [position])[:, 0].float()
    mean_D = x_ND.mean(0)
    features = {}
    for a in ATTRIBUTES:
        values = sorted({row[a] for row in attrs})
        features[a] = {v: x_ND[[row[a] == v for row in attrs]].mean(0) - mean_D for v in values}
    return SupervisedDictionary(parsed.name, mean_D, features)


def _logit_diff(model: Model, pairs: PromptPairs, site: str, position: int, new_ND: torch.Tensor) -> float:
    """Mean IO - S logit difference of the clean prompts with ``new_ND`` written at the site and position."""
    prep = Prepared(site, [position], [model.to_tokens(t)["input_ids"][0] for t in pairs.clean], new_ND[:, None],
                    label_ids(model, pairs.answers), label_ids(model, pairs.wrong))  # fmt: skip
    return evaluate(model, prep, torch.arange(len(pairs)), None)["logit_diff"]


@dataclass(repr=False)
class DictionaryComparison:
    """The seed's three comparisons at one site: ``table`` (dictionary, sufficiency, necessity) and
    ``controllability`` (dictionary, attribute, k, success, n_edits)."""

    site: str
    position: int
    table: Any
    controllability: Any

    def chart(self) -> Any:
        """Altair: sufficiency and necessity as bars, then the share of successful edits by k per attribute."""
        import altair as alt

        bars = self.table.melt("dictionary", ["sufficiency", "necessity"], var_name="measure", value_name="share")
        left = (
            alt.Chart(bars)
            .mark_bar()
            .encode(
                x=alt.X("dictionary:N", title=None),
                y=alt.Y("share:Q", title="share of the logit difference"),
                color="dictionary:N",
                column=alt.Column("measure:N", title=None),
            )
            .properties(width=110, height=200)
        )
        lines = alt.Chart(self.controllability.dropna(subset=["success"])).mark_line(point=True).encode(
            x=alt.X("k:Q", scale=alt.Scale(type="log", base=2), title="latents changed (k)"),
            y=alt.Y("success:Q", scale=alt.Scale(domain=[0, 1]), title="edits that succeed"),
            color="dictionary:N", column=alt.Column("attribute:N", title="sparse controllability"),
        ).properties(width=140, height=200)  # fmt: skip
        return offline(alt.vconcat(left, lines).properties(title=f"Supervised dictionary vs SAEs at {self.site}"))

    def __repr__(self) -> str:
        return (
            f"DictionaryComparison({self.site} at position {self.position}):\n{self.table.to_string(index=False)}\n"
            f"{self.controllability.to_string(index=False)}"
        )

    def _repr_html_(self) -> str:
        return self.table.to_html(index=False) + self.controllability.to_html(index=False)


def compare_dictionaries(model: Model, pairs: PromptPairs, site: str, saes: Mapping[str, SAE] | None = None,
                         position: int = -1, ks: Sequence[int] = (1, 2, 4, 8), fit_pairs: PromptPairs | None = None,
                         dictionary: SupervisedDictionary | None = None) -> DictionaryComparison:  # fmt: skip
    """Sufficiency, necessity and sparse controllability (``ks``: latents changed) of the supervised dictionary
    and of each SAE at ``site``; bad input (an SAE of another width, k < 1, k larger than a dictionary, a value of
    ``pairs`` that ``fit_pairs`` never shows) is refused before any forward pass.

    ``fit_pairs``: the prompts the supervised dictionary is fitted on (default ``pairs``); give other prompts
    with the same names to evaluate it on held-out prompts (:func:`~.alignment.split_ioi`), every value of one
    present in the other. ``dictionary``: an already fitted one (or its :meth:`~SupervisedDictionary.randomized`
    control) in place of fitting.

    >>> ilab.das.compare_dictionaries(model, pairs, "blocks.12.hook_resid_post", {"suite": sae}, ks=[1, 4]).chart()
    """
    import pandas as pd

    saes = dict(saes or {})
    for name, sae in saes.items():
        if not isinstance(sae, SAE):
            raise TypeError(f"saes[{name!r}] must be an interplab SAE, got {type(sae).__name__}.")
    attrs = ioi_attributes(pairs)
    parsed = model.parse_site(site)
    d = model.site_dim(parsed.name)
    for name, sae in saes.items():
        if sae.W_dec.shape[1] != d:
            raise ValueError(f"saes[{name!r}] writes {sae.W_dec.shape[1]} dimensions but {parsed.name} has {d}.")
    position = check_positions(model, pairs.clean, position, "clean")[0]
    if dictionary is not None and fit_pairs is not None:
        raise ValueError("Give fit_pairs (to fit the supervised dictionary) or dictionary (fitted), not both.")
    if dictionary is not None:
        if not isinstance(dictionary, SupervisedDictionary):
            raise TypeError(f"dictionary must be a SupervisedDictionary, got {type(dictionary).__name__}.")
        if dictionary.site != parsed.name:
            raise ValueError(f"dictionary was fitted at {dictionary.site}, not at {parsed.name}.")
        fit_values = {a: set(dictionary.features[a]) for a in ATTRIBUTES}
    else:
        fit_values = {a: {row[a] for row in (attrs if fit_pairs is None else ioi_attributes(fit_pairs))}
                      for a in ATTRIBUTES}  # fmt: skip
    check_same_values(fit_values, {a: {row[a] for row in attrs} for a in ATTRIBUTES})
    n_features = sum(len(v) for v in fit_values.values())
    ks = check_ks(ks, {"supervised": n_features, **{name: sae.d_sae for name, sae in saes.items()}})
    sup = dictionary or supervised_dictionary(model, pairs if fit_pairs is None else fit_pairs, site, position)
    x_ND = source_values(model, sup.site, pairs.clean, [position])[:, 0].float()
    clean = _logit_diff(model, pairs, sup.site, position, x_ND)
    recons = {"supervised": sup.reconstruct(attrs)}
    for name, sae in saes.items():
        with torch.no_grad():
            recons[name] = sae.decode(sae.encode(x_ND.to(sae.W_dec.dtype))).float().to(x_ND.device)
    rows = []
    for name, r in recons.items():
        suff = _logit_diff(model, pairs, sup.site, position, r) / clean
        ablated = x_ND - (r - r.mean(0))
        nec = 1 - _logit_diff(model, pairs, sup.site, position, ablated) / clean
        rows.append({"dictionary": name, "sufficiency": suff, "necessity": nec})
    control = controllability(model, pairs, attrs, sup.site, sup.features, saes, ks, position, x_ND)
    return DictionaryComparison(sup.site, position, pd.DataFrame(rows), control)
