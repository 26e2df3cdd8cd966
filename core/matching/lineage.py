"""Lineage: follow latents through SAEs at consecutive layers by chaining their matches.

Example
-------
>>> chain = match_chain([sae5, sae6, sae7, sae8])      # 3 Match objects
>>> lineage(chain, 12)                                 # latent 12 of layer 5 and its heirs
[{'step': 0, 'site': 'blocks.5.hook_resid_post', 'latent': 12, 'error': 0.0}, ...]
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..checks import check_latent
from ..saes import SAE
from .folding import Match, match


def match_chain(saes: Sequence[SAE], progress: bool = True, **kwargs: Any) -> list[Match]:
    """Match each SAE to the next one (``saes`` in layer order); keywords go to :func:`match`.

    >>> chain = ilab.matching.match_chain([sae5, sae6, sae7])
    """
    if isinstance(saes, SAE) or not isinstance(saes, Sequence) or len(saes) < 2:
        raise ValueError(f"match_chain needs a list of at least two SAEs in layer order, got {saes!r:.80}.")
    for i, sae in enumerate(saes):
        if not isinstance(sae, SAE):
            raise TypeError(f"saes[{i}] must be an interplab SAE, got {type(sae).__name__}.")
    return [match(a, b, progress=progress, **kwargs) for a, b in itertools.pairwise(saes)]


def _check_chain(chain: Sequence[Match]) -> None:
    if not isinstance(chain, Sequence) or not chain or not all(isinstance(m, Match) for m in chain):
        raise TypeError("chain must be a non-empty list of Match objects (from match_chain).")


def paths(chain: Sequence[Match]) -> tuple[np.ndarray, np.ndarray]:
    """Every latent's path: ``ids`` [steps+1, M] (latent at each SAE) and ``errors`` [steps, M] (each hop's MSE)."""
    _check_chain(chain)
    n = len(chain[0].perm)
    ids = np.empty((len(chain) + 1, n), dtype=np.int64)
    errors = np.empty((len(chain), n), dtype=np.float32)
    ids[0] = np.arange(n)
    for s, m in enumerate(chain):
        errors[s] = m.error[ids[s]]
        ids[s + 1] = m.perm[ids[s]]
    return ids, errors


def lineage(chain: Sequence[Match], latent: int) -> list[dict[str, Any]]:
    """Latent ``latent`` of the first SAE and the latent it matches at each later SAE, with each hop's error."""
    _check_chain(chain)
    latent = check_latent(latent, len(chain[0].perm))
    out: list[dict[str, Any]] = [{"step": 0, "site": chain[0].site_a, "latent": latent, "error": 0.0}]
    for s, m in enumerate(chain):
        latent = int(m.perm[latent])
        out.append({"step": s + 1, "site": m.site_b, "latent": latent, "error": float(m.error[out[-1]["latent"]])})
    return out


def compose(chain: Sequence[Match]) -> np.ndarray:
    """The permutation from the first SAE's latents to the last one's (``perm[i]`` at the end of the chain)."""
    ids, _ = paths(chain)
    return ids[-1]
