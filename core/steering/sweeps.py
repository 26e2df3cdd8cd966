"""Measuring steering: how a metric moves with the scale, what fluency it costs, and where it works best.

:func:`sweep` runs one vector at several scales and records, per scale, a user metric on some
prompts, the KL divergence to the unsteered model on neutral text and the loss on that text; it
reports how linear the metric is in the scale (R^2 of a straight-line fit). :func:`layer_sweep`
recomputes a contrast vector at each layer and measures it the same way.

Metrics are :mod:`interplab.core.readout.metrics`'s (the same as patching's), scored as the mean over prompts.

Example
-------
>>> metric = ilab.metrics.logit_diff({" good", " great"}, {" bad", " awful"})
>>> res = sweep(model, vec, [-8, -4, 0, 4, 8], metric, prompts=["The film was"], neutral_texts=texts)
>>> res.r2, res.to_pandas(), res.chart()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ..checks import check_number, check_texts
from ..model.sites import kind_of, site_name
from ..model.trace_ops import log_probs
from ..readout.metrics import BoundMetric, Metric, as_metric
from ..views.charts import offline
from .traces import Steering, logits, plan
from .vectors import METHODS, SteeringVector, contrast

if TYPE_CHECKING:
    from ..model.model import Model


def _linear_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Slope, intercept and R^2 of a least-squares line."""
    if len(x) < 2 or np.ptp(x) == 0:
        return float("nan"), float("nan"), float("nan")
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / total if total > 0 else 1.0
    return float(slope), float(intercept), r2


@dataclass(repr=False)
class SweepResult:
    """Per scale: the metric, KL(unsteered || steered) and loss on neutral text; R^2 of metric vs scale."""

    scales: np.ndarray
    metric: np.ndarray
    kl: np.ndarray  # mean per-token KL on neutral text, nats
    loss: np.ndarray  # mean next-token loss on neutral text, nats
    baseline_loss: float
    slope: float
    intercept: float
    r2: float
    metric_name: str = "metric"

    def to_dict(self) -> dict[str, Any]:
        return {"scale": self.scales, self.metric_name: self.metric, "kl": self.kl, "loss": self.loss}

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.to_dict())

    def chart(self) -> Any:
        """Altair: the metric against scale with its straight-line fit, beside the KL and loss paid."""
        import altair as alt

        df = self.to_pandas()
        df["fit"] = self.slope * df["scale"] + self.intercept
        base = alt.Chart(df).encode(x=alt.X("scale:Q", title="scale"))
        title = f"{self.metric_name} vs scale (R² = {self.r2:.3f})"
        left = (
            base.mark_line(point=True).encode(y=alt.Y(f"{self.metric_name}:Q", title=self.metric_name))
            + base.mark_line(strokeDash=[4, 3], color="gray").encode(y="fit:Q")
        ).properties(title=title, width=260, height=200)
        cost = df.melt(id_vars=["scale"], value_vars=["kl", "loss"], var_name="measure", value_name="nats")
        right = (
            alt.Chart(cost)
            .mark_line(point=True)
            .encode(x="scale:Q", y=alt.Y("nats:Q"), color="measure:N")
            .properties(title=f"fluency cost (unsteered loss {self.baseline_loss:.2f})", width=260, height=200)
        )
        return offline(alt.hconcat(left, right))

    def __repr__(self) -> str:
        rows = "\n".join(
            f"  {s:8.3g} {m:10.4g} {k:10.4g} {lo:10.4g}"
            for s, m, k, lo in zip(self.scales, self.metric, self.kl, self.loss, strict=True)
        )
        head = f"  {'scale':>8} {self.metric_name:>10} {'kl':>10} {'loss':>10}"
        return f"SweepResult(R²={self.r2:.4f}, slope={self.slope:.4g}\n{head}\n{rows}\n)"


