"""The pretrained SAE suite shipped for the embedded Gemma 3 270M.

Example
-------
>>> sae = SAE.load("embedded", layer=6)      # BatchTopK, width 4096, blocks.6.hook_resid_post
"""

from __future__ import annotations

from pathlib import Path

from .base import SAE, provide
from .io import load_saelens

SUITE = Path(__file__).parent / "pretrained" / "gemma-3-270m"
#: The transcoders shipped for every layer of the embedded model (``blocks.L.transcoder`` folders).
TRANSCODERS = Path(__file__).parent / "pretrained" / "gemma-3-270m-transcoders"


def embedded_layers() -> list[int]:
    """Layers with a shipped SAE."""
    return sorted(int(p.name.split(".")[1]) for p in SUITE.glob("blocks.*.hook_resid_post") if p.is_dir())


def load_embedded(layer: int | None) -> SAE:
    """The shipped SAE on ``blocks.{layer}.hook_resid_post`` of the embedded model."""
    layers = embedded_layers()
    if layer not in layers:
        raise ValueError(f"No embedded SAE for layer={layer!r}; the suite covers layers {layers}.")
    return load_saelens(SUITE / f"blocks.{layer}.hook_resid_post")


def load_embedded_transcoders() -> list[SAE]:
    """The shipped transcoders of the embedded model, one per layer in order (MLP input -> MLP output)."""
    folders = sorted(TRANSCODERS.glob("blocks.*.transcoder"), key=lambda p: int(p.name.split(".")[1]))
    if not folders:
        raise FileNotFoundError(f"No transcoders at {str(TRANSCODERS)!r}; train them with "
                                "`python -m interplab train-transcoders`.")  # fmt: skip
    return [load_saelens(p) for p in folders]


provide("load_embedded", load_embedded)
