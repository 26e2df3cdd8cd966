"""Steering vectors: a direction at a site, where it came from, and how to make one.

A :class:`SteeringVector` is a site name, a float32 direction [d] and a default scale. Make one
from contrastive prompt pairs (:func:`diff_of_means`, :func:`pca_direction`), from a probe's
weights (:func:`from_probe`) or from an SAE latent's decoder row (:func:`from_sae`). It saves
as one safetensors file whose metadata holds the rest as JSON (never pickle).

Example
-------
>>> vec = diff_of_means(model, "blocks.6.hook_resid_post", ["I love it"], ["I hate it"])
>>> vec.save("happy.safetensors"); SteeringVector.load("happy.safetensors") == vec
True
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..checks import check_number, check_texts
from ..storage.atomic import write_safetensors
from ..storage.readers import FLOATS, Fields, FileError, expect_arrays, parse_json, read_safetensors, safetensors_header

if TYPE_CHECKING:
    from ..model.model import Model
    from ..saes.base import SAE

FORMAT = "interplab.steering_vector/1"


def check_direction(direction: Any, what: str = "direction") -> torch.Tensor:
    """A 1-D finite float32 CPU tensor, or a clear error naming what is wrong."""
    if isinstance(direction, np.ndarray):
        direction = torch.from_numpy(np.ascontiguousarray(direction))
    if not isinstance(direction, torch.Tensor):
        raise TypeError(f"{what} must be a torch tensor or numpy array of shape [d], got {type(direction).__name__}.")
    direction = direction.detach().to("cpu", torch.float32)
    if direction.ndim == 2 and 1 in direction.shape:
        direction = direction.reshape(-1)
    if direction.ndim != 1 or direction.numel() == 0:
        raise ValueError(f"{what} must have shape [d] (one vector), got shape {tuple(direction.shape)}.")
    bad = ~torch.isfinite(direction)
    if bad.any():
        idx = bad.nonzero()[:5, 0].tolist()
        raise ValueError(
            f"{what} holds {int(bad.sum())} NaN/inf values (at indices {idx}); steering needs finite values."
        )
    return direction.contiguous()


@dataclass(eq=False)
class SteeringVector:
    """A direction to add at one site: ``x[site] += scale * direction``.

    ``provenance`` is a JSON-able dict saying how it was made (method, prompts, layer...).
    ``vec * 4.0`` is the same vector with default scale 4.
    """

    site: str
    direction: torch.Tensor
    scale: float = 1.0
    provenance: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.site, str) or not self.site:
            raise TypeError(f"site must be a site name such as 'blocks.6.hook_resid_post', got {self.site!r}.")
        self.direction = check_direction(self.direction)
        self.scale = check_number(self.scale, "scale")
        if not isinstance(self.provenance, dict):
            raise TypeError(f"provenance must be a dict, got {type(self.provenance).__name__}.")

    @property
    def d(self) -> int:
        return int(self.direction.shape[0])

    @property
    def norm(self) -> float:
        return float(self.direction.norm())

    def __mul__(self, scale: float) -> SteeringVector:
        return replace(self, scale=check_number(scale, "scale"), provenance=dict(self.provenance))

    __rmul__ = __mul__

    def at(self, site: str) -> SteeringVector:
        """The same direction applied at another site (of the same width)."""
        return replace(self, site=site, provenance=dict(self.provenance))

    def unit(self) -> SteeringVector:
        """The direction scaled to unit norm (scale unchanged)."""
        return replace(self, direction=self.direction / self.direction.norm().clamp_min(1e-12))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SteeringVector):
            return NotImplemented
        return (
            self.site == other.site
            and self.scale == other.scale
            and self.provenance == other.provenance
            and torch.equal(self.direction, other.direction)
        )

    def __repr__(self) -> str:
        method = self.provenance.get("method", "?")
        return f"SteeringVector({self.site!r}, d={self.d}, norm={self.norm:.3g}, scale={self.scale:g}, {method})"

    def check_fits(self, model: Model, site: str | None = None) -> str:
        """The site this vector is applied at on ``model``; clear errors for a wrong site or width."""
        site = site or self.site
        model.parse_site(site)  # unknown site: names the valid ones
        width = model.site_dim(site)
        if width != self.d:
            raise ValueError(
                f"This steering vector has d={self.d} ({self.provenance.get('model', 'made for another model')}), "
                f"but {site} of {model.name!r} has width {width}."
            )
        return site

    # ----------------------------------------------------------------- io
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write one ``.safetensors`` file (direction tensor + JSON metadata), atomically."""
        path = Path(path)
        try:
            meta = json.dumps({"site": self.site, "scale": self.scale, "provenance": self.provenance})
        except TypeError as err:
            raise TypeError(f"provenance must hold JSON values only to be saved: {err}") from None
        write_safetensors(path, {"direction": self.direction}, {"format": FORMAT, "interplab": meta})
        return path

    @staticmethod
    def load(path: str | os.PathLike[str]) -> SteeringVector:
        """Read a file written by :meth:`save` (no pickle involved), its header and fields checked first."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"No steering vector file at {str(path)!r}.")
        header = safetensors_header(path)
        meta = header.metadata
        if meta.get("format") != FORMAT:
            raise FileError(path, "format", f"is {meta.get('format')!r}: not an interplab steering vector")
        direction = header.tensors.get("direction")
        if direction is None or len(direction.shape) != 1 or direction.shape[0] < 1 or len(header.tensors) != 1:
            held = {k: list(v.shape) for k, v in header.tensors.items()}
            raise FileError(path, "direction", f"must be the file's one tensor, of shape [d] (the file holds {held})")
        expect_arrays(path, header.tensors, {"direction": (None, FLOATS)})
        info = Fields(path, parse_json(meta.get("interplab", ""), path, "interplab"), "interplab")
        site = info.str("site", max_len=200)
        scale = info.float("scale")
        provenance = info.obj("provenance", {}).data
        _, tensors = read_safetensors(path, " (a steering vector)")
        try:
            return SteeringVector(site, tensors["direction"], scale, provenance)
        except (TypeError, ValueError) as err:
            raise FileError(path, "direction", str(err).rstrip(".")) from None


# --------------------------------------------------------------- builders
def _site_values(model: Model, site: str, texts: list[str], position: int | str, batch_size: int) -> torch.Tensor:
    """[n_texts, d]: the site's activation at ``position`` of each text, or the mean over non-BOS tokens."""
    acts = model.collect(texts, sites=[site], batch_size=batch_size)
    values, mask = acts.values[site].float(), acts.mask
    lengths = mask.sum(1)
    if isinstance(position, str):  # "mean", the one string the caller accepts
        keep = mask.clone()
        if model.tokenizer.bos_token_id is not None:
            keep &= acts.tokens != model.tokenizer.bos_token_id
        keep |= mask & (keep.sum(1, keepdim=True) == 0)  # a text of only BOS keeps it
        return (values * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)
    cols = lengths + position if position < 0 else torch.full_like(lengths, position)
    if (cols < 0).any() or (cols >= lengths).any():
        raise ValueError(f"position={position} is outside a text of {int(lengths.min())} tokens.")
    return values[torch.arange(len(texts)), cols]