def _neutral_stats(
    model: Model, neutral: list[str], steering: Steering, clean_BLV: torch.Tensor | None
) -> tuple[float, float, torch.Tensor]:
    """KL(clean || steered) per token and steered next-token loss on neutral texts (BOS prediction excluded)."""
    steered = logits(model, neutral, steering, positions=None)
    enc = model.to_tokens(neutral)
    mask = enc["attention_mask"].bool()
    pred = (mask[:, 1:] & mask[:, :-1])[:, : steered.shape[1] - 1]
    targets = enc["input_ids"][:, 1 : steered.shape[1]]
    logp = log_probs(steered[:, :-1])
    nll = -logp.gather(-1, targets[..., None])[..., 0]
    loss = float(nll[pred].mean())
    if clean_BLV is None:
        return 0.0, loss, logp
    clean = clean_BLV
    kl = (clean.exp() * (clean - logp)).sum(-1)
    return float(kl[pred].mean()), loss, logp


def _check_scales(scales: Sequence[float]) -> np.ndarray:
    if isinstance(scales, (int, float)) or len(scales) == 0:
        raise ValueError(f"scales must be a non-empty list of numbers, got {scales!r}.")
    arr = np.array([check_number(s, "scales entry") for s in scales], dtype=np.float64)
    if len(np.unique(arr)) < 2:
        raise ValueError(f"scales must hold at least two different numbers to fit a line (slope, R²), got {scales!r}.")
    return arr


def _metric_name(metric: Any) -> str:
    name = metric.name if isinstance(metric, (Metric, BoundMetric)) else getattr(metric, "__name__", "")
    return name if name and name.isidentifier() else "metric"


def _bind(model: Model, metric: Any, prompts: list[str] | None) -> Any:
    """A metric bound to the model's tokenizer and the prompts (one answer per prompt allowed); callables as is."""
    if prompts is None or not isinstance(metric, (Metric, BoundMetric)):
        return metric
    return as_metric(metric).bind(model.tokenizer, len(prompts))


def _run_metric(model: Model, metric: Any, prompts: list[str] | None, steering: Steering) -> float:
    """The metric on the steered last-position logits of ``prompts`` (mean over prompts), or ``metric(steering)``."""
    if prompts is None:
        return float(metric(steering))
    last = logits(model, prompts, steering, positions=-1)[:, -1]
    if isinstance(metric, BoundMetric):
        return metric.score(last, torch.arange(len(prompts)))
    return float(metric(last))


def sweep(
    model: Model,
    vector: SteeringVector,
    scales: Sequence[float],
    metric: Metric | BoundMetric | Callable[..., float],
    neutral_texts: str | Sequence[str],
    prompts: str | Sequence[str] | None = None,
) -> SweepResult:
    """Run ``vector`` at each scale and measure the metric, the KL to the unsteered model and the loss.

    ``metric`` is an :mod:`interplab.core.readout.metrics` metric (``logit_diff``, ``prob``; its mean over
    ``prompts``) or any ``f(logits [n_prompts, vocab]) -> float`` on the last-position steered logits of
    ``prompts``; without ``prompts``, ``metric(steering) -> float`` is called with the ``(vector, scale)``
    pair (e.g. to score a probe on steered activations).
    """
    if not isinstance(vector, SteeringVector):
        raise TypeError(f"vector must be a SteeringVector, got {type(vector).__name__}.")
    if not callable(metric) and not isinstance(metric, Metric):
        raise TypeError(f"metric must be an ilab.metrics metric or a callable, got {type(metric).__name__}.")
    scale_arr = _check_scales(scales)
    neutral = check_texts(neutral_texts)
    prompt_list = None if prompts is None else check_texts(prompts)
    metric = _bind(model, metric, prompt_list)
    plan(model, vector)  # width / site / NaN errors before any run
    _, base_loss, clean = _neutral_stats(model, neutral, [], None)
    values, kls, losses = [], [], []
    for s in tqdm(scale_arr, desc="sweep", leave=False, disable=len(scale_arr) < 4):
        steer = (vector, float(s))
        values.append(_run_metric(model, metric, prompt_list, steer))
        kl, loss, _ = _neutral_stats(model, neutral, steer, clean)
        kls.append(kl)
        losses.append(loss)
    metric_arr = np.array(values)
    slope, intercept, r2 = _linear_fit(scale_arr, metric_arr)
    return SweepResult(
        scales=scale_arr,
        metric=metric_arr,
        kl=np.array(kls),
        loss=np.array(losses),
        baseline_loss=base_loss,
        slope=slope,
        intercept=intercept,
        r2=r2,
        metric_name=_metric_name(metric),
    )


