"""SAE-refined control vectors, their random-span control, and a linearity comparison of several vectors.

:func:`refine` keeps the part of a steering vector that lies in the span of the SAE latents whose
decoder directions align best with it (``k`` of them, ranked by ``|cosine|``), rescaled to the vector's
own norm so that a scale means the same step size for both. :func:`random_span` is its control: a
vector of the same norm in the span of ``k`` latents drawn at random. :func:`compare` sweeps several
vectors over the same scales and reports, per vector, the R² of the metric against the scale and the
KL paid on neutral text (``SweepResult`` of :mod:`.sweeps` for each).

Example
-------
>>> refined = ilab.steering.refine(vec, sae, k=32)
>>> control = ilab.steering.random_span(vec, sae, k=32, seed=0)
>>> cmp = ilab.steering.compare(model, {"raw": vec, "refined": refined, "random": control},
...                             [-12, -6, 0, 6, 12], metric, neutral_texts=texts, prompts=prompts)
>>> cmp.r2, cmp.more_linear("refined", than="raw"), cmp.chart()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..checks import check_fraction, check_int
from ..readout.metrics import BoundMetric, Metric
from ..views.charts import offline
from .sweeps import SweepResult, sweep
from .vectors import SteeringVector

if TYPE_CHECKING:
    from ..model.model import Model
    from ..saes.base import SAE


def _check_pair(vec: Any, sae: Any, k: Any) -> int:
    """``k`` checked against the SAE, the vector against the SAE's width; clear errors naming the bad value."""
    from ..saes.base import SAE

    if not isinstance(vec, SteeringVector):
        raise TypeError(f"vec must be a SteeringVector (as diff_of_means makes), got {type(vec).__name__}.")
    if not isinstance(sae, SAE):
        raise TypeError(f"sae must be an ilab.SAE (as ilab.load_sae returns), got {type(sae).__name__}.")
    if sae.d_out != vec.d:
        where = sae.site or "no site"
        raise ValueError(f"The vector has d={vec.d}, but this SAE's decoder writes d={sae.d_out} ({where}).")
    return check_int("k", k, minimum=1, maximum=min(sae.d_sae, vec.d))


def _span_projection(target_D: torch.Tensor, rows_KD: torch.Tensor) -> torch.Tensor:
    """The least-squares projection of ``target_D`` onto the span of the rows (float64)."""
    coef = torch.linalg.lstsq(rows_KD.T, target_D[:, None]).solution
    return (rows_KD.T @ coef)[:, 0]


def _in_span(vec: SteeringVector, latents: list[int], direction_D: torch.Tensor, method: str) -> SteeringVector:
    """``direction_D`` rescaled to the vector's norm, with a provenance naming the latents and their share."""
    norm = direction_D.norm()
    if float(norm) <= 1e-12 * max(vec.norm, 1e-30):
        raise ValueError(f"The span of latents {latents[:8]} holds none of this vector; try a larger k.")
    prov = {
        **vec.provenance,
        "method": method,
        "refined_from": vec.provenance.get("method", "?"),
        "latents": latents,
        "k": len(latents),
        "kept": float(norm) / max(vec.norm, 1e-30),
    }
    return replace(vec, direction=(direction_D * (vec.norm / norm)).float(), provenance=prov)


def refine(vec: SteeringVector, sae: SAE, k: int = 32) -> SteeringVector:
    """``vec``'s component in the span of its ``k`` best-aligned SAE latents, at ``vec``'s norm.

    Latents are ranked by ``|cos(W_dec[i], vec)|``; the kept component is the least-squares projection
    of ``vec`` onto their decoder rows. ``provenance`` gains ``latents`` (the ids, best first) and ``kept``
    (the projection's norm over ``vec``'s, before rescaling).

    >>> refined = refine(vec, sae, k=32)
    >>> refined.provenance["latents"][:3], refined.provenance["kept"]
    """
    k = _check_pair(vec, sae, k)
    target_D = vec.direction.double()
    rows_MD = sae.W_dec.detach().to("cpu", torch.float64)
    cos_M = torch.nn.functional.normalize(rows_MD, dim=1) @ (target_D / target_D.norm().clamp_min(1e-30))
    latents = torch.topk(cos_M.abs(), k).indices.tolist()
    return _in_span(vec, latents, _span_projection(target_D, rows_MD[latents]), "sae_refined")


def random_span(vec: SteeringVector, sae: SAE, k: int = 32, seed: int = 0) -> SteeringVector:
    """The control of :func:`refine`: a random vector of ``vec``'s norm in the span of ``k`` random latents.

    The latents are drawn without replacement and combined with standard-normal weights (seeded).

    >>> control = random_span(vec, sae, k=32, seed=0)
    """
    k = _check_pair(vec, sae, k)
    seed = check_int("seed", seed, minimum=0)
    gen = torch.Generator().manual_seed(seed)
    latents = torch.randperm(sae.d_sae, generator=gen)[:k].tolist()
    weights_K = torch.randn(k, generator=gen, dtype=torch.float64)
    rows_KD = sae.W_dec.detach().to("cpu", torch.float64)[latents]
    return _in_span(vec, latents, rows_KD.T @ weights_K, "random_span")


