"""The result of a patching grid: plain arrays plus the labels a reader needs.

Example
-------
>>> r = ilab.patching.grid(model, pairs, site="resid_pre")
>>> r.values.shape            # [layers, positions] metric after each patch
>>> r.normalized[-1, -1]      # 0 = corrupted baseline, 1 = clean
>>> r.to_frame().head()
>>> r.save("grid.npz"); ilab.patching.PatchingResult.load("grid.npz")
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import check_int
from ..storage.atomic import atomic_path
from ..storage.readers import Fields, FileError, expect_arrays, expect_values, load_npz, npz_headers, parse_json

ROW_NAMES = ("layer", "latent")
COL_NAMES = ("position", "head")


@dataclass(repr=False)
class PatchingResult:
    """One patching grid.

    ``values[r, c]`` is the metric (averaged over prompt pairs) after patching cell (r, c):
    rows are layers (or SAE latents), columns are token positions (or heads).
    ``method`` is "exact" or "attribution" (a first-order estimate of the same quantity).
    ``top_ids``/``top_probs`` hold the top next tokens of each patched run of the first pair
    (exact grids only). ``n_pairs`` is how many prompt pairs the values average over; ``tokens`` and
    ``corrupt_tokens`` are the first pair's.
    """

    values: np.ndarray
    clean_baseline: float
    corrupt_baseline: float
    site: str  # resid_pre, resid_post, attn_out, mlp_out, heads, latents
    method: str = "exact"
    direction: str = "denoise"
    metric: str = "metric"
    row_name: str = "layer"
    col_name: str = "position"
    rows: list[int] = field(default_factory=list)  # layer index or latent id of each row
    positions: list[int] = field(default_factory=list)  # token position of each column (position grids)
    tokens: list[str] = field(default_factory=list)  # string tokens of the first clean prompt
    corrupt_tokens: list[str] = field(default_factory=list)
    top_ids: np.ndarray | None = None  # int [rows, cols, k]
    top_tokens: list[str] = field(default_factory=list)  # decoded text of each id in top_ids (flat)
    top_probs: np.ndarray | None = None  # float [rows, cols, k]
    layer: int | None = None  # the SAE's layer for latent grids
    row_text: list[str] = field(default_factory=list)  # a label per row (latent labels), "" for none
    n_pairs: int = 1  # prompt pairs averaged over

    def __post_init__(self) -> None:
        self.values = np.asarray(self.values, dtype=np.float32)
        if self.values.ndim != 2:
            raise ValueError(f"values must be 2-D [rows, cols], got shape {self.values.shape}.")
        if not self.rows:
            self.rows = list(range(self.values.shape[0]))
        self.n_pairs = check_int("n_pairs", self.n_pairs, minimum=1)

    # ------------------------------------------------------------- derived
    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.values.shape)

    @property
    def normalized(self) -> np.ndarray:
        """(value - corrupted) / (clean - corrupted): 0 is the corrupted run, 1 the clean run."""
        gap = self.clean_baseline - self.corrupt_baseline
        if abs(gap) < 1e-12:
            return np.full_like(self.values, np.nan)
        return (self.values - self.corrupt_baseline) / gap

    @property
    def col_labels(self) -> list[str]:
        """``"pos:token"`` for position grids, ``"H3"`` for heads."""
        if self.col_name == "head":
            return [f"H{h}" for h in range(self.values.shape[1])]
        return [f"{p}:{self.tokens[p]}" if p < len(self.tokens) else str(p) for p in self.positions]

    @property
    def row_labels(self) -> list[str]:
        prefix = "L" if self.row_name == "layer" else "#"
        text = self.row_text or [""] * len(self.rows)
        return [f"{prefix}{r} · {t}" if t else f"{prefix}{r}" for r, t in zip(self.rows, text, strict=True)]

    def top(self, row: int, col: int) -> list[tuple[str, float]]:
        """Top next tokens (text, probability) of the patched run at cell (row index, column index)."""
        if self.top_ids is None or self.top_probs is None:
            return []
        rows, cols = self.values.shape
        row, col = check_int("row", row, 0, rows - 1), check_int("col", col, 0, cols - 1)
        k = self.top_ids.shape[2]
        flat = (row * self.values.shape[1] + col) * k
        return [(self.top_tokens[flat + j], float(self.top_probs[row, col, j])) for j in range(k)]

    def to_frame(self) -> Any:
        """A long pandas DataFrame: one row per cell with value and normalized value."""
        import pandas as pd

        r, c = np.meshgrid(np.arange(self.values.shape[0]), np.arange(self.values.shape[1]), indexing="ij")
        cols = self.col_labels
        frame = {
            self.row_name: np.asarray(self.rows)[r.ravel()],
            self.col_name: (np.asarray(self.positions)[c.ravel()] if self.col_name == "position" else c.ravel()),
            "label": [cols[i] for i in c.ravel()],
            "value": self.values.ravel(),
            "normalized": self.normalized.ravel(),
        }
        return pd.DataFrame(frame).assign(site=self.site, method=self.method)

    def chart(self) -> Any:
        """Altair: the normalised grid as a heatmap, rows (layers or latents) down and columns across.

        >>> r.chart()
        """
        import altair as alt

        from ..views.charts import offline

        frame = self.to_frame()
        frame["row"] = np.repeat(np.asarray(self.row_labels, dtype=object), self.values.shape[1])
        cells = alt.Chart(frame).mark_rect().encode(
            x=alt.X("label:N", sort=self.col_labels, title=self.col_name), y=alt.Y("row:N", sort=self.row_labels,
            title=self.row_name), color=alt.Color("normalized:Q", scale=alt.Scale(scheme="redblue", domainMid=0,
            reverse=True)), tooltip=["row", "label", alt.Tooltip("value:Q", format=".4g"),
            alt.Tooltip("normalized:Q", format=".3f")])  # fmt: skip
        title = f"{self.method} patching of {self.site} ({self.direction}, {self.metric}; 1 = clean, 0 = corrupted)"
        return offline(cells.properties(title=title, width=max(200, 14 * self.values.shape[1]),
                                        height=max(80, 16 * self.values.shape[0])))  # fmt: skip

    # ------------------------------------------------------------- files
    _META = (
        "clean_baseline", "corrupt_baseline", "site", "method", "direction", "metric", "row_name", "col_name",
        "rows", "positions", "tokens", "corrupt_tokens", "top_tokens", "layer", "row_text", "n_pairs",
    )  # fmt: skip

    def save(self, path: str | os.PathLike) -> Path:
        """Write an ``.npz`` (arrays + JSON metadata) atomically; read it back with :meth:`load`."""
        path = Path(path)
        meta = json.dumps({k: getattr(self, k) for k in self._META})
        arrays: dict[str, Any] = {"values": self.values, "meta": np.frombuffer(meta.encode(), dtype=np.uint8)}
        if self.top_ids is not None and self.top_probs is not None:
            arrays.update(top_ids=self.top_ids.astype(np.int64), top_probs=self.top_probs.astype(np.float32))
        with atomic_path(path, suffix=".npz") as tmp:
            np.savez(tmp, **arrays)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> PatchingResult:
        """Read a file written by :meth:`save` (no pickle), every array header and field checked first."""
        return load_result(Path(path))

    def __repr__(self) -> str:
        rows, cols = self.values.shape
        return (
            f"PatchingResult({self.method} {self.site}, {rows} {self.row_name}s x {cols} {self.col_name}s, "
            f"{self.metric} over {self.n_pairs} pair{'s' if self.n_pairs != 1 else ''}: "
            f"clean {self.clean_baseline:.4g}, corrupted {self.corrupt_baseline:.4g}, "
            f"max normalized {np.nanmax(self.normalized) if self.values.size else float('nan'):.3g})"
        )


_SITES = ("resid_pre", "resid_post", "attn_out", "mlp_out", "heads", "latents")


def load_result(file: Path) -> PatchingResult:
    """A :class:`PatchingResult` from its ``.npz``: arrays and metadata checked against each other."""
    if not file.is_file():
        raise FileNotFoundError(f"No patching result at {str(file)!r}.")
    infos = npz_headers(file)
    unknown = sorted(set(infos) - {"values", "meta", "top_ids", "top_probs"})
    if unknown:
        raise FileError(file, unknown[0], "is not an array of a patching result")
    values = infos.get("values")
    if values is None or len(values.shape) != 2:
        raise FileError(file, "values", "is missing or not a 2-D [rows, cols] array")
    rows, cols = values.shape
    expect_arrays(file, infos, {"values": (None, ("F32", "F64")), "meta": (None, ("U8",))})
    has_top = "top_ids" in infos or "top_probs" in infos
    if has_top:
        ids = infos.get("top_ids")
        k = ids.shape[2] if ids is not None and len(ids.shape) == 3 else -1
        wanted = {"top_ids": ((rows, cols, k), ("I64", "I32")), "top_probs": ((rows, cols, k), ("F32", "F64"))}
        expect_arrays(file, infos, wanted)
    arrays = load_npz(file, " (a patching result)")
    expect_values(file, "values", arrays["values"])
    if has_top:
        expect_values(file, "top_ids", arrays["top_ids"], 0)
        expect_values(file, "top_probs", arrays["top_probs"], 0, maximum=1)
    raw = parse_json(bytes(arrays["meta"]), file, "meta")
    meta = Fields(file, raw, "meta")
    extra = sorted(set(meta.data) - set(PatchingResult._META))
    if extra:
        raise FileError(file, f"meta.{extra[0]}", "is not a field of a patching result")
    row_name = meta.str("row_name", "layer", choices=ROW_NAMES)
    col_name = meta.str("col_name", "position", choices=COL_NAMES)

    def ints(key: str, n: int | None) -> list[int]:
        items = meta.list(key, [])
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in items) or (
            n is not None and items and len(items) != n
        ):
            raise FileError(file, f"meta.{key}", f"must be {n if n is not None else 'a list of'} integers")
        return items

    def strs(key: str, n: int | None = None) -> list[str]:
        items = meta.list(key, [])
        if not all(isinstance(x, str) for x in items) or (n is not None and items and len(items) != n):
            raise FileError(file, f"meta.{key}", f"must be {n if n is not None else 'a list of'} strings")
        return items

    k = infos["top_ids"].shape[2] if "top_ids" in infos else 0
    fields = {
        "clean_baseline": meta.float("clean_baseline"), "corrupt_baseline": meta.float("corrupt_baseline"),
        "site": meta.str("site", choices=_SITES),
        "method": meta.str("method", "exact", choices=("exact", "attribution")),
        "direction": meta.str("direction", "denoise", choices=("denoise", "noise")),
        "metric": meta.str("metric", "metric", max_len=200), "row_name": row_name, "col_name": col_name,
        "rows": ints("rows", rows), "positions": ints("positions", cols if col_name == "position" else None),
        "tokens": strs("tokens"), "corrupt_tokens": strs("corrupt_tokens"),
        "top_tokens": strs("top_tokens", rows * cols * k if has_top else None),
        "layer": meta.int("layer", None, minimum=0), "row_text": strs("row_text", rows),
        "n_pairs": meta.int("n_pairs", 1, minimum=1),
    }  # fmt: skip
    if has_top and len(fields["top_tokens"]) != rows * cols * k:
        raise FileError(file, "meta.top_tokens", f"must hold {rows * cols * k} strings (one per top token)")
    top: dict[str, Any] = {name: arrays[name] for name in ("top_ids", "top_probs") if name in arrays}
    return PatchingResult(values=arrays["values"], **fields, **top)