@dataclass(repr=False)
class LayerSweep:
    """Per layer: the metric's change at ``scale`` (vs unsteered), the KL paid, and the vector's norm."""

    layers: np.ndarray
    effect: np.ndarray
    kl: np.ndarray
    norm: np.ndarray
    scale: float
    site_kind: str
    vectors: list[SteeringVector]

    @property
    def best_layer(self) -> int:
        """The layer whose vector moves the metric most (largest effect)."""
        return int(self.layers[int(np.argmax(self.effect))])

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.layers, "effect": self.effect, "kl": self.kl, "norm": self.norm}

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.to_dict())

    def chart(self) -> Any:
        import altair as alt

        df = self.to_pandas().melt(id_vars=["layer"], value_vars=["effect", "kl"], var_name="measure")
        return offline(
            alt.Chart(df)
            .mark_line(point=True)
            .encode(x="layer:O", y="value:Q", color="measure:N")
            .properties(title=f"steering at scale {self.scale:g} by layer ({self.site_kind})", width=360, height=200)
        )

    def __repr__(self) -> str:
        rows = ", ".join(f"L{int(layer)}: {e:+.3g}" for layer, e in zip(self.layers, self.effect, strict=True))
        return f"LayerSweep(best layer {self.best_layer}; effect {rows})"


def layer_sweep(
    model: Model,
    positive: str | Sequence[str],
    negative: str | Sequence[str],
    metric: Metric | BoundMetric | Callable[[torch.Tensor], float],
    prompts: str | Sequence[str],
    neutral_texts: str | Sequence[str],
    layers: Sequence[int] | None = None,
    scale: float = 4.0,
    site_kind: str = "resid_post",
    method: str = "diff_of_means",
    position: int | str = -1,
) -> LayerSweep:
    """Recompute the contrast vector at each layer's ``site_kind`` and measure it at ``scale``.

    ``site_kind`` is a short site form (``"resid_post"``, ``"mlp_out"``, ...; the hook name without its layer,
    ``"hook_resid_post"``, works too).

    ``effect`` is ``metric(steered) - metric(unsteered)`` on ``prompts``; ``kl`` is on ``neutral_texts``.
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not one of {METHODS}.")
    layer_list = list(range(model.n_layers)) if layers is None else [int(x) for x in layers]
    if not layer_list:
        raise ValueError("layers is empty.")
    kind = kind_of(site_kind, model.kinds, suffixes=True)
    sites = [site_name(layer, kind) for layer in layer_list]
    model.parse_sites(sites)  # every site valid before any run
    scale = check_number(scale, "scale")
    prompt_list, neutral = check_texts(prompts), check_texts(neutral_texts)
    metric = _bind(model, metric, prompt_list)
    base = _run_metric(model, metric, prompt_list, [])
    _, _, clean = _neutral_stats(model, neutral, [], None)
    effects, kls, norms, vectors = [], [], [], []
    for site in tqdm(sites, desc="layer sweep", leave=False):
        vec = contrast(model, site, positive, negative, method=method, position=position)
        effects.append(_run_metric(model, metric, prompt_list, (vec, scale)) - base)
        kls.append(_neutral_stats(model, neutral, (vec, scale), clean)[0])
        norms.append(vec.norm)
        vectors.append(vec)
    return LayerSweep(
        layers=np.array(layer_list),
        effect=np.array(effects),
        kl=np.array(kls),
        norm=np.array(norms),
        scale=scale,
        site_kind=kind,
        vectors=vectors,
    )
