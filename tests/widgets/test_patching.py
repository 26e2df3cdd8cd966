"""PatchingGrid's Python side: prompts and labels sent, colour scales, selection across tabs, latent rows linked.

Grids computed by real patching are checked in tests/patching/test_result.py; the browser half is
tests/browser/test_patching.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import traitlets
from interplab.core.patching.result import PatchingResult
from interplab.widgets.dashboard import FeatureDashboard
from interplab.widgets.patching import PatchingGrid

from .test_dashboard import hand_feature_data

TOKENS = ["<bos>", "When", " John", " and", " John"]
CORRUPT = ["<bos>", "When", " Mary", " and", " John"]


def result(values, site="resid_pre", method="exact", **kw) -> PatchingResult:
    values = np.asarray(values, dtype=np.float32)
    kw.setdefault("positions", list(range(values.shape[1])))
    return PatchingResult(values, clean_baseline=9.0, corrupt_baseline=-5.0, site=site, method=method,
                          tokens=TOKENS, corrupt_tokens=CORRUPT, **kw)  # fmt: skip


@pytest.fixture
def grid() -> PatchingGrid:
    values = np.arange(15, dtype=np.float32).reshape(3, 5) - 5.0
    heads = result(np.ones((3, 4)), site="heads", col_name="head")
    return PatchingGrid({"exact": result(values), "attribution": result(values * 0.5, method="attribution"),
                         "heads": heads})  # fmt: skip


def test_prompts_and_column_tokens_are_sent(grid: PatchingGrid):
    g = grid.grids[0]
    assert g["prompt"] == TOKENS and g["corrupt_prompt"] == CORRUPT
    # two " John" columns: their positions tell them apart
    assert g["col_tokens"] == TOKENS and g["cols"] == ["0", "1", "2", "3", "4"]
    assert g["corrupt_tokens"] == CORRUPT
    assert grid.grids[2]["corrupt_tokens"] == []  # heads: no token per column


def test_selection_is_kept_within_a_site_and_cleared_for_another_grid(grid: PatchingGrid):
    """[1, 2] is layer 1, position 2 in the resid_pre tabs, but layer 1, head 2 in the heads tab."""
    grid.selected = [1, 2]
    grid.tab = "attribution"  # the same cells: the selection stays
    assert grid.selected == [1, 2] and grid.selected_cell["position"] == 2
    grid.tab = "heads"
    assert grid.selected == [] and grid.selected_cell is None
    grid.selected = [0, 3]
    grid.tab = "exact"
    assert grid.selected == []


def test_colour_scales_follow_the_options(grid: PatchingGrid):
    norm = grid.color_scale()  # normalized exact: values span 0..1, centred on 0 (the corrupted run)
    assert norm.kind == "diverging" and (norm.vmin, norm.center, norm.vmax) == (-1.0, 0.0, 1.0)
    heads = grid.color_scale("heads")  # all 6/14: still -1..1 when normalized
    assert (heads.vmin, heads.vmax) == (-1.0, 1.0)
    grid.normalized = False
    raw = grid.color_scale()
    assert (raw.vmin, raw.center, raw.vmax) == (-9.0, 0.0, 9.0)
    grid.set_scale("diverging", center=2.0, vmax=12.0)
    raw = grid.color_scale()
    assert (raw.center, raw.vmax, raw.vmin) == (2.0, 12.0, -5.0)  # the lower end from the data, symmetric
    grid.set_scale("sequential")
    assert grid.color_scale().kind == "sequential" and grid.scales["exact"]["values"]["vmin"] == -5.0
    with pytest.raises(traitlets.TraitError, match=r"center=1\.0 only applies to a diverging scale"):
        grid.center = 1.0
    with pytest.raises(ValueError, match="vmin must be below vmax"):
        PatchingGrid(result(np.ones((2, 5))), vmin=3, vmax=1)


def test_latent_rows_link_to_a_dashboard():
    data = hand_feature_data()
    latents = result(np.ones((3, 5)), site="latents", row_name="latent", rows=[4, 2, 7], layer=0,
                     row_text=["", "", ""])  # fmt: skip
    grid = PatchingGrid({"latents": latents})
    dash = FeatureDashboard(data, n_cards=2)
    assert dash.link(grid) is dash
    assert grid.grids[0]["row_text"] == ["", "second", ""]  # the dashboard's labels reach the rows
    grid.latent = 7  # a latent row clicked
    assert dash.selected == 7
    grid.selected = [4, 3]  # a cell of latent 4's row
    assert grid.latent == 4 and dash.selected == 4
    dash.set_label(7, "names <b>")  # labels set later reach the grid too
    assert grid.grids[0]["row_text"] == ["", "second", "names <b>"]


def test_labels_set_in_the_dashboard_reach_a_linked_heatmap():
    from interplab.widgets.heatmap import FeatureHeatmap

    dash = FeatureDashboard(hand_feature_data(), n_cards=2)
    heat = FeatureHeatmap([["a", " b"], [" c"]], np.ones((3, 3), dtype=np.float32), features=[2, 4, 9])
    dash.link(heat)
    assert heat.labels == ["second", "", ""]
    dash.set_label(9, "ninth")  # the README says labels set in the dashboard show in linked heatmaps
    assert heat.labels == ["second", "", "ninth"]
    dash.labels = {**dash.labels, "4": "from the browser"}
    assert heat.labels == ["second", "from the browser", "ninth"]
    with pytest.raises(TypeError, match="FeatureHeatmap or a PatchingGrid"):
        dash.link(object())
