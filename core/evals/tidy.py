"""The tidy table every suite returns and the site activations they read.

Each suite reports rows of ``suite, site, group, metric, value`` (one measured number a row), so
results of several suites, SAEs and sites stack into one DataFrame with ``pd.concat`` and chart
with one altair call. :func:`site_latents` runs the model once per batch to a site (the pass stops
there) and encodes the tokens asked for; it is the one forward path the suites share.

Example
-------
>>> rows = tidy("polysemy", "blocks.6.hook_resid_post", {"accuracy": 0.71})
>>> rows.columns.tolist()
['suite', 'site', 'group', 'metric', 'value']
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch

if TYPE_CHECKING:
    from ..model.model import Model
    from ..saes.base import SAE

COLUMNS = ["suite", "site", "group", "metric", "value"]


def tidy(suite: str, site: str, metrics: Mapping[str, float], group: str = "all") -> pd.DataFrame:
    """One row per metric: ``suite, site, group, metric, value``.

    >>> tidy("absorption", "blocks.3.hook_resid_post", {"absorption_rate": 0.1}, group="s")
    """
    return pd.DataFrame(
        [
            {"suite": suite, "site": site, "group": str(group), "metric": k, "value": float(v)}
            for k, v in metrics.items()
        ],
        columns=COLUMNS,
    )


def empty() -> pd.DataFrame:
    """A tidy table with no rows."""
    return pd.DataFrame(columns=COLUMNS).astype({"value": float})


def site_batches(
    model: Model, site: str, enc: Mapping[str, torch.Tensor], batch_size: int
) -> Iterator[tuple[slice, torch.Tensor]]:
    """``(rows, x_BLD)`` for each batch of the tokenised rows ``enc``: the site's float32 activations (CPU).

    Batches are cut from the already-tokenised (right-padded) tensors, so positions found before
    the forward pass stay valid.
    """
    n = int(enc["input_ids"].shape[0])
    for start in range(0, n, batch_size):
        rows = slice(start, min(n, start + batch_size))
        width = int(enc["attention_mask"][rows].sum(1).max())
        part = {k: v[rows, :width] for k, v in enc.items()}
        (x,) = model.run_sites(part, [site])
        yield rows, x.float()


def sites_batches(
    model: Model, sites: Sequence[str], enc: Mapping[str, torch.Tensor], batch_size: int
) -> Iterator[tuple[slice, dict[str, torch.Tensor]]]:
    """Like :func:`site_batches` for several sites read in one pass: ``(rows, {site: x_BLD})``."""
    names = [s.name for s in model.parse_sites(list(dict.fromkeys(sites)))]
    n = int(enc["input_ids"].shape[0])
    for start in range(0, n, batch_size):
        rows = slice(start, min(n, start + batch_size))
        width = int(enc["attention_mask"][rows].sum(1).max())
        part = {k: v[rows, :width] for k, v in enc.items()}
        values = model.run_sites(part, names)
        yield rows, {name: x.float() for name, x in zip(names, values, strict=True)}


def encode_rows(sae: SAE, x_TD: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """``sae.encode`` of token rows, ``chunk`` at a time, no gradients (float32 [T, d_sae], on ``x_TD``'s device)."""
    out = []
    with torch.no_grad():
        for start in range(0, x_TD.shape[0], chunk):
            out.append(sae.encode(x_TD[start : start + chunk]).float().to(x_TD.device))
    return torch.cat(out) if out else torch.zeros(0, sae.d_sae)


def check_sae(sae: Any) -> None:
    """A TypeError unless ``sae`` is an interplab SAE (something with ``encode`` and ``d_sae``)."""
    if not (hasattr(sae, "encode") and hasattr(sae, "d_sae") and hasattr(sae, "check_fits")):
        raise TypeError(f"sae must be an interplab SAE (ilab.SAE), got {type(sae).__name__}.")


def check_choices(name: str, values: Sequence[str], valid: Sequence[str]) -> list[str]:
    """``values`` as a list when each is one of ``valid``; a ValueError naming the first bad one and the choices."""
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, (list, tuple)) or not values:
        raise ValueError(f"{name} must be a non-empty list chosen from {list(valid)}, got {values!r}.")
    for v in values:
        if v not in valid:
            raise ValueError(f"{name}: {v!r} is not one of {list(valid)}.")
    return list(values)
