"""Training one SAE: its architecture and sparsity as keywords, the rest as :func:`~.trainer.train_saes` takes it.

Example
-------
>>> sae = train_sae(store, arch="topk", width=4096, k=32, n_tokens=200_000)
>>> sae = train_sae(model, site="blocks.6.hook_resid_post", corpus="default", n_tokens=500_000)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict, Unpack

from ...data.store import ActivationStore
from ...model.model import Model
from ..base import SAE
from .trainer import train_saes


class TrainOptions(TypedDict, total=False):
    """The keywords :func:`~.trainer.train_saes` takes besides the specs (each with its default there)."""

    n_tokens: int
    batch_size: int
    site: str | None
    corpus: Any
    checkpoint_dir: str | Path | None
    checkpoint_every: int
    dead_tokens: int | None
    resample_every: int | None
    seed: int
    progress: bool
    device: Any


def train_sae(
    source: ActivationStore | Model | str | Path,
    arch: str = "batchtopk",
    width: int = 4096,
    k: int | None = None,
    l1: float | None = None,
    l0: float | None = None,
    lr: float | None = None,
    matryoshka_widths: list[int] | None = None,
    **options: Unpack[TrainOptions],
) -> SAE:
    """Train one SAE on an activation store (or its path) or straight from a model.

    ``arch`` is one of standard, topk, batchtopk, jumprelu, gated, matryoshka; ``k`` is for the TopK
    family, ``l1`` the L1 coefficient (standard, gated), ``l0`` the L0 coefficient (jumprelu),
    ``matryoshka_widths`` the nested prefixes of a matryoshka SAE. The other keywords are those of
    :func:`train_saes` (``n_tokens``, ``batch_size``, ``site``, ``corpus``, ``checkpoint_dir``, ...).

    >>> sae = ilab.train_sae(store, arch="topk", width=4096, k=32, n_tokens=200_000)
    """
    spec: dict[str, Any] = {"arch": arch, "width": width}
    settings = {"k": k, "l1_coefficient": l1, "l0_coefficient": l0, "lr": lr, "matryoshka_widths": matryoshka_widths}
    spec.update({key: value for key, value in settings.items() if value is not None})
    return train_saes(source, [spec], **options)[0]
