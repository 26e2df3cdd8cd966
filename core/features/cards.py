"""What a latent's dashboard card shows beyond :class:`FeatureData`'s arrays: its activation histogram as a
chart, and a text of the user's read by the SAE (the latent's activation per token and the top latents there).

Example
-------
>>> histogram_chart(data, 123, label="French city names")          # an altair.Chart
>>> out = text_latents(sae, model, "Paris is in France", latent=123)
>>> out["acts"], out["top_ids"][:, 0]                                # [n_tok], [n_tok]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..checks import check_latent
from .data import FeatureData
from .density import MAX_DENSITY, check_max_density, latent_density, top_latents
from .search import latent_activations

if TYPE_CHECKING:
    from ..model.model import Model
    from ..saes.base import SAE

#: Latents listed per token of a text.
TOP_LATENTS = 5
#: Characters of a text read (the rest is left out).
MAX_CHARS = 2000


def histogram_chart(data: FeatureData, latent: int, label: str = "") -> Any:
    """A latent's activation histogram (tokens where it fires) as an ``altair.Chart``, titled with its label.

    The chart has altair's default renderer; :func:`interplab.core.views.charts.offline` makes it render offline.

    >>> histogram_chart(data, 2, "second").to_dict()["mark"]["type"]
    'bar'
    """
    import altair as alt
    import pandas as pd

    i = check_latent(latent, int(data.d_sae))
    edges = np.asarray(data.hist_edges[i], dtype=np.float64)
    counts = np.asarray(data.hist_counts[i])
    frame = pd.DataFrame({"start": edges[:-1], "end": edges[1:], "count": counts})
    title = f"latent {i}" + (f" · {label}" if label else "")
    return (
        alt.Chart(frame, title=title)
        .mark_bar()
        .encode(
            x=alt.X("start:Q", title="activation (when firing)"),
            x2="end:Q",
            y=alt.Y("count:Q", title="tokens"),
            tooltip=["start", "end", "count"],
        )
        .properties(width=360, height=160)
    )


def text_latents(
    sae: SAE,
    model: Model,
    text: str,
    latent: int,
    top: int = TOP_LATENTS,
    *,
    max_density: float | None = MAX_DENSITY,
    density: Any = None,
) -> dict[str, Any]:
    """Run ``text`` (its first :data:`MAX_CHARS` characters) through the model and SAE: ``latent``'s activation
    per token and each token's ``top`` latents, BOS left out, latents firing on more than ``max_density`` of
    tokens left out of the lists (density: ``density``, FeatureData or one value per latent, else the SAE's
    stored firing rates; see :mod:`interplab.core.features.density`).

    Returns ``{"tokens": [str], "acts": [n_tok] float32, "top_ids": [n_tok, top] int32, "top_values": [n_tok,
    top] float32, "density_filter": str}``.

    >>> text_latents(sae, model, "The cat sat", latent=3, density=data)["tokens"]
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"try_text needs a non-empty string; got {text!r}.")
    i = check_latent(latent, int(sae.d_sae))
    max_density = check_max_density(max_density)
    dens = latent_density(sae, density)
    tokens, lat = latent_activations(sae, model, text[:MAX_CHARS])
    top_ids, values = top_latents(lat, top, dens.dense(max_density))
    return {
        "tokens": tokens,
        "acts": np.ascontiguousarray(lat[:, i], dtype=np.float32),
        "top_ids": top_ids,
        "top_values": values,
        "density_filter": dens.describe(max_density),
    }
