"""Patching results (``core/patching/result.py``): frames, save and load, how they display as
PatchingGrids, and a tampered file refused with the file and the field named.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from interplab.core.storage.readers import FileError

import interplab as ilab
from tests.patching.torch_reference import CLEAN, CORRUPT, metric
from tests.tiny import tiny_model


def test_result_frame_save_load(tmp_path):
    m = tiny_model("gpt2")
    r = ilab.patching.grid(m, CLEAN, CORRUPT, metric(), site="heads")
    frame = r.to_frame()
    assert len(frame) == r.values.size and set(frame.columns) >= {"layer", "head", "value", "normalized"}
    path = r.save(tmp_path / "grid.npz")
    back = ilab.patching.PatchingResult.load(path)
    np.testing.assert_array_equal(back.values, r.values)
    np.testing.assert_array_equal(back.top_ids, r.top_ids)
    assert back.tokens == r.tokens and back.site == "heads" and back.col_labels == ["H0", "H1", "H2", "H3"]
    assert "exact heads" in repr(back)


def test_patching_grid_widget_payloads_and_selection():
    from interplab.widgets._kit import payload_array

    m = tiny_model("gpt2")
    exact = ilab.patching.grid(m, CLEAN, CORRUPT, metric(), site="resid_pre")
    heads = ilab.patching.grid(m, CLEAN, CORRUPT, metric(), site="heads")
    approx = ilab.patching.attribution(m, CLEAN, CORRUPT, metric(), sites=["resid_pre", "heads"])
    w = ilab.widgets.PatchingGrid({"exact": exact, "heads": heads, "approx": approx["resid_pre"],
                                   "approx heads": approx["heads"]})  # fmt: skip
    assert [g["group"] for g in w.grids] == ["resid_pre", "heads", "resid_pre", "heads"]
    assert [g["method"] for g in w.grids] == ["exact", "exact", "attribution", "attribution"]
    g = w.grids[0]
    assert isinstance(g["values"]["view"], memoryview)  # binary, not JSON lists
    np.testing.assert_array_equal(payload_array(g["values"]), exact.values)
    np.testing.assert_allclose(payload_array(g["normalized"]), exact.normalized, atol=1e-6)
    assert g["col_tokens"] == m.to_str_tokens(CLEAN) and g["rows"] == [0, 1]
    idx = payload_array(g["top_index"])
    assert [g["top_vocab"][i] for i in idx[1, 3]] == [t for t, _ in exact.top(1, 3)]
    assert "top_index" not in w.grids[2]  # attribution: no patched run
    assert w.grids[1]["cols"] == ["H0", "H1", "H2", "H3"]

    assert w.tab == "exact" and w.selected_cell is None
    w.selected = [1, 5]
    cell = w.selected_cell
    assert cell["layer"] == 1 and cell["position"] == 5 and cell["token"] == exact.tokens[5]
    assert cell["value"] == pytest.approx(float(exact.values[1, 5]))
    assert [t for t, _ in cell["top"]] == [t for t, _ in exact.top(1, 5)]
    w.tab = "approx heads"
    w.selected = [0, 2]
    assert w.selected_cell["head"] == 2 and w.selected_cell["top"] == []
    with pytest.raises(Exception, match="not one of"):
        w.tab = "nope"
    with pytest.raises(TypeError, match="PatchingResult"):
        ilab.widgets.PatchingGrid({"x": exact.values})
    single = ilab.widgets.PatchingGrid(exact)
    assert single.tab == "resid_pre exact"


def test_results_display_as_patching_grids():
    from interplab.extension import DISPLAYS

    m = tiny_model("gpt2")
    r = ilab.patching.grid(m, CLEAN, CORRUPT, metric(), site="mlp_out", positions=[-1])
    widget = DISPLAYS[ilab.patching.PatchingResult](r)
    assert isinstance(widget, ilab.widgets.PatchingGrid) and widget.result is r


def test_a_tampered_patching_result_is_named_with_its_field(tmp_path):
    gpt2 = tiny_model("gpt2")
    pairs = ilab.patching.prompt_pairs(gpt2, ["the cat sat"], ["the dog sat"], ["on"], ["to"])
    result = ilab.patching.grid(gpt2, pairs, site="resid_pre")
    result.save(tmp_path / "grid.npz")
    with np.load(tmp_path / "grid.npz") as f:
        arrays = dict(f)
    meta = json.loads(bytes(arrays["meta"]).decode())

    def tampered(**change):  # type: ignore[no-untyped-def]
        m = {**meta, **change}
        np.savez(tmp_path / "bad.npz", **{**arrays, "meta": np.frombuffer(json.dumps(m).encode(), np.uint8)})
        return tmp_path / "bad.npz"

    for change, match in (
        ({"rows": [0, 1, 2]}, r"meta\.rows must be 2 integers"),
        ({"clean_baseline": "x"}, r"meta\.clean_baseline must be a finite number"),
        ({"site": "anywhere"}, r"meta\.site must be one of"),
        ({"evil": 1}, r"meta\.evil is not a field"),
        ({"top_tokens": []}, r"meta\.top_tokens must hold"),
    ):
        with pytest.raises(FileError, match=match):
            ilab.patching.PatchingResult.load(tampered(**change))
    np.savez(tmp_path / "bad.npz", **{**arrays, "values": np.zeros(3, np.float32)})
    with pytest.raises(FileError, match=r"values is missing or not a 2-D"):
        ilab.patching.PatchingResult.load(tmp_path / "bad.npz")


@pytest.mark.parametrize(("name", "edit", "match"), [
    ("values", lambda a: a.fill(np.nan), r"values holds nan at \[0, 0\]: must be finite"),
    ("top_probs", lambda a: a.fill(7.0), r"top_probs holds 7 at \[0, 0, 0\]: must be a finite number in 0\.\.1"),
    ("top_ids", lambda a: a.fill(-3), r"top_ids holds -3 at \[0, 0, 0\]"),
])  # fmt: skip
def test_patching_result_numbers_out_of_range_are_refused(tmp_path, name, edit, match):
    result = ilab.patching.grid(tiny_model("gpt2"), CLEAN, CORRUPT, metric(), site="heads")
    with np.load(result.save(tmp_path / "grid.npz")) as f:
        arrays = dict(f)
    edit(arrays[name])
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(FileError, match=match):
        ilab.patching.PatchingResult.load(tmp_path / "bad.npz")


def test_results_know_how_many_pairs_they_average(tmp_path):
    m = tiny_model("gpt2")
    r = ilab.patching.grid(m, [CLEAN, CLEAN], [CORRUPT, CORRUPT], metric(), site="resid_pre")
    assert r.n_pairs == 2 and "over 2 pairs" in repr(r)
    back = ilab.patching.PatchingResult.load(r.save(tmp_path / "two.npz"))
    assert back.n_pairs == 2
    assert ilab.widgets.PatchingGrid(back).grids[0]["n_pairs"] == 2
    one = ilab.patching.grid(m, CLEAN, CORRUPT, metric(), site="resid_pre")
    assert one.n_pairs == 1 and "over 1 pair:" in repr(one)


def test_a_grid_opens_on_the_exact_result_of_its_first_site():
    values = np.ones((2, 3), dtype=np.float32)
    common = dict(clean_baseline=1.0, corrupt_baseline=0.0, site="latents", row_name="latent", rows=[4, 9], layer=2,
                  positions=[0, 1, 2], tokens=["a", "b", "c"])  # fmt: skip
    attribution = ilab.patching.PatchingResult(values * 0.5, method="attribution", **common)
    exact = ilab.patching.PatchingResult(values, **common)
    assert ilab.widgets.PatchingGrid({"attribution": attribution, "exact": exact}).tab == "exact"
    assert ilab.widgets.PatchingGrid({"attribution": attribution}).tab == "attribution"
    other = ilab.patching.PatchingResult(values, clean_baseline=1.0, corrupt_baseline=0.0, site="resid_pre",
                                         positions=[0, 1, 2], tokens=["a", "b", "c"])  # fmt: skip
    # the first group is the latents': its exact grid, not the exact grid of another site
    w = ilab.widgets.PatchingGrid({"attribution": attribution, "resid": other, "exact": exact})
    assert w.tab == "exact"


def test_chart_is_a_heatmap_of_every_cell():
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    r = ilab.patching.PatchingResult(values, clean_baseline=11.0, corrupt_baseline=0.0, site="resid_pre",
                                     positions=[0, 1, 2, 3], tokens=["CLS", "p0", "p1", "p2"])  # fmt: skip
    spec = r.chart().to_dict()
    cells = next(iter(spec["datasets"].values()))
    assert spec["mark"]["type"] == "rect" and len(cells) == r.values.size
    assert {c["row"] for c in cells} == set(r.row_labels) and spec["encoding"]["color"]["field"] == "normalized"
    np.testing.assert_allclose(sorted(c["normalized"] for c in cells), np.sort(r.normalized.ravel()), rtol=1e-6)
