"""PatchingGrid: an activation-patching grid as a clickable heatmap.

Example
-------
>>> exact = ilab.patching.grid(model, pairs, site="resid_pre")
>>> approx = ilab.patching.attribution(model, pairs)          # every site kind
>>> w = ilab.widgets.PatchingGrid({"exact": exact, **approx})  # tabs: sites, exact vs attribution
>>> w.selected          # [layer, position] of the cell last clicked ([] for none)
>>> w.selected_cell     # that cell's values and the top tokens of its patched run
>>> w.set_scale(vmin=-0.5, vmax=1.5)                        # colours: scale, vmin, vmax, center
>>> dash.link(ilab.widgets.PatchingGrid(ilab.patching.latents(model, sae, pairs)))  # latent rows open cards

Colours follow :mod:`interplab.core.views.colors` on the values shown (normalized or raw): by
default diverging around 0 (the corrupted run, when normalized), symmetric, at least -1..1 when
normalized. A selection is kept across the method tabs of one site (the same cell) and cleared
when the tab shows another kind of grid, where the same ids would mean another cell.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import traitlets
from interplab.core.patching.result import PatchingResult
from interplab.core.views.colors import SCALES, ColorScale, check_scale_options, color_scale

from ._kit import ScaleOptions, Widget, array_payload, css, esm


def _group(r: PatchingResult) -> str:
    return f"latents L{r.layer}" if r.site == "latents" and r.layer is not None else r.site


def _grid_payload(key: str, r: PatchingResult) -> dict[str, Any]:
    cols = [str(p) for p in r.positions] if r.col_name == "position" else [f"H{h}" for h in range(r.shape[1])]
    col_tokens = [r.tokens[p] if p < len(r.tokens) else "" for p in r.positions] if r.col_name == "position" else []
    out: dict[str, Any] = {
        "key": key,
        "corrupt_tokens": [r.corrupt_tokens[p] if p < len(r.corrupt_tokens) else "" for p in r.positions]
        if r.col_name == "position"
        else [],
        "prompt": list(r.tokens),
        "corrupt_prompt": list(r.corrupt_tokens),
        "group": _group(r),
        "method": r.method,
        "site": r.site,
        "metric": r.metric,
        "direction": r.direction,
        "row_name": r.row_name,
        "col_name": r.col_name,
        "rows": [int(x) for x in r.rows],
        "row_text": list(r.row_text) or [""] * len(r.rows),
        "cols": cols,
        "col_tokens": col_tokens,
        "n_pairs": int(r.n_pairs),
        "clean": float(r.clean_baseline),
        "corrupt": float(r.corrupt_baseline),
        "values": array_payload(r.values, "float32"),
        "normalized": array_payload(np.nan_to_num(r.normalized, nan=0.0), "float32"),
    }
    if r.top_ids is not None and r.top_probs is not None:
        vocab: dict[str, int] = {}
        index = np.array([vocab.setdefault(t, len(vocab)) for t in r.top_tokens], dtype=np.int32)
        out["top_vocab"] = list(vocab)
        out["top_index"] = array_payload(index.reshape(r.top_ids.shape), "int32")
        out["top_probs"] = array_payload(r.top_probs, "float32")
    return out


class PatchingGrid(ScaleOptions, Widget):
    """Layers x positions (or heads, or latents) heatmap of one or several patching results.

    Parameters
    ----------
    results
        A :class:`~interplab.patching.PatchingResult` or a dict name -> result. Results are
        grouped into tabs by site (and SAE layer); each group has a tab per result, labelled with its
        name (the key; the method when the key only repeats the site). The first group opens on its
        exact grid when it has one. The header says how many prompt pairs a grid averages and that the
        prompts shown are the first pair's.
    normalized
        Colour by the normalized value (0 = corrupted, 1 = clean; default) or the raw metric.
    """

    _esm = esm("patching")
    _css = css("patching")

    grids = traitlets.List(traitlets.Dict()).tag(sync=True)
    tab = traitlets.Unicode("").tag(sync=True)  # key of the grid shown
    selected = traitlets.List(traitlets.Int()).tag(sync=True)  # [row id, column id]: [layer, position]
    normalized = traitlets.Bool(True).tag(sync=True)
    latent = traitlets.Int(-1).tag(sync=True)  # the SAE latent of the row last clicked in a latent grid (-1: none)
    scale = traitlets.Enum(SCALES, "diverging").tag(sync=True)
    vmin = traitlets.Float(None, allow_none=True).tag(sync=True)
    vmax = traitlets.Float(None, allow_none=True).tag(sync=True)
    center = traitlets.Float(None, allow_none=True).tag(sync=True)
    scales = traitlets.Dict().tag(sync=True)  # {tab: {"values": [4], "normalized": [4]}}: resolved colour scales

    def __init__(
        self,
        results: PatchingResult | Mapping[str, PatchingResult],
        *,
        normalized: bool = True,
        scale: str = "diverging",
        vmin: float | None = None,
        vmax: float | None = None,
        center: float | None = None,
        **kwargs: Any,
    ) -> None:
        scale, vmin, vmax, center = check_scale_options(scale, vmin, vmax, center)
        if isinstance(results, PatchingResult):
            results = {f"{results.site} {results.method}": results}
        if not isinstance(results, Mapping) or not results:
            raise TypeError("PatchingGrid takes a PatchingResult or a non-empty dict of name -> PatchingResult.")
        bad = [k for k, v in results.items() if not isinstance(v, PatchingResult)]
        if bad:
            raise TypeError(f"These entries are not PatchingResult: {bad}.")
        self._results = dict(results)
        first = _first_tab(self._results)
        super().__init__(
            grids=[_grid_payload(k, r) for k, r in self._results.items()],
            tab=first,
            normalized=normalized,
            scale=scale,
            vmin=vmin,
            vmax=vmax,
            center=center,
            scales=self._scales(scale, vmin, vmax, center),
            **kwargs,
        )
        self._ready = True

    _ready = False

    def _scales(self, scale: str, vmin: float | None, vmax: float | None, center: float | None) -> dict[str, Any]:
        out = {}
        for key, r in self._results.items():
            raw = color_scale(r.values, scale=scale, vmin=vmin, vmax=vmax, center=center)
            norm = color_scale(r.normalized, scale=scale, vmin=vmin, vmax=vmax, center=center)
            if norm.kind == "diverging" and vmin is None and vmax is None:  # 0 and 1 always fit
                half = max(norm.vmax - norm.center, norm.center - norm.vmin, 1.0)
                norm = ColorScale("diverging", norm.center - half, norm.center + half, norm.center)
            out[key] = {"values": raw.to_dict(), "normalized": norm.to_dict()}
        return out

    def color_scale(self, tab: str | None = None) -> ColorScale:
        """The resolved colour scale of a tab (default: the one shown), for the values shown."""
        tab = self.tab if tab is None else tab
        if tab not in self.scales:
            raise ValueError(f"tab={tab!r} is not one of {list(self.scales)}.")
        d = self.scales[tab]["normalized" if self.normalized else "values"]
        return ColorScale(d["kind"], d["vmin"], d["vmax"], d["center"])

    def set_scale(
        self,
        scale: str = "diverging",
        *,
        vmin: float | None = None,
        vmax: float | None = None,
        center: float | None = None,
    ) -> PatchingGrid:
        """Set the colour options together (unnamed ones go back to "from the data"); returns the widget."""
        self._set_scale_options(scale, vmin, vmax, center)
        return self

    @traitlets.observe("vmin", "vmax", "center", "scale")
    def _rescale(self, _change: dict[str, Any]) -> None:
        if self._ready:
            self.scales = self._scales(self.scale, self.vmin, self.vmax, self.center)

    @traitlets.observe("tab")
    def _forget_other_cells(self, change: dict[str, Any]) -> None:
        """A selection means the same cell only within one site's tabs: another grid clears it."""
        old, new = self._results.get(change["old"]), self._results.get(change["new"])
        if old is None or new is None or _same_cells(old, new):
            return
        self.selected = []

    @traitlets.observe("selected")
    def _follow_latent(self, change: dict[str, Any]) -> None:
        """Selecting a cell of a latent grid makes its row the current latent (a linked dashboard opens it)."""
        r = self._results.get(self.tab)
        if r is not None and r.row_name == "latent" and len(change["new"]) == 2:
            self.latent = int(change["new"][0])

    def set_row_text(self, labels: Mapping[int, str]) -> None:
        """Label the rows of latent grids (``{latent: label}``: a linked FeatureDashboard keeps them in step)."""
        if not isinstance(labels, Mapping):
            raise TypeError(f"labels must map latent ids to label strings, got {type(labels).__name__}.")
        bad = {k: v for k, v in labels.items()
               if isinstance(k, bool) or not isinstance(k, int) or not isinstance(v, str)}  # fmt: skip
        if bad:
            raise TypeError(f"labels must map latent ids (int) to label strings; these entries do not: {bad!r:.120}.")
        grids = []
        for g in self.grids:
            if g["row_name"] == "latent":
                g = {**g, "row_text": [str(labels.get(int(i), "")) for i in g["rows"]]}
            grids.append(g)
        self.grids = grids

    @traitlets.validate("tab")
    def _check_tab(self, proposal: dict[str, Any]) -> str:
        value = proposal["value"]
        if self._results and value not in self._results:
            raise traitlets.TraitError(f"tab={value!r} is not one of {list(self._results)}.")
        return value

    @property
    def results(self) -> dict[str, PatchingResult]:
        """The results shown, by tab name."""
        return dict(self._results)

    @property
    def result(self) -> PatchingResult:
        """The result of the tab shown."""
        return self._results[self.tab]

    @property
    def selected_cell(self) -> dict[str, Any] | None:
        """The clicked cell of the shown grid: its ids, value, normalized value and top tokens."""
        if len(self.selected) != 2:
            return None
        r = self.result
        row_id, col_id = self.selected
        if row_id not in r.rows:
            return None
        row = r.rows.index(row_id)
        col = r.positions.index(col_id) if r.col_name == "position" and col_id in r.positions else col_id
        if not 0 <= col < r.shape[1]:
            return None
        return {
            r.row_name: row_id,
            r.col_name: col_id,
            "token": r.tokens[col_id] if r.col_name == "position" and col_id < len(r.tokens) else None,
            "value": float(r.values[row, col]),
            "normalized": float(r.normalized[row, col]),
            "top": r.top(row, col),
        }

    def __repr__(self) -> str:
        return f"PatchingGrid({', '.join(self._results)})"


def _first_tab(results: Mapping[str, PatchingResult]) -> str:
    """The tab shown first: the first result's group, on its exact grid when the group has one."""
    first = next(iter(results))
    group = _group(results[first])
    exact = [k for k, r in results.items() if _group(r) == group and r.method == "exact"]
    return exact[0] if exact else first


def _same_cells(a: PatchingResult, b: PatchingResult) -> bool:
    """Whether a [row id, column id] names the same cell in both grids (one site, its method tabs)."""
    return (_group(a), a.row_name, a.col_name, list(a.rows), list(a.positions)) == (
        _group(b),
        b.row_name,
        b.col_name,
        list(b.rows),
        list(b.positions),
    )
