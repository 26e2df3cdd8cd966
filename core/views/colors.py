"""Colour scales for every heatmap-like widget: the numbers here, the drawing in ``widgets/js/shared/scale.js``.

A :class:`ColorScale` says how a value becomes a colour:

* ``"sequential"``: transparent at ``vmin``, full colour at ``vmax`` (values outside are clipped);
* ``"diverging"``: transparent at ``center``, blue towards ``vmin``, orange towards ``vmax``; each
  side runs over its own extent, so an explicit ``vmin``/``vmax`` may make it asymmetric.

:func:`color_scale` resolves the user's options (``scale``, ``vmin``, ``vmax``, ``center``, any of them
left ``None``) against the data. The defaults:

* ``scale="auto"`` is diverging around 0 when the values have both signs, else sequential;
* sequential runs from 0 (or the minimum, when some value is negative) to the maximum;
* diverging centres on ``center`` (default 0) and is symmetric: the larger distance to either end
  of the data sets both ends;
* entries masked out by ``exclude`` (BOS tokens, by default in the heatmaps: its activation is an
  outlier that would wash out every other token) do not set the range; they are still drawn,
  clipped to its ends.

Widgets send a scale to the browser as four numbers (:meth:`ColorScale.to_list`, or
:func:`scales_payload` for one per column); ``ilabColor(value, scale)`` and ``ilabLegend(scale)``
draw them.

Example
-------
>>> color_scale(np.array([-668.0, -400.0, -57.0]))                       # one sign: sequential
ColorScale(kind='sequential', vmin=-668.0, vmax=-57.0, center=-668.0)
>>> color_scale(np.array([-668.0, -400.0, -57.0]), center=-400.0)        # diverging around -400
ColorScale(kind='diverging', vmin=-743.0, vmax=-57.0, center=-400.0)
>>> color_scale(np.array([1000.0, 2.0, 0.5]), exclude=np.array([True, False, False])).vmax   # BOS left out
2.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

SCALES = ("auto", "sequential", "diverging")
KINDS = ("sequential", "diverging")

#: The first token of a document is left out of colour scales when it is one of these.
BOS_STRINGS = frozenset({"<bos>", "<s>", "<|endoftext|>", "<|begin_of_text|>", "<|startoftext|>", "<|im_start|>"})


@dataclass(frozen=True)
class ColorScale:
    """A resolved colour scale: ``kind`` ("sequential" or "diverging"), its ends and centre.

    ``center`` only matters for a diverging scale (it is ``vmin`` for a sequential one).
    """

    kind: str
    vmin: float
    vmax: float
    center: float

    def to_list(self) -> list[float]:
        """``[kind code (0 sequential, 1 diverging), vmin, center, vmax]``: what ``ilabColor`` reads."""
        return [float(KINDS.index(self.kind)), self.vmin, self.center, self.vmax]

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{"kind", "vmin", "center", "vmax"}`` (``ilabColor`` reads this too)."""
        return {"kind": self.kind, "vmin": self.vmin, "center": self.center, "vmax": self.vmax}

    def position(self, values: Any) -> np.ndarray:
        """Where values fall on the scale: 0..1 (sequential) or -1..1 (diverging), as the browser computes it.

        >>> ColorScale("diverging", -4.0, 2.0, 0.0).position([-2.0, 1.0, 5.0]).tolist()
        [-0.5, 0.5, 1.0]
        """
        v = np.asarray(values, dtype=np.float64)
        if self.kind == "diverging":
            up = (v - self.center) / (self.vmax - self.center) if self.vmax > self.center else np.zeros_like(v)
            down = (v - self.center) / (self.center - self.vmin) if self.vmin < self.center else np.zeros_like(v)
            return np.clip(np.where(v >= self.center, up, down), -1.0, 1.0)
        if not self.vmax > self.vmin:
            return np.zeros_like(v)
        return np.clip((v - self.vmin) / (self.vmax - self.vmin), 0.0, 1.0)


def check_scale_options(
    scale: Any = "auto", vmin: Any = None, vmax: Any = None, center: Any = None
) -> tuple[str, float | None, float | None, float | None]:
    """Validate colour options before any work: a ValueError naming the bad value and the valid choices.

    >>> check_scale_options("diverging", vmin=-1, vmax=1)
    ('diverging', -1.0, 1.0, None)
    """
    if scale not in SCALES:
        raise ValueError(f"scale={scale!r} is not one of {SCALES}.")
    out: list[float | None] = []
    for name, value in (("vmin", vmin), ("vmax", vmax), ("center", center)):
        if value is None:
            out.append(None)
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number or None, got {value!r}.")
        out.append(float(value))
    lo, hi, c = out
    if lo is not None and hi is not None and not lo < hi:
        raise ValueError(f"vmin must be below vmax, got vmin={lo} and vmax={hi}.")
    if c is not None and scale == "sequential":
        raise ValueError(f"center={c} only applies to a diverging scale; give scale='diverging' (or leave it 'auto').")
    sides = (("vmin", lo, lo is None or c is None or lo < c), ("vmax", hi, hi is None or c is None or hi > c))
    for name, bound, ok in sides:
        if not ok:
            raise ValueError(f"{name}={bound} must lie on its side of center={c}.")
    return scale, lo, hi, c


