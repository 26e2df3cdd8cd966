"""PatchingGrid: an activation-patching grid as a clickable heatmap.

Example
-------
>>> exact = ilab.patching.grid(model, pairs, site="resid_pre")
>>> approx = ilab.patching.attribution(model, pairs)          # every site kind
>>> w = ilab.widgets.PatchingGrid({"exact": exact, **approx})  # tabs: sites, exact vs attribution
>>> w.selected          # [layer, position] of the cell last clicked ([] for none)
>>> w.selected_cell     # that cell's values and the top tokens of its patched run
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import traitlets
from interplab.core.patching.result import PatchingResult

from ._kit import Widget, array_payload, css, esm


def _group(r: PatchingResult) -> str:
    return f"latents L{r.layer}" if r.site == "latents" and r.layer is not None else r.site


def _grid_payload(key: str, r: PatchingResult) -> dict[str, Any]:
    cols = [str(p) for p in r.positions] if r.col_name == "position" else [f"H{h}" for h in range(r.shape[1])]
    col_tokens = [r.tokens[p] if p < len(r.tokens) else "" for p in r.positions] if r.col_name == "position" else []
    out: dict[str, Any] = {
        "key": key,
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


class PatchingGrid(Widget):
    """Layers x positions (or heads, or latents) heatmap of one or several patching results.

    Parameters
    ----------
    results
        A :class:`~interplab.patching.PatchingResult` or a dict name -> result. Results are
        grouped into tabs by site (and SAE layer); each group has a tab per method.
    normalized
        Colour by the normalized value (0 = corrupted, 1 = clean; default) or the raw metric.
    """

    _esm = esm("patching.js")
    _css = css("patching.css")

    grids = traitlets.List(traitlets.Dict()).tag(sync=True)
    tab = traitlets.Unicode("").tag(sync=True)  # key of the grid shown
    selected = traitlets.List(traitlets.Int()).tag(sync=True)  # [row id, column id]: [layer, position]
    normalized = traitlets.Bool(True).tag(sync=True)

    def __init__(
        self, results: PatchingResult | Mapping[str, PatchingResult], *, normalized: bool = True, **kwargs: Any
    ) -> None:
        if isinstance(results, PatchingResult):
            results = {f"{results.site} {results.method}": results}
        if not isinstance(results, Mapping) or not results:
            raise TypeError("PatchingGrid takes a PatchingResult or a non-empty dict of name -> PatchingResult.")
        bad = [k for k, v in results.items() if not isinstance(v, PatchingResult)]
        if bad:
            raise TypeError(f"These entries are not PatchingResult: {bad}.")
        self._results = dict(results)
        first = next(iter(self._results))
        super().__init__(
            grids=[_grid_payload(k, r) for k, r in self._results.items()],
            tab=first,
            normalized=normalized,
            **kwargs,
        )

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
