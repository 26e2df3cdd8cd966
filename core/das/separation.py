"""Does a model follow the intents as well as its knob keeps them apart? The knob paper's claim across models.

For each model (the plain one, and a fine-tune at several of its steps: :meth:`IntentTuning.at`),
:func:`knob_separation` measures two things on the same held-out prompts: the share of items that follow each
intent, and how far apart the two intents' prompts sit along the knob direction at its site and positions: the
difference of the mean projections of "use the context" and "ignore the context" prompts divided by the pooled
standard deviation of the projections (Cohen's d, unsigned). The paper finds the two strongly correlated across
models, each model measured along its *own* knob: :func:`fit_knobs` fits one per model at a site, and
``knob_separation`` takes them as a mapping (one shared knob is the other reading). The claim is judged against a
control: the same correlation with ``n_random`` random unit directions at the same site in place of the knobs
(read from the same activations, so free; with a knob per model, a random direction per model), the knobs' at a
percentile among them.

Example
-------
>>> variants = {"plain": None, "step 4": tuning.at(4), "tuned": tuning}
>>> sep = ilab.das.knob_separation(model, tuning.held_out(), knob, variants)
>>> knobs = ilab.das.fit_knobs(model, tuning.pairs("train"), variants, "blocks.10.hook_resid_post", epochs=1)
>>> own = ilab.das.knob_separation(model, tuning.held_out(), knobs, variants)
>>> own.pearson, own.control.exceeds(95), own.chart()
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..checks import check_int
from ..views.charts import offline
from .controls import Control, random_subspaces
from .finetune import IntentTuning
from .fit import DASResult, fit
from .knob import INTENTS, KnobTask
from .pairs import CounterfactualPairs

if TYPE_CHECKING:
    from ..model.model import Model


@dataclass(repr=False)
class KnobSeparation:
    """Per model: the share following each intent and the intents' separation along the knob and random directions."""

    models: list[str]
    following: dict[str, np.ndarray]  # intent -> [models] share of held-out items following it
    separation: np.ndarray  # [models] along the knob
    random_separation: np.ndarray  # [models, n_random] along random unit directions
    site: str

    @property
    def mean_following(self) -> np.ndarray:
        """[models] the mean over both intents of the share following it."""
        return np.mean([self.following[i] for i in INTENTS], axis=0)

    @property
    def pearson(self) -> float:
        """Pearson correlation across models between :attr:`mean_following` and the knob's separation."""
        return _pearson(self.mean_following, self.separation)

    @property
    def spearman(self) -> float:
        """Spearman (rank) correlation across models between :attr:`mean_following` and the separation."""
        return _pearson(_ranks(self.mean_following), _ranks(self.separation))

    @property
    def control(self) -> Control:
        """The knob's Pearson correlation beside the same correlation for each random direction."""
        follow = self.mean_following
        rand = np.array([_pearson(follow, col) for col in self.random_separation.T])
        return Control("Pearson r (following vs separation)", self.pearson, np.nan_to_num(rand, nan=0.0), self.site, 1)

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame({"model": self.models, **{f"follows {i}": self.following[i] for i in INTENTS},
                             "mean following": self.mean_following, "knob separation": self.separation,
                             "random separation (median)": np.median(self.random_separation, axis=1)})  # fmt: skip

    def chart(self) -> Any:
        """Altair: separation against mean following, one point per model, knob and random-direction median."""
        import altair as alt

        df = self.to_pandas().melt(id_vars=["model", "mean following"],
                                   value_vars=["knob separation", "random separation (median)"],
                                   var_name="direction", value_name="separation")  # fmt: skip
        base = alt.Chart(df).encode(x=alt.X("mean following:Q", scale=alt.Scale(domain=[0, 1])),
                                    y="separation:Q", color="direction:N")  # fmt: skip
        title = (f"{self.site}: Pearson r {self.pearson:.2f}, Spearman {self.spearman:.2f} "
                 f"(random directions' 95th pct {self.control.quantile(95):.2f})")  # fmt: skip
        chart = base.mark_point(filled=True, size=70) + base.mark_text(dx=6, align="left").encode(text="model:N")
        return offline(chart.properties(title=title, width=380, height=220))

    def __repr__(self) -> str:
        rows = ", ".join(f"{m} {f:.2f}/{s:.2f}" for m, f, s in zip(self.models, self.mean_following, self.separation,
                                                                    strict=True))  # fmt: skip
        return (f"KnobSeparation({self.site}; model following/separation: {rows}; Pearson {self.pearson:.2f}, "
                f"Spearman {self.spearman:.2f})")  # fmt: skip


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    x, y = np.asarray(x, float) - np.mean(x), np.asarray(y, float) - np.mean(y)
    denom = float(np.sqrt((x**2).sum() * (y**2).sum()))
    return float((x * y).sum() / denom) if denom > 0 else float("nan")


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x))
    values = np.asarray(x)
    return np.array([ranks[values == v].mean() for v in values])


