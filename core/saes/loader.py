"""An SAE from any of its sources: a local file or folder, the packaged suite, or a SAELens release.

:func:`load_sae` picks the source from its arguments: ``"embedded"`` with ``layer=`` is the suite
trained on the embedded model (``pretrained.py``), a name with an id is a SAELens release
(``releases.py``, ``transcoder_releases.py``), anything else is a path (``io.py`` detects the format).

Example
-------
>>> sae = load_sae("my_sae/")                                                   # SAELens, Gemma Scope, ...
>>> sae = load_sae("embedded", layer=6)                                         # the packaged suite
>>> sae = load_sae("gemma-scope-2-270m-pt-res", "layer_5_width_16k_l0_medium")  # a release and an SAE id
"""

from __future__ import annotations

import os
from pathlib import Path

from . import transcoder_releases  # noqa: F401  (adds the transcoder releases and their builder)
from .base import SAE
from .io import load_path
from .pretrained import load_embedded
from .releases import RELEASES, load_release

EMBEDDED = "embedded"


def load_sae(
    path_or_name: str | os.PathLike[str],
    sae_id: str | None = None,
    *,
    layer: int | None = None,
    site: str | None = None,
    local_files_only: bool | None = None,
) -> SAE:
    """Load an SAE or a transcoder from a local path, the packaged suite or a SAELens release.

    ``path_or_name`` is a SAELens folder (``cfg.json`` + ``sae_weights.safetensors``), a Gemma Scope
    ``params.npz`` (or its folder), a dictionary_learning folder (``ae.pt`` + ``config.json``),
    ``"embedded"`` with ``layer=`` (the suite trained on the embedded model), or a SAELens release
    name with ``sae_id`` (fetched from the Hugging Face hub, or found in its cache offline;
    ``local_files_only`` says which). ``site`` replaces the site a local file names.

    >>> sae = ilab.load_sae("embedded", layer=6)
    >>> tc = ilab.load_sae("gemma-scope-2-270m-pt-transcoders-all", "layer_6_width_16k_l0_small_affine")
    """
    if not isinstance(path_or_name, (str, os.PathLike)):
        raise TypeError(f"path_or_name must be a path, 'embedded' or a SAELens release name, "
                        f"got {type(path_or_name).__name__}.")  # fmt: skip
    if path_or_name == EMBEDDED:
        _refuse_extra(EMBEDDED, sae_id=sae_id, site=site, local_files_only=local_files_only)
        return load_embedded(layer)
    if sae_id is not None:
        _refuse_extra("a release", layer=layer, site=site)
        return _release_sae(str(path_or_name), sae_id, local_files_only)
    _refuse_extra("a path", layer=layer, local_files_only=local_files_only)
    if isinstance(path_or_name, str) and path_or_name in RELEASES and not Path(path_or_name).exists():
        ids = RELEASES[path_or_name].ids
        raise ValueError(f"{path_or_name!r} is a SAELens release: give one of its {len(ids)} SAE ids too, "
                         f"e.g. load_sae({path_or_name!r}, {ids[0]!r}).")  # fmt: skip
    return load_path(Path(path_or_name), site=site)


def _refuse_extra(source: str, **given: object) -> None:
    """A clear error for a keyword that the chosen source does not read (instead of ignoring it)."""
    for name, value in given.items():
        if value is not None:
            hint = {"sae_id": "a release", "layer": "'embedded'", "site": "a local path",
                    "local_files_only": "a release"}[name]  # fmt: skip
            raise ValueError(f"{name}={value!r} is for {hint}, not for {source}.")


def _release_sae(name: str, sae_id: str, local_files_only: bool | None) -> SAE:
    """SAE ``sae_id`` of release ``name``; an error where the release builds something other than an SAE."""
    built = load_release(name, sae_id, local_files_only)
    if not isinstance(built, SAE):
        raise ValueError(f"{name!r} holds {type(built).__name__} objects, not SAEs: "
                         "load them with interplab.core.saes.releases.load_release.")  # fmt: skip
    return built
