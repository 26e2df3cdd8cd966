"""Feature data's folder: its format (``meta.json`` + one ``.npy`` per array), every array checked against the
metadata and each other before it is used, and the folder written and swapped into place whole.

Example
-------
>>> write_arrays(Path("dash/"), meta, arrays, extra={})
>>> infos = check_array_headers(Path("dash/"), d_sae=4096, context=64, known={"n_top": 20})
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..storage.atomic import atomic_folder, leftover_target
from ..storage.readers import ArrayInfo, FileError, dtype_name, expect_values, in_folder, npy_header
from .labels import FILE as LABELS_FILE
from .labels import check_labels

FORMAT = "interplab-features"
#: The running state of an unfinished pass, inside its output folder (one file, see interplab.core.storage.resumable).
CHECKPOINT = ".checkpoint.safetensors"
#: Array fields and their dtypes, in the order they are saved.
ARRAYS: dict[str, Any] = {
    "density": np.float32,
    "max_act": np.float32,
    "mean_act": np.float32,
    "hist_edges": np.float32,
    "hist_counts": np.int64,
    "top_tokens": np.int32,
    "top_acts": np.float32,
    "top_max": np.float32,
    "top_where": np.int64,
    "quantile_tokens": np.int32,
    "quantile_acts": np.float32,
    "quantile_max": np.float32,
    "quantile_where": np.int64,
    "logit_top_ids": np.int32,
    "logit_top_values": np.float32,
    "logit_bottom_ids": np.int32,
    "logit_bottom_values": np.float32,
    "neighbour_ids": np.int32,
    "neighbour_sims": np.float32,
}


def check_array_values(root: Path, d_sae: int, arrays: dict[str, np.ndarray], strings: dict[int, str],
                       labels: dict[int, str]) -> None:  # fmt: skip
    """Every number in its range (the readers' :func:`expect_values`): neighbours are latents of the SAE, token ids
    (-1: no token) ones the data holds a string for, statistics finite, labels no longer than labels.json's."""
    expect_values(root / "neighbour_ids.npy", "neighbour_ids", arrays["neighbour_ids"], 0, d_sae, "d_sae")
    for name in ("max_act", "mean_act", "neighbour_sims", "hist_edges"):
        expect_values(root / f"{name}.npy", name, arrays[name])
    expect_values(root / "density.npy", "density", arrays["density"], 0, maximum=1)
    expect_values(root / "hist_counts.npy", "hist_counts", arrays["hist_counts"], 0)
    known = np.fromiter(strings, dtype=np.int64, count=len(strings))
    for name in ("top_tokens", "quantile_tokens", "logit_top_ids", "logit_bottom_ids"):
        ids = arrays[name]
        expect_values(root / f"{name}.npy", name, ids, -1)
        unknown = (ids >= 0) & ~np.isin(ids, known)
        if unknown.any():
            at = [int(i) for i in np.argwhere(unknown)[0]]
            raise FileError(root / f"{name}.npy", name, f"holds token {int(ids[tuple(at)])} at {at}, which "
                                                        "meta.json's token_strings does not name")  # fmt: skip
    check_labels(root / "meta.json", labels, where="labels")


def check_array_headers(root: Path, d_sae: int, context: int, known: dict[str, int]) -> dict[str, ArrayInfo]:
    """Every array's header: there, its dtype, and shapes that agree with each other and the metadata.

    ``known`` sizes (``n_top``, ``n_quantile``, ``n_bins``, ``n_logit`` from the saved settings) are the
    reference; others are taken from the first array that has them.
    """
    infos = {}
    for name, dtype in ARRAYS.items():
        file = in_folder(root, f"{name}.npy")
        if not file.is_file():
            raise FileError(root, name, f"is missing: the folder lacks {name}.npy")
        info = npy_header(file)
        if info.dtype != dtype_name(np.dtype(dtype)):
            raise FileError(file, name, f"has dtype {info.dtype}, expected {dtype_name(np.dtype(dtype))}")
        infos[name] = info
    sizes: dict[str, int] = {"bins": known["n_bins"]} if "n_bins" in known else {}
    sizes.update({k: v for k, v in known.items() if k in ("n_top", "n_quantile", "n_logit")})

    def shape(name: str, *dims: Any) -> None:
        got = infos[name].shape
        want: list[int] = []
        for dim in dims:
            if isinstance(dim, str):  # a size named by the first array that has it
                sizes.setdefault(dim, got[len(want)] if len(got) > len(want) else -1)
                dim = sizes[dim]
            want.append(dim)
        if got != tuple(want):
            raise FileError(root / f"{name}.npy", name, f"has shape {list(got)}, expected {want} (d_sae={d_sae}, "
                                                        f"context={context})")  # fmt: skip

    for name in ("density", "max_act", "mean_act"):
        shape(name, d_sae)
    shape("hist_counts", d_sae, "bins")
    shape("hist_edges", d_sae, sizes["bins"] + 1)
    for prefix, k in (("top", "n_top"), ("quantile", "n_quantile")):
        shape(f"{prefix}_max", d_sae, k)
        shape(f"{prefix}_tokens", d_sae, k, context)
        shape(f"{prefix}_acts", d_sae, k, context)
        shape(f"{prefix}_where", d_sae, k, 2)
    for name in ("logit_top_ids", "logit_top_values", "logit_bottom_ids", "logit_bottom_values"):
        shape(name, d_sae, "n_logit")
    shape("neighbour_ids", d_sae, "n_near")
    shape("neighbour_sims", d_sae, "n_near")
    return infos


# ------------------------------------------------------------------ folders
def check_target(path: Path) -> None:
    """Refuse a folder holding anything but feature data: saving replaces the whole folder.

    What interrupted writes leave there (see :func:`interplab.core.storage.atomic.leftover_target`) does not count.
    """
    if not path.exists():
        return
    ours = {"meta.json", CHECKPOINT, LABELS_FILE}
    other = [p.name for p in path.iterdir() if p.name not in ours and p.suffix != ".npy"
             and leftover_target(p.name) is None] if path.is_dir() else [""]  # fmt: skip
    if other:
        raise ValueError(
            f"{str(path)!r} holds other files ({sorted(other)[:5]}); feature data replaces its folder, "
            "so give a new or empty folder."
        )


def write_arrays(path: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray], extra: dict[str, bytes]) -> None:
    """Write meta.json + one .npy per array (+ ``extra`` files) as a folder, swapped into place whole."""
    check_target(path)
    with atomic_folder(path) as tmp:
        for name, arr in arrays.items():
            np.save(tmp / f"{name}.npy", np.ascontiguousarray(arr), allow_pickle=False)
        for name, data in extra.items():
            (tmp / name).write_bytes(data)
        (tmp / "meta.json").write_text(json.dumps(meta, allow_nan=False))
