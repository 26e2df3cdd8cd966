"""Data for FeatureFlow: latents followed across layers by chained SAE matches, as columns, nodes and edges.

Takes the matches of :func:`interplab.core.matching.match_chain` (anything with ``perm``, ``error``,
``site_a`` and ``site_b``), so this module needs nothing above the views layer.

Example
-------
>>> data = flow_data(chain, latents=[12, 40], labels=[{12: "the"}, {}, {}])
>>> data["columns"], data["nodes"][0], data["edges"][0]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..checks import check_latent


def _column_map(values: Any, n_columns: int, what: str) -> list[Mapping[int, Any]]:
    if values is None:
        return [{} for _ in range(n_columns)]
    if not isinstance(values, Sequence) or len(values) != n_columns:
        raise ValueError(f"{what} must be a list of {n_columns} dicts (one per layer: latent -> value), "
                         f"got {type(values).__name__}.")  # fmt: skip
    for v in values:
        if not isinstance(v, Mapping):
            raise TypeError(f"{what} must hold dicts (latent -> value), got {type(v).__name__}.")
    return list(values)


def flow_data(
    chain: Sequence[Any], latents: int | Sequence[int] = 0, labels: Sequence[Mapping[int, str]] | None = None,
    top_tokens: Sequence[Mapping[int, Sequence[str]]] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Columns (one per SAE), nodes (one per latent reached in each column) and edges (each hop, with its
    error and a quality in (0, 1]: 1 for an exact match, 0.5 at the chain's median error).

    ``labels[c]`` and ``top_tokens[c]`` describe latents of column ``c``.
    """
    if not isinstance(chain, Sequence) or not chain or not all(hasattr(m, "perm") for m in chain):
        raise TypeError("chain must be a non-empty list of matches (ilab.matching.match_chain).")
    n = len(chain[0].perm)
    starts = [latents] if isinstance(latents, (int, np.integer)) else list(latents)
    if not starts:
        raise ValueError("Give at least one latent to follow.")
    starts = [check_latent(i, n) for i in starts]
    columns = [chain[0].site_a or "SAE 0"] + [m.site_b or f"SAE {i + 1}" for i, m in enumerate(chain)]
    labels_c = _column_map(labels, len(columns), "labels")
    tops_c = _column_map(top_tokens, len(columns), "top_tokens")
    median = float(np.median(np.concatenate([np.asarray(m.error, dtype=np.float64) for m in chain]))) or 1.0
    nodes: dict[tuple[int, int], dict[str, Any]] = {}
    edges: list[dict[str, Any]] = []

    def node(column: int, latent: int, row: int) -> str:
        key = (column, latent)
        if key not in nodes:
            nodes[key] = {"id": f"{column}:{latent}", "column": column, "latent": latent, "row": row,
                          "label": str(labels_c[column].get(latent, "") or ""),
                          "tops": [str(t) for t in list(tops_c[column].get(latent, []))[:8]]}  # fmt: skip
        return nodes[key]["id"]

    for row, start in enumerate(starts):
        latent = start
        source = node(0, latent, row)
        for c, m in enumerate(chain):
            error = float(m.error[latent])
            latent = int(m.perm[latent])
            target = node(c + 1, latent, row)
            edges.append({"source": source, "target": target, "error": error,
                          "quality": float(median / (median + error))})  # fmt: skip
            source = target
    return {"columns": columns, "nodes": list(nodes.values()), "edges": edges}
