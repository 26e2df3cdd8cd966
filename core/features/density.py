"""How often each latent fires, and the density filter of every "top latents" list.

A latent that fires on a large share of all tokens (position, BOS-like or "any text" latents) tops every
list of the strongest latents at a token while saying nothing about it. Lists of top latents therefore leave
out latents firing on more than :data:`MAX_DENSITY` of tokens by default; ``max_density=None`` (or 1.0) turns
the filter off.

Where a density comes from, first found first (:func:`latent_density`):

1. ``density=`` given by the caller: a :class:`~interplab.core.features.data.FeatureData` (measured over its
   corpus) or one number per latent;
2. the SAE's stored firing rates (``sae.firing_rates``, read from SAELens's ``sparsity.safetensors``: the
   packaged suite has them);
3. otherwise, where the caller has tokens of its own to measure on (``contrast`` measures on its negative
   texts), those; else the density is unknown and nothing is filtered (the result says so).

Example
-------
>>> dens = latent_density(sae)                  # the SAE's stored firing rates
>>> dens.source, float(dens.values[299])
('the SAE's stored firing rates', 0.46)
>>> dens.dense(0.1).sum()                       # latents left out of top lists
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

#: Default density filter: latents firing on more than this fraction of tokens leave top-latent lists.
MAX_DENSITY = 0.1


@dataclass(frozen=True)
class Density:
    """Per latent, the fraction of tokens it fires on (``values`` [d_sae], None when unknown), and where from."""

    values: np.ndarray | None
    source: str

    def dense(self, max_density: float | None) -> np.ndarray | None:
        """Boolean mask [d_sae] of latents firing on more than ``max_density`` of tokens (None: no filter)."""
        if max_density is None or max_density >= 1.0 or self.values is None:
            return None
        return self.values > max_density

    def describe(self, max_density: float | None) -> str:
        """The filter in words, e.g. "latents firing on more than 10% of tokens left out (density: ...)"."""
        if max_density is None or max_density >= 1.0:
            return "no density filter"
        if self.values is None:
            return "no density filter (density unknown: pass density=FeatureData or one value per latent)"
        return f"latents firing on more than {100 * max_density:.3g}% of tokens left out (density: {self.source})"

    def short(self, max_density: float | None) -> str:
        """The filter in a few words for a tooltip ("" when nothing is left out)."""
        if self.dense(max_density) is None:
            return ""
        return f"latents on > {100 * float(max_density or 1):.3g}% of tokens left out"


@dataclass(frozen=True)
class DensityFilter:
    """The latents a top list leaves out (``dense`` [d_sae] bool, None: none) and the rule in words."""

    dense: np.ndarray | None
    describe: str
    short: str


def check_max_density(max_density: Any) -> float | None:
    """``max_density`` as a float in (0, 1], or None (no filter); a clear error otherwise.

    >>> check_max_density(0.1), check_max_density(None)
    (0.1, None)
    """
    if max_density is None:
        return None
    if isinstance(max_density, bool) or not isinstance(max_density, (int, float, np.floating, np.integer)):
        raise TypeError(f"max_density is a fraction of tokens in (0, 1] or None, got {max_density!r}.")
    value = float(max_density)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"max_density={max_density!r} is not a fraction of tokens in (0, 1] (None: no filter).")
    return value


def check_density(density: Any, d_sae: int) -> Density | None:
    """A caller's ``density=``: FeatureData (its measured density) or one fraction per latent; None stays None."""
    if density is None:
        return None
    if hasattr(density, "density") and hasattr(density, "n_tokens"):  # FeatureData
        values = np.asarray(density.density, dtype=np.float64)
        source = f"feature data over {int(density.n_tokens)} tokens"
    elif isinstance(density, (np.ndarray, torch.Tensor, list, tuple)):
        values = (density.detach().cpu().double().numpy() if isinstance(density, torch.Tensor)
                  else np.asarray(density, dtype=np.float64))  # fmt: skip
        source = "given"
    else:
        raise TypeError(f"density is FeatureData or one fraction per latent, got {type(density).__name__}.")
    if values.shape != (d_sae,):
        raise ValueError(f"density needs one value per latent, shape ({d_sae},); got {values.shape}.")
    if not np.isfinite(values).all() or (values < 0).any() or (values > 1).any():
        raise ValueError("density values are fractions of tokens: finite, between 0 and 1.")
    return Density(values, source)


def latent_density(sae: Any, density: Any = None) -> Density:
    """The density of each latent of ``sae``: ``density`` when given, else the SAE's stored firing rates, else
    unknown (``values`` None). See the module docstring.

    >>> latent_density(sae, data).source
    'feature data over 16000 tokens'
    """
    d_sae = getattr(sae, "d_sae", None)  # anything with ``encode`` may stand for an SAE (it may not say)
    if d_sae is None and density is not None:
        d_sae = getattr(density, "d_sae", None) or len(density)
    given = None if d_sae is None else check_density(density, int(d_sae))
    if given is not None:
        return given
    rates = getattr(sae, "firing_rates", None)
    if isinstance(rates, torch.Tensor) and rates.shape == (d_sae,):
        return Density(rates.detach().cpu().double().numpy(), "the SAE's stored firing rates")
    return Density(None, "unknown")


def density_filter(sae: Any, max_density: float | None = MAX_DENSITY, density: Any = None) -> DensityFilter:
    """What a top-latents list of ``sae`` leaves out: the mask of dense latents (None: nothing), the filter in
    words and in a few words (see :class:`Density`).

    >>> density_filter(sae).dense.sum()
    """
    max_density = check_max_density(max_density)
    dens = latent_density(sae, density)
    return DensityFilter(dens.dense(max_density), dens.describe(max_density), dens.short(max_density))


def measured_density(rates_M: torch.Tensor, n_tokens: int, where: str) -> Density:
    """A density measured by the caller: ``rates_M`` [d_sae], the fraction of ``n_tokens`` tokens of ``where``
    each latent fired on."""
    return Density(rates_M.detach().cpu().double().numpy(), f"measured on {where}, {n_tokens} tokens")


def top_latents(
    acts_TM: torch.Tensor | np.ndarray, k: int, dense_M: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Each token's ``k`` strongest latents ([n_tokens, k] int32 ids and float32 values, largest first), the
    ``dense_M`` ones (a boolean mask over latents) left out."""
    acts = torch.as_tensor(acts_TM).float()
    if dense_M is not None and dense_M.any():
        acts = acts.masked_fill(torch.from_numpy(np.asarray(dense_M, dtype=bool)), -float("inf"))
    values, ids = acts.topk(min(k, acts.shape[1]), dim=1)
    values = values.masked_fill(torch.isinf(values), 0.0)  # fewer latents than k left: empty slots read 0
    return ids.numpy().astype(np.int32), values.numpy().astype(np.float32)