METHODS = ("diff_of_means", "pca")


def contrast(
    model: Model,
    site: str,
    positive: str | Sequence[str],
    negative: str | Sequence[str],
    position: int | str = -1,
    scale: float = 1.0,
    method: str = "diff_of_means",
) -> SteeringVector:
    """A steering vector at ``site`` from texts with and without a property.

    ``method="diff_of_means"``: mean(positive activations) - mean(negative activations).
    ``method="pca"``: the first principal component of the paired differences ``positive[i] - negative[i]``
    (uncentred); its sign points from negative to positive and its length is the mean projection of
    the differences on it, so scale 1 moves about as far as the average pair differs.
    ``position`` picks each text's token (-1: the last) or ``"mean"`` (mean over its non-BOS tokens).

    >>> vec = contrast(model, "blocks.6.hook_resid_post", ["I love this."], ["I hate this."], method="pca")
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not one of {METHODS}.")
    positive, negative = check_texts(positive), check_texts(negative)
    if method == "pca" and len(positive) != len(negative):
        raise ValueError(
            f"Paired differences need as many positive as negative texts: {len(positive)} vs {len(negative)}."
        )
    if not (position == "mean" or (isinstance(position, int) and not isinstance(position, bool))):
        raise ValueError(f"position must be a token index (e.g. -1, the last token) or 'mean', got {position!r}.")
    model.parse_site(site)
    if isinstance(position, int):  # inside every text, from the tokenizer alone (before any forward pass)
        shortest = min(int(model.to_tokens(t)["attention_mask"].sum()) for t in [*positive, *negative])
        if not -shortest <= position < shortest:
            raise ValueError(f"position={position} is outside a text of {shortest} tokens.")
    pos_ND, neg_ND = _site_values(model, site, positive, position, 8), _site_values(model, site, negative, position, 8)
    prov = _provenance(model, "pca" if method == "pca" else method, positive, negative, position)
    if method == "diff_of_means":
        return SteeringVector(site, pos_ND.mean(0) - neg_ND.mean(0), scale, prov)
    diffs_ND = (pos_ND - neg_ND).double()
    _, _, vh = torch.linalg.svd(diffs_ND, full_matrices=False)
    unit_D = vh[0]
    proj = float((diffs_ND @ unit_D).mean())
    if proj < 0:
        unit_D, proj = -unit_D, -proj
    prov["explained"] = float(torch.linalg.svdvals(diffs_ND)[0] ** 2 / diffs_ND.pow(2).sum().clamp_min(1e-30))
    return SteeringVector(site, (unit_D * proj).float(), scale, prov)


diff_of_means = functools.partial(contrast, method="diff_of_means")
diff_of_means.__doc__ = """mean(positive activations) - mean(negative activations) at ``site`` (see :func:`contrast`).

