"""Slider ranges for steering, scaled to the residual stream they steer.

A steering vector ``v`` at scale ``s`` adds ``s * v`` to a site whose activations have some typical
size; a slider of ±8 means little for a vector of norm 193 on a stream of norm 50. :func:`typical_norm`
reads that size (the median per-token L2 norm over a short neutral text, the first token left out: BOS
and first tokens carry outsized norms), and :func:`scaled_range` makes the slider's ends move the
activations by :data:`REACH` typical norms.

Example
-------
>>> norm = typical_norm(model, "blocks.6.hook_resid_post")
>>> scaled_range(norm, vec.norm)          # (-x, x, step): x * vec.norm about REACH * norm, rounded up
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from ..checks import check_number

if TYPE_CHECKING:
    from ..model.model import Model

#: A slider's end adds this many typical activation norms of the site (well past where text turns odd).
REACH = 2.0
#: Steps from 0 to a slider's end.
STEPS = 40
#: The neutral text whose activations give a site's typical norm.
REFERENCE_TEXT = (
    "The museum opens at nine in the morning and closes in the evening. Visitors can walk through "
    "the old rooms, read about the city's history and have lunch in the garden cafe."
)


def typical_norm(model: Model, site: str, text: str = REFERENCE_TEXT) -> float:
    """The median per-token L2 norm of ``site``'s activations over ``text``, its first token left out.

    >>> typical_norm(model, "blocks.6.hook_resid_post")   # a float, e.g. 412.0
    """
    model.parse_sites(site)
    enc = model.to_tokens(text)
    (acts,) = model.run_sites(enc, [site])
    n_tokens = int(enc["attention_mask"][0].sum())
    per_token = acts[0, :n_tokens].float().reshape(n_tokens, -1)
    rest = per_token[1:] if n_tokens > 1 else per_token
    return float(torch.linalg.vector_norm(rest, dim=-1).median())


def nice(x: float) -> float:
    """``x`` rounded up to a round number: 1, 1.25, 1.5, 2, 2.5, 3, 4, 5 or 7.5 times a power of ten.

    >>> nice(7.3), nice(0.0123)
    (7.5, 0.0125)
    """
    if not x > 0 or not math.isfinite(x):
        raise ValueError(f"nice() takes a finite number > 0, got {x!r}.")
    power = 10.0 ** math.floor(math.log10(x))
    for m in (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0):
        if m * power >= x / 1.0001:
            return float(f"{m * power:.6g}")
    return float(f"{10 * power:.6g}")


def scaled_range(site_norm: float, vector_norm: float, reach: float = REACH) -> tuple[float, float, float]:
    """``(-end, end, step)`` with ``end * vector_norm`` about ``reach * site_norm`` and :data:`STEPS` steps.

    >>> scaled_range(50.0, 193.0)    # a vector of norm 193 on a stream of norm 50
    (-0.75, 0.75, 0.02)
    """
    site_norm = check_number(site_norm, "site_norm")
    vector_norm = check_number(vector_norm, "vector_norm")
    if site_norm <= 0 or vector_norm <= 0:
        raise ValueError(f"site_norm and vector_norm must be > 0, got {site_norm} and {vector_norm}.")
    end = nice(reach * site_norm / vector_norm)
    return -end, end, nice(end / STEPS)


def default_ranges(
    model: Model, site: str, directions: dict[str, torch.Tensor], norm: float | None = None, reach: float = REACH
) -> tuple[dict[str, tuple[float, float, float]], float]:
    """Each direction's slider range at ``site`` (:func:`scaled_range`), and the site's typical norm
    (``norm`` when given, else read with :func:`typical_norm`).

    >>> ranges, norm = default_ranges(model, vec.site, {"happy": vec.direction})
    """
    norm = typical_norm(model, site) if norm is None else norm
    out = {}
    for name, direction in directions.items():
        length = float(direction.float().norm())
        out[name] = scaled_range(norm, length, reach) if length > 0 and norm > 0 else (-8.0, 8.0, 0.5)
    return out, norm