def cohens_d(a_NR: torch.Tensor, b_NR: torch.Tensor) -> torch.Tensor:
    """|mean(a) - mean(b)| over the pooled standard deviation, per column [R].

    >>> cohens_d(torch.tensor([[0.0], [2.0]]), torch.tensor([[4.0], [6.0]]))
    tensor([2.8284])
    """
    pooled = ((a_NR.var(0) + b_NR.var(0)) / 2).sqrt().clamp_min(1e-12)
    return (a_NR.mean(0) - b_NR.mean(0)).abs() / pooled


def _check_variants(variants: Any) -> dict[str, IntentTuning | None]:
    if not isinstance(variants, Mapping):
        raise TypeError(f"variants must map a name to an IntentTuning or None, got {type(variants).__name__}.")
    for name, tuning in variants.items():
        if tuning is not None and not isinstance(tuning, IntentTuning):
            raise TypeError(f"variants[{name!r}] must be an IntentTuning or None (the plain model), "
                            f"got {type(tuning).__name__}.")  # fmt: skip
    return dict(variants)


def _check_knobs(das: Any, names: list[str]) -> dict[str, DASResult]:
    """One knob per model: a DASResult shared by all, or a mapping with one for each name of ``variants``."""
    knobs = dict(das) if isinstance(das, Mapping) else dict.fromkeys(names, das)
    if sorted(knobs) != sorted(names):
        raise ValueError(f"das names the models {sorted(knobs)} but variants has {sorted(names)}: give one knob "
                         "per model (or one DASResult for all).")  # fmt: skip
    for name, knob in knobs.items():
        if not isinstance(knob, DASResult):
            raise TypeError(f"das[{name!r}] must be a DASResult (ilab.das.fit), got {type(knob).__name__}.")
        _ = knob.direction  # a knob is one direction: k = 1 is checked here
    if len({knob.site for knob in knobs.values()}) > 1:
        raise ValueError(f"The knobs sit at sites {sorted({k.site for k in knobs.values()})}: give knobs of one site.")
    return {name: knobs[name] for name in names}


def _check(das: Any, task: Any, variants: Any) -> tuple[dict[str, DASResult], KnobTask, dict[str, IntentTuning | None]]:
    if not isinstance(das, (DASResult, Mapping)):
        raise TypeError(f"das must be a DASResult (ilab.das.fit) or a mapping of them, got {type(das).__name__}.")
    if not isinstance(task, KnobTask):
        raise TypeError(f"task must be a KnobTask (ilab.das.knob_task), got {type(task).__name__}.")
    variants = _check_variants(variants)
    if len(variants) < 3:
        raise ValueError(f"variants has {len(variants)} models {list(variants)}: a correlation needs three or more.")
    return _check_knobs(das, list(variants)), task, variants