def data_range(values: Any, exclude: Any = None) -> tuple[float, float]:
    """Finite minimum and maximum of ``values`` (entries where ``exclude`` is True left out); (0, 0) if none."""
    v = np.asarray(values, dtype=np.float64)
    if exclude is not None:
        keep = ~np.broadcast_to(np.asarray(exclude, dtype=bool), v.shape)
        v = v[keep]
    v = v[np.isfinite(v)]
    if v.size == 0:
        return 0.0, 0.0
    return float(v.min()), float(v.max())


def resolve_scale(
    lo: float,
    hi: float,
    scale: str = "auto",
    vmin: float | None = None,
    vmax: float | None = None,
    center: float | None = None,
) -> ColorScale:
    """The :class:`ColorScale` for data spanning ``[lo, hi]`` under the user's options (see the module doc)."""
    scale, vmin, vmax, center = check_scale_options(scale, vmin, vmax, center)
    if scale == "auto":
        a, b = (lo if vmin is None else vmin), (hi if vmax is None else vmax)
        scale = "diverging" if center is not None or a < 0 < b else "sequential"
    if scale == "diverging":
        c = 0.0 if center is None else center
        for name, bound, ok in (("vmin", vmin, vmin is None or vmin < c), ("vmax", vmax, vmax is None or vmax > c)):
            if not ok:
                raise ValueError(
                    f"{name}={bound} must lie on its side of the diverging scale's center {c}; give center=."
                )
        half = max(hi - c, c - lo, 0.0)
        if half == 0.0:  # constant data at the centre: any range draws it transparent
            half = 1.0
        a = c - half if vmin is None else vmin
        b = c + half if vmax is None else vmax
        return ColorScale("diverging", float(a), float(b), float(c))
    a = vmin if vmin is not None else (lo if lo < 0 or hi <= 0 else 0.0)
    b = vmax if vmax is not None else hi
    if not b > a:  # constant data: keep a valid range that colours nothing above vmin
        if vmax is None:
            b = a + 1.0 if vmin is not None or a != 0.0 else 1.0
        else:
            a = b - 1.0
    return ColorScale("sequential", float(a), float(b), float(a))


def color_scale(
    values: Any,
    *,
    scale: str = "auto",
    vmin: float | None = None,
    vmax: float | None = None,
    center: float | None = None,
    exclude: Any = None,
) -> ColorScale:
    """Resolve a colour scale for ``values`` (any array; ``exclude`` masks entries out of the range).

    >>> color_scale([0.0, 3.0, 1.0])
    ColorScale(kind='sequential', vmin=0.0, vmax=3.0, center=0.0)
    """
    check_scale_options(scale, vmin, vmax, center)
    lo, hi = data_range(values, exclude)
    return resolve_scale(lo, hi, scale, vmin, vmax, center)


def column_scales(
    values_TF: np.ndarray,
    *,
    scale: str = "auto",
    vmin: float | None = None,
    vmax: float | None = None,
    center: float | None = None,
    exclude_T: np.ndarray | None = None,
) -> list[ColorScale]:
    """One scale per column of ``values_TF`` [tokens, features], rows where ``exclude_T`` is True left out."""
    check_scale_options(scale, vmin, vmax, center)
    v = np.asarray(values_TF, dtype=np.float32)
    if v.ndim != 2:
        raise ValueError(f"column_scales takes [tokens, features] values, got shape {v.shape}.")
    if exclude_T is not None and bool(np.any(exclude_T)) and not bool(np.all(exclude_T)):
        v = v[~np.asarray(exclude_T, dtype=bool)]
    if v.shape[0] == 0:
        lo_F = hi_F = np.zeros(v.shape[1])
    else:
        finite = np.isfinite(v)
        lo_F = np.where(finite, v, np.inf).min(0)
        hi_F = np.where(finite, v, -np.inf).max(0)
        lo_F, hi_F = np.where(np.isfinite(lo_F), lo_F, 0.0), np.where(np.isfinite(hi_F), hi_F, 0.0)
    return [resolve_scale(float(a), float(b), scale, vmin, vmax, center) for a, b in zip(lo_F, hi_F)]


def scales_payload(scales: list[ColorScale]) -> np.ndarray:
    """Scales as a float32 array [n, 4] (kind code, vmin, center, vmax), for a binary widget trait."""
    return np.asarray([s.to_list() for s in scales], dtype=np.float32).reshape(len(scales), 4)


def bos_mask(tokens: list[str], doc_starts: np.ndarray) -> np.ndarray:
    """True at the first token of each document when it is a beginning-of-sequence marker (:data:`BOS_STRINGS`)."""
    mask = np.zeros(len(tokens), dtype=bool)
    for start in np.asarray(doc_starts[:-1]).tolist():
        if start < len(tokens) and tokens[start] in BOS_STRINGS:
            mask[start] = True
    return mask