@dataclass(repr=False)
class Comparison:
    """One :class:`SweepResult` per named vector, all over the same scales, metric and texts."""

    results: dict[str, SweepResult]

    @property
    def r2(self) -> dict[str, float]:
        """R² of the metric against the scale, per vector."""
        return {name: res.r2 for name, res in self.results.items()}

    @property
    def max_kl(self) -> dict[str, float]:
        """The largest neutral-text KL over the scales, per vector (nats per token)."""
        return {name: float(res.kl.max()) for name, res in self.results.items()}

    def _pair(self, name: str, than: str) -> tuple[SweepResult, SweepResult]:
        for key in (name, than):
            if key not in self.results:
                raise KeyError(f"No vector named {key!r}; the comparison holds {list(self.results)}.")
        return self.results[name], self.results[than]

    def more_linear(self, name: str, than: str) -> bool:
        """Whether vector ``name``'s R² is above vector ``than``'s (and its slope points the same way)."""
        a, b = self._pair(name, than)
        return bool(a.r2 > b.r2 and np.sign(a.slope) == np.sign(b.slope))

    def as_linear(self, name: str, than: str, tolerance: float = 0.05) -> bool:
        """Whether vector ``name``'s R² is at most ``tolerance`` below vector ``than``'s (slopes the same way).

        >>> cmp.as_linear("refined k=32", than="raw")  # doctest: +SKIP
        True
        """
        tol = check_fraction("tolerance", tolerance, low="[", high=")")
        a, b = self._pair(name, than)
        return bool(a.r2 >= b.r2 - tol and np.sign(a.slope) == np.sign(b.slope))

    def to_pandas(self) -> Any:
        """A row per vector: R², slope, the largest and the mean neutral-text KL."""
        import pandas as pd

        rows = [
            {"vector": n, "r2": r.r2, "slope": r.slope, "max_kl": float(r.kl.max()), "mean_kl": float(r.kl.mean())}
            for n, r in self.results.items()
        ]
        return pd.DataFrame(rows).set_index("vector")

    def curves(self) -> Any:
        """Long form: one row per (vector, scale) with the metric and the KL."""
        import pandas as pd

        frames = [pd.DataFrame({"vector": n, "scale": r.scales, "metric": r.metric, "kl": r.kl})
                  for n, r in self.results.items()]  # fmt: skip
        return pd.concat(frames, ignore_index=True)

    def chart(self) -> Any:
        """Altair: the metric and the neutral-text KL against the scale, one line per vector."""
        import altair as alt

        base = alt.Chart(self.curves()).encode(x=alt.X("scale:Q"), color=alt.Color("vector:N"))
        size = {"width": 260, "height": 200}
        left = base.mark_line(point=True).encode(y="metric:Q").properties(title="metric vs scale", **size)
        right = base.mark_line(point=True).encode(y=alt.Y("kl:Q", title="KL on neutral text (nats)"))
        return offline(alt.hconcat(left, right.properties(title="fluency cost", **size)))

    def __repr__(self) -> str:
        rows = "\n".join(f"  {n:>12} R²={r.r2:.4f} slope={r.slope:+.4g} max KL={r.kl.max():.3g}"
                         for n, r in self.results.items())  # fmt: skip
        return f"Comparison(\n{rows}\n)"


def compare(
    model: Model,
    vectors: Mapping[str, SteeringVector],
    scales: Sequence[float],
    metric: Metric | BoundMetric | Callable[..., float],
    neutral_texts: str | Sequence[str],
    prompts: str | Sequence[str] | None = None,
) -> Comparison:
    """:func:`~.sweeps.sweep` each named vector over the same scales, metric and texts.

    >>> cmp = compare(model, {"raw": vec, "refined": refine(vec, sae)}, [-12, 0, 12], metric, texts, prompts)
    >>> cmp.to_pandas()
    """
    if not isinstance(vectors, Mapping) or not vectors:
        raise ValueError(f"vectors must be a non-empty dict of name -> SteeringVector, got {vectors!r}.")
    for name, vec in vectors.items():
        if not isinstance(name, str) or not isinstance(vec, SteeringVector):
            raise TypeError(f"vectors[{name!r}] must be a SteeringVector under a str name, got {type(vec).__name__}.")
        vec.check_fits(model)  # every site and width before the first sweep (which checks the scales and texts)
    results = {name: sweep(model, vec, scales, metric, neutral_texts, prompts) for name, vec in vectors.items()}
    return Comparison(results)
