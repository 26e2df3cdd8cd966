"""What steering applies: vectors and SAE-latent clamps, checked against a model and grouped by site.

:func:`plan` validates steering (widths, sites, finite values) before any run and groups it by
site in forward order; :func:`interplab.core.model.trace_ops.steer` is the one function that changes a
site's tensor, used by both execution paths (nnsight traces in ``traces.py``, torch hooks in
``hooks.py``). A plan holds only tensors (an SAE as its ``trace_params()``), so it can go to a server.

Clamping latent ``i`` of an SAE to ``v`` encodes the activation, sets the latent, decodes and adds
back the reconstruction error. Decoding is linear, so that is exactly ``x + (v - a_i(x)) * W_dec[i]``:
clamping a latent to its current value changes nothing.

Example
-------
>>> plans = plan(model, [vec * 4.0, clamp(sae, 123, 10.0)])
>>> [p.site.name for p in plans]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..checks import check_latent, check_number
from ..model.sites import Site
from ..model.trace_ops import start_mask, steer
from .vectors import SteeringVector, check_direction

if TYPE_CHECKING:
    from ..model.model import Model
    from ..saes.base import SAE


@dataclass(frozen=True, eq=False)
class Clamp:
    """Set latent ``latent`` of ``sae`` to ``value`` at ``site`` (reconstruction error kept)."""

    sae: SAE
    latent: int
    value: float
    site: str


def clamp(sae: SAE, latent: int, value: float, site: str | None = None) -> Clamp:
    """A clamp of one SAE latent; errors for a latent id out of range or a non-finite value.

    >>> clamp(sae, 123, 0.0)          # ablate latent 123
    """
    if not hasattr(sae, "encode") or not hasattr(sae, "W_dec"):
        raise TypeError(f"clamp needs an interplab SAE, got {type(sae).__name__}.")
    index = check_latent(latent, sae.d_sae)
    site = site or sae.site
    if not site:
        raise ValueError("This SAE does not say which site it reads; pass site=.")
    return Clamp(sae, index, check_number(value, "clamp value"), site)


Steering = SteeringVector | Clamp | tuple[SteeringVector, float] | Sequence[Any]


@dataclass
class SitePlan:
    """Everything applied at one site, checked against the model."""

    site: Site
    envoy: Any  # the nnsight module of the site
    io: str
    add_D: torch.Tensor | None = None  # sum of scale * direction
    #: (the SAE's ``trace_params([latent])``, the latent's column there, value, decoder row): tensors only
    clamps: list[tuple[dict[str, Any], int, float, torch.Tensor]] = field(default_factory=list)

    def parts(self) -> tuple[Any, str, torch.Tensor | None, list[tuple[dict[str, Any], int, float, torch.Tensor]]]:
        """``(envoy, io, add_D, clamps)``: the plan as plain values, for a trace body (no interplab object)."""
        return self.envoy, self.io, self.add_D, self.clamps


def plan(model: Model, steering: Steering) -> list[SitePlan]:
    """Validate steering against ``model`` and group it by site, in forward order (no model run)."""
    if isinstance(steering, (SteeringVector, Clamp)) or (
        isinstance(steering, tuple) and len(steering) == 2 and isinstance(steering[0], SteeringVector)
    ):
        items: list[Any] = [steering]
    elif isinstance(steering, Sequence) and not isinstance(steering, str):
        items = list(steering)
    else:
        raise TypeError(
            "steering is a SteeringVector, a (SteeringVector, scale) pair, a clamp(...) or a list of these; "
            f"got {type(steering).__name__}."
        )
    model.check_mapped()
    plans: dict[str, SitePlan] = {}

    def at(site_name: str) -> SitePlan:
        if site_name not in plans:
            site = model.parse_site(site_name)
            plans[site_name] = SitePlan(site, *model.envoy(site))
        return plans[site_name]

    for i, item in enumerate(items):
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], SteeringVector):
            vec, scale = item[0], check_number(item[1], f"scale of steering[{i}]")
        elif isinstance(item, SteeringVector):
            vec, scale = item, item.scale
        elif isinstance(item, Clamp):
            item.sae.check_fits(model, item.site)
            with torch.no_grad():
                row = item.sae.W_dec[item.latent].detach().clone()  # a copy: a view would ship all of W_dec
                dir_D = check_direction(row, f"decoder row of latent {item.latent}")
            params = item.sae.trace_params([item.latent])  # just what encoding this latent needs
            column = item.latent if params["W_enc"].shape[-1] == item.sae.d_sae else 0
            at(item.site).clamps.append((params, column, item.value, dir_D))
            continue
        else:
            raise TypeError(f"steering[{i}] is a {type(item).__name__}; expected a SteeringVector, pair or clamp.")
        vec.check_fits(model)
        check_direction(vec.direction, f"direction of steering[{i}]")  # catches NaN written in after creation
        p = at(vec.site)
        delta = scale * vec.direction
        p.add_D = delta if p.add_D is None else p.add_D + delta
    return sorted(plans.values(), key=lambda p: p.site)


def steer_value(x: torch.Tensor, p: SitePlan, mask_BL: torch.Tensor | None) -> torch.Tensor:
    """The steered value of one site's tensor [B, L, D]; ``mask_BL`` limits it to some positions."""
    return steer(x, p.add_D, p.clamps, mask_BL)


__all__ = ["Clamp", "SitePlan", "Steering", "clamp", "plan", "start_mask", "steer_value"]