def _projections(model: Model, task: KnobTask, das: DASResult, dirs_DR: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per intent: each prompt's site vector at ``das.positions`` projected on each direction [N * positions, R]."""
    out = {}
    for intent in INTENTS:
        acts = model.collect(task.prompts(intent), das.site)
        values_BPD, lengths_B = acts.values[model.parse_site(das.site).name], acts.mask.sum(1)
        rows = [values_BPD[b, p if p >= 0 else int(lengths_B[b]) + p] for b in range(len(lengths_B))
                for p in das.positions]  # fmt: skip
        out[intent] = torch.stack(rows).float() @ dirs_DR
    return out


def knob_separation(
    model: Model, task: KnobTask, das: DASResult | Mapping[str, DASResult],
    variants: Mapping[str, IntentTuning | None], n_random: int = 32, seed: int = 1,
) -> KnobSeparation:  # fmt: skip
    """For each model of ``variants`` (name -> an :class:`IntentTuning` applied to ``model``, or None for the plain
    model): the share of ``task``'s items following each intent and the intents' separation along the knob and
    ``n_random`` random unit directions at its site (at the knob's positions). ``das`` is one knob for every model
    (every model then read along the same random directions) or a mapping name -> that model's own knob
    (:func:`fit_knobs`), all at one site; each model is then read along random directions of its own as well, so the
    control's correlation varies with the direction as the knobs' does.

    >>> sep = knob_separation(model, tuning.held_out(), knob, {"plain": None, "step 4": tuning.at(4), "tuned": tuning})
    >>> sep.pearson, sep.control.exceeds(95)
    """
    knobs, task, variants = _check(das, task, variants)
    n_random = check_int("n_random", n_random, minimum=2)
    site = model.parse_site(next(iter(knobs.values())).site).name
    d = model.site_dim(site)
    for name, knob in knobs.items():
        if knob.direction.shape != (d,):
            raise ValueError(f"das[{name!r}]'s direction has shape {tuple(knob.direction.shape)} but {site} is {d} "
                             "wide.")  # fmt: skip
    own = isinstance(das, Mapping)  # each model its own knob: each its own random directions as well
    following: dict[str, list[float]] = {i: [] for i in INTENTS}
    seps = []
    for m, (name, tuning) in enumerate(variants.items()):
        random_DR = random_subspaces(d, 1, n_random, seed + m if own else seed)[:, :, 0].T
        dirs_DR = torch.cat([knobs[name].direction[:, None].float(), random_DR], 1)
        with contextlib.nullcontext() if tuning is None else tuning.applied(model):
            acc = task.accuracy(model)
            proj = _projections(model, task, knobs[name], dirs_DR)
        for intent in INTENTS:
            following[intent].append(acc[intent])
        seps.append(cohens_d(proj["context"], proj["prior"]).numpy())
    sep_MR = np.stack(seps)
    return KnobSeparation(list(variants), {i: np.array(v) for i, v in following.items()}, sep_MR[:, 0],
                          sep_MR[:, 1:], site)  # fmt: skip


def fit_knobs(model: Model, pairs: CounterfactualPairs, variants: Mapping[str, IntentTuning | None], site: str,
              **fit_kwargs: Any) -> dict[str, DASResult]:  # fmt: skip
    """Each model's own knob: a 1-D DAS fit (:func:`~interplab.core.das.fit.fit`, ``k=1``) at ``site`` on ``pairs``
    under each variant's adapter (None: the plain model); other keywords go to ``fit``.

    >>> knobs = fit_knobs(model, tuning.pairs("train"), {"plain": None, "tuned": tuning}, "blocks.10.hook_resid_post")
    """
    variants = _check_variants(variants)
    if not variants:
        raise ValueError("variants is empty: give at least one model (name -> IntentTuning or None).")
    if fit_kwargs.get("k", 1) != 1:
        raise ValueError(f"k={fit_kwargs['k']!r}: a knob is one direction (k=1).")
    fit_kwargs.pop("k", None)
    out = {}
    for name, tuning in variants.items():
        with contextlib.nullcontext() if tuning is None else tuning.applied(model):
            out[name] = fit(model, pairs, site, k=1, **fit_kwargs)
    return out
