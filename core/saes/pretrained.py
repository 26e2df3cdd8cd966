"""The pretrained SAE suite shipped for the embedded Gemma 3 270M.

Example
-------
>>> sae = load_embedded(6)      # BatchTopK, width 4096, blocks.6.hook_resid_post
>>> clt = load_embedded_clt()  # the cross-layer transcoder (TopK), every layer's MLP
"""

from __future__ import annotations

import importlib
from pathlib import Path

from .base import SAE
from .clt import CrossLayerTranscoder
from .io import load_saelens

#: The data packages holding the weights (built from ``packages/`` in the repository; ``interplab[embedded]``).
SUITE_PACKAGE = ("interplab_saes_gemma_3_270m", "interplab-saes-gemma-3-270m")
TRANSCODERS_PACKAGE = ("interplab_transcoders_gemma_3_270m", "interplab-transcoders-gemma-3-270m")
#: The transcoders' data package carries the cross-layer transcoder from this version on.
CLT_SINCE = "0.1.1"


def data_folder(package: tuple[str, str]) -> Path:
    """The weights folder of an installed data package, or an error naming what to install.

    >>> data_folder(SUITE_PACKAGE).name
    'gemma-3-270m'
    """
    module, dist = package
    try:
        return Path(importlib.import_module(module).FOLDER)
    except ModuleNotFoundError as err:
        if err.name != module:
            raise
        raise ModuleNotFoundError(
            f"The embedded model's packaged weights are in the package {dist!r}, which is not installed: "
            f'pip install "interplab[embedded]" (or pip install {dist}).',
            name=module,
        ) from None


def suite_folder() -> Path:
    """The packaged SAE suite's folder (``blocks.L.hook_resid_post`` SAELens folders)."""
    return data_folder(SUITE_PACKAGE)


def transcoders_folder() -> Path:
    """The packaged transcoders' folder (``blocks.L.transcoder`` SAELens folders, one per layer)."""
    return data_folder(TRANSCODERS_PACKAGE)


def embedded_layers() -> list[int]:
    """Layers with a shipped SAE."""
    return sorted(int(p.name.split(".")[1]) for p in suite_folder().glob("blocks.*.hook_resid_post") if p.is_dir())


def load_embedded(layer: int | None) -> SAE:
    """The shipped SAE on ``blocks.{layer}.hook_resid_post`` of the embedded model (``load_sae("embedded", layer=L)``).

    >>> sae = load_embedded(6)
    """
    layers = embedded_layers()
    if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int)):
        raise TypeError(f"layer must be an integer, one of {layers}; got {type(layer).__name__}: {layer!r}.")
    if layer not in layers:
        raise ValueError(f"No embedded SAE for layer={layer!r}; the suite covers layers {layers}.")
    return load_saelens(suite_folder() / f"blocks.{layer}.hook_resid_post")


def load_embedded_transcoders() -> list[SAE]:
    """The shipped transcoders of the embedded model, one per layer in order (MLP input -> MLP output)."""
    folder = transcoders_folder()
    folders = sorted(folder.glob("blocks.*.transcoder"), key=lambda p: int(p.name.split(".")[1]))
    if not folders:
        raise FileNotFoundError(f"No transcoders at {str(folder)!r}; train them with "
                                "`python -m interplab train-transcoders`.")  # fmt: skip
    return [load_saelens(p) for p in folders]


def clt_folder() -> Path:
    """The packaged cross-layer transcoder's folder (circuit-tracer's layout, ``save_clt``), or an error naming
    the data package version that carries it.

    >>> clt_folder().name
    'gemma-3-270m-clt'
    """
    data_folder(TRANSCODERS_PACKAGE)  # names the package when it is not installed
    folder = getattr(importlib.import_module(TRANSCODERS_PACKAGE[0]), "CLT_FOLDER", None)
    if folder is None:
        raise ModuleNotFoundError(
            f"The installed {TRANSCODERS_PACKAGE[1]!r} predates the cross-layer transcoder: "
            f'pip install "{TRANSCODERS_PACKAGE[1]}>={CLT_SINCE}" (or "interplab[embedded]").',
            name=TRANSCODERS_PACKAGE[0],
        )
    return Path(folder)


def load_embedded_clt() -> CrossLayerTranscoder:
    """The shipped cross-layer transcoder of the embedded model: each layer's encoder reads that layer's MLP input,
    its decoders write to that layer's and every later layer's MLP output.

    >>> clt = load_embedded_clt()
    >>> clt.n_layers, clt.d_sae
    """
    from .clt_io import load_clt

    folder = clt_folder()
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"No cross-layer transcoder at {str(folder)!r}; train it with "
                                "`python -m interplab train-clt`.")  # fmt: skip
    return load_clt(folder)