>>> vec = diff_of_means(model, "blocks.6.hook_resid_post", ["I love this."], ["I hate this."])
"""
pca_direction = functools.partial(contrast, method="pca")
pca_direction.__doc__ = """First principal component of the paired differences ``positive[i] - negative[i]``.

See :func:`contrast` (``method="pca"``).

>>> vec = pca_direction(model, "blocks.6.hook_resid_post", ["I love this."], ["I hate this."])
"""


def from_probe(probe: Any, site: str | None = None, scale: float = 1.0, normalize: bool = True) -> SteeringVector:
    """The weight vector of a linear probe: a tensor/array [d] (or [1, d]; [2, d] uses row 1 - row 0),
    a ``torch.nn.Linear``, anything with ``coef_`` (scikit-learn) or ``direction`` (``ilab.probes`` and
    ``ilab.das`` results). Unit norm by default. ``site`` defaults to the probe's own ``site`` when it has one.

    >>> vec = from_probe(ilab.probes.train(model, texts, labels))      # the best layer's probe, at its site
    """
    weight = probe
    for attr in ("direction", "coef_", "weight"):
        if hasattr(probe, attr) and not isinstance(probe, (torch.Tensor, np.ndarray)):
            weight = getattr(probe, attr)
            break
    weight = weight() if callable(weight) and not isinstance(weight, torch.Tensor) else weight
    if isinstance(weight, np.ndarray):
        weight = torch.from_numpy(np.ascontiguousarray(weight))
    if isinstance(weight, torch.Tensor) and weight.ndim == 2 and weight.shape[0] == 2:
        weight = weight[1] - weight[0]
    direction = check_direction(weight, "probe weight")
    if site is None:
        site = getattr(probe, "site", None)
        if not isinstance(site, str):
            raise ValueError(
                "This probe does not say which site it reads; pass site= (e.g. 'blocks.6.hook_resid_post')."
            )
    norm = float(direction.norm())
    if normalize:
        direction = direction / max(norm, 1e-12)
    prov = {"method": "probe", "probe_norm": norm, "normalized": normalize}
    kind = type(probe).__name__
    if kind in ("ProbeResult", "Probe", "DASResult"):
        prov["source"] = kind
    return SteeringVector(site, direction, scale, prov)


def from_sae(sae: SAE, latent: int, scale: float = 1.0, site: str | None = None) -> SteeringVector:
    """Latent ``latent``'s decoder direction of an SAE, at the site the SAE reads."""
    direction = sae.direction(latent)  # raises for an id out of range
    site = site or sae.site
    if not site:
        raise ValueError("This SAE does not say which site it reads; pass site=.")
    prov = {"method": "sae_latent", "latent": int(latent), "d_sae": int(sae.d_sae), "sae_site": sae.site}
    if getattr(sae.cfg, "model_name", ""):
        prov["model"] = sae.cfg.model_name
    return SteeringVector(site, direction, scale, prov)


def _provenance(model: Model, method: str, positive: Any, negative: Any, position: int | str) -> dict[str, Any]:
    pos, neg = check_texts(positive), check_texts(negative)
    return {
        "method": method,
        "model": model.name,
        "position": position,
        "n_positive": len(pos),
        "n_negative": len(neg),
        "positive": pos[:8],
        "negative": neg[:8],
    }
