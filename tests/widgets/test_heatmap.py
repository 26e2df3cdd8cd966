"""Heatmap data, the heatmap widgets' Python side and the IPython extension (no browser).

The browser halves are tests/browser/test_heatmap.py (JupyterLab) and
tests/browser/test_export_html.py (exported HTML).
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import traitlets
from interplab.core.model.activations import Activations
from interplab.core.views.heatmap import TOP_K, HeatmapData, heatmap_data, heatmap_data_from_activations
from interplab.widgets import _kit
from interplab.widgets._kit import OPTIONS, array_payload, payload_array
from interplab.widgets.heatmap import FeatureHeatmap, TokenHeatmap
from IPython.core.formatters import DisplayFormatter
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from interplab import extension
from tests.tiny import TEXTS, tiny_model

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
DOCS = [["The", " cat", " sat", "."], ["The", " dog", "."], [" cat"]]
N_TOKENS = sum(len(d) for d in DOCS)


def hand_activations(sites: tuple[str, ...] = ("blocks.0.hook_resid_post",), d: int = 6, seed: int = 0) -> Activations:
    """Two right-padded texts (3 and 2 real tokens) with random values at each site."""
    g = torch.Generator().manual_seed(seed)
    return Activations(
        texts=["The cat sat", "A dog"],
        tokens=torch.tensor([[5, 6, 7], [8, 9, 0]]),
        mask=torch.tensor([[True, True, True], [True, True, False]]),
        str_tokens=[["The", " cat", " sat"], ["A", " dog"]],
        values={s: torch.randn(2, 3, d, generator=g) for s in sites},
    )


def payload_bytes(payload: dict[str, Any]) -> bytes:
    view = payload["view"]
    return view.tobytes() if isinstance(view, memoryview) else bytes(view)


# --- core.heatmap_data ------------------------------------------------------------------


def test_one_flat_document() -> None:
    tokens = ["a", " b", "a", "\n"]
    data = heatmap_data(tokens, [0.5, 1.0, -2.0, 0.0])
    assert isinstance(data, HeatmapData)
    assert (data.n_docs, data.n_tokens, data.n_features) == (1, 4, 1)
    assert data.doc_starts.tolist() == [0, 4]
    assert data.vocab == ["a", " b", "\n"]
    assert data.token_ids.dtype == np.int32 and data.token_ids.tolist() == [0, 1, 0, 2]
    assert data.tokens() == tokens
    assert data.values.dtype == np.float32 and data.values.shape == (4, 1)
    assert data.values[:, 0].tolist() == [0.5, 1.0, -2.0, 0.0]
    assert data.feature_ids == [0] and data.labels == [""]
    assert data.top_features.shape == (4, 1) and data.top_features.tolist() == [[0]] * 4
    assert repr(data) == "HeatmapData(1 docs, 4 tokens, 1 features)"


def test_many_documents() -> None:
    values = np.arange(N_TOKENS * 3, dtype=np.float64).reshape(N_TOKENS, 3)
    data = heatmap_data(DOCS, values, feature_ids=[7, 3, 11], labels=["x", "y", "z"])
    assert (data.n_docs, data.n_tokens, data.n_features) == (3, 8, 3)
    assert data.doc_starts.dtype == np.int32 and data.doc_starts.tolist() == [0, 4, 7, 8]
    # each distinct string once, in order of first appearance
    assert data.vocab == ["The", " cat", " sat", ".", " dog"]
    assert data.tokens() == [t for doc in DOCS for t in doc]
    for d, doc in enumerate(DOCS):
        a, b = data.doc_starts[d], data.doc_starts[d + 1]
        assert data.tokens()[a:b] == doc
    assert data.values.dtype == np.float32
    np.testing.assert_array_equal(data.values, values.astype(np.float32))
    assert data.feature_ids == [7, 3, 11] and data.labels == ["x", "y", "z"]


def test_torch_values_are_accepted() -> None:
    values = torch.randn(N_TOKENS, 4, dtype=torch.float64)
    data = heatmap_data(DOCS, values)
    np.testing.assert_allclose(data.values, values.numpy().astype(np.float32))
    assert data.feature_ids == [0, 1, 2, 3]


@pytest.mark.parametrize("n_features", [1, 3, TOP_K, TOP_K + 1, 40])
def test_top_features_are_the_true_top_k(n_features: int) -> None:
    g = torch.Generator().manual_seed(n_features)
    values = torch.randn(200, n_features, generator=g)  # continuous: no ties
    data = heatmap_data(["t"] * 200, values)
    k = min(TOP_K, n_features)
    expected = torch.topk(values, k, dim=1)  # sorted descending
    assert data.top_features.shape == (200, k) and data.top_features.dtype == np.int32
    assert data.top_values.shape == (200, k) and data.top_values.dtype == np.float32
    np.testing.assert_array_equal(data.top_features, expected.indices.numpy())
    np.testing.assert_array_equal(data.top_values, expected.values.numpy())
    # the values are those of the named columns, in descending order
    np.testing.assert_array_equal(np.take_along_axis(data.values, data.top_features, 1), data.top_values)
    assert (np.diff(data.top_values, axis=1) <= 0).all()


def test_feature_ids_and_labels_must_match_the_columns() -> None:
    values = np.zeros((N_TOKENS, 3))
    with pytest.raises(ValueError, match=r"2 feature_ids for 3 value columns"):
        heatmap_data(DOCS, values, feature_ids=[1, 2])
    with pytest.raises(ValueError, match=r"4 labels for 3 value columns"):
        heatmap_data(DOCS, values, labels=["a", "b", "c", "d"])


def test_values_must_match_the_tokens() -> None:
    with pytest.raises(ValueError, match=r"n_tokens=8; got shape \(7, 2\)"):
        heatmap_data(DOCS, np.zeros((7, 2)))
    with pytest.raises(ValueError, match=r"got shape \(8, 2, 2\)"):
        heatmap_data(DOCS, np.zeros((8, 2, 2)))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_rejected_with_their_position(bad: float) -> None:
    values = np.zeros((N_TOKENS, 3), dtype=np.float32)
    values[5, 2] = bad
    values[6, 0] = bad
    with pytest.raises(ValueError, match=r"NaN or inf \(first at token 5, feature 2\)"):
        heatmap_data(DOCS, values)
    with pytest.raises(ValueError, match=r"first at token 1, feature 0"):
        heatmap_data(["a", "b"], [0.0, bad])


def test_empty_tokens_are_rejected() -> None:
    with pytest.raises(ValueError, match="empty"):
        heatmap_data([], [])


def test_documents_without_any_token_are_rejected() -> None:
    # [[]] holds no token either; accepted, it makes a widget fail deep inside numpy
    # ("zero-size array to reduction operation maximum which has no identity").
    with pytest.raises(ValueError, match="empty"):
        heatmap_data([[]], [])
    with pytest.raises(ValueError, match="empty"):
        TokenHeatmap([[], []], [])


def test_non_string_tokens_in_a_document_are_rejected() -> None:
    with pytest.raises(TypeError, match=r"Document 1 holds tokens that are not strings"):
        heatmap_data([["a"], ["b", 3]], [0.0, 1.0, 2.0])
    with pytest.raises(TypeError, match=r"Document 0 holds tokens that are not strings"):
        heatmap_data(["a", None], [0.0, 1.0])


def test_token_ids_instead_of_strings_are_named() -> None:
    # A flat list of ids (e.g. acts.tokens[0].tolist()) is a likely mistake: say what is wrong.
    with pytest.raises(TypeError, match="not strings"):
        heatmap_data([464, 3797], [0.0, 1.0])


def test_from_hand_built_activations() -> None:
    acts = hand_activations()
    site = acts.sites[0]
    data = heatmap_data_from_activations(acts)
    assert (data.n_docs, data.n_tokens, data.n_features) == (2, 5, 6)
    assert data.doc_starts.tolist() == [0, 3, 5]
    assert data.tokens() == ["The", " cat", " sat", "A", " dog"]
    np.testing.assert_array_equal(data.values, acts.flat(site).numpy())
    assert data.feature_ids == list(range(6))

    picked = heatmap_data_from_activations(acts, site=site, features=[4, 1], labels=["four", "one"])
    assert picked.feature_ids == [4, 1] and picked.labels == ["four", "one"]
    np.testing.assert_array_equal(picked.values, acts.flat(site)[:, [4, 1]].numpy())


def test_from_a_tiny_model() -> None:
    model = tiny_model("gpt2")
    sites = ["blocks.0.hook_resid_post", "blocks.1.hook_mlp_out"]
    acts = model.collect(TEXTS, sites=sites)
    data = heatmap_data_from_activations(acts, site=sites[1], features=[0, 5, 31])
    assert data.n_tokens == acts.n_tokens and data.n_docs == len(TEXTS)
    assert data.tokens() == acts.flat_str_tokens()
    assert data.tokens()[0] == "<bos>"
    np.testing.assert_allclose(data.values, acts.flat(sites[1])[:, [0, 5, 31]].numpy())
    starts = data.doc_starts.tolist()
    assert [b - a for a, b in itertools.pairwise(starts)] == acts.mask.sum(1).tolist()


def test_features_out_of_range_are_named() -> None:
    acts = hand_activations()
    message = r"Features \[6, -1\] are out of range for blocks\.0\.hook_resid_post \(width 6\)"
    with pytest.raises(ValueError, match=message):
        heatmap_data_from_activations(acts, features=[0, 6, -1])


def test_several_sites_need_site() -> None:
    acts = hand_activations(sites=("blocks.0.hook_resid_post", "blocks.1.hook_mlp_out"))
    with pytest.raises(ValueError, match="site=") as info:
        heatmap_data_from_activations(acts)
    assert "blocks.0.hook_resid_post" in str(info.value) and "blocks.1.hook_mlp_out" in str(info.value)
    assert heatmap_data_from_activations(acts, site="blocks.1.hook_mlp_out").n_features == 6
    with pytest.raises(KeyError, match=r"blocks\.1\.hook_mlp_out"):  # an unknown site lists those held
        heatmap_data_from_activations(acts, site="blocks.9.hook_mlp_out")


def test_only_activations_are_accepted() -> None:
    with pytest.raises(TypeError, match="Expected Activations"):
        heatmap_data_from_activations({"site": torch.zeros(2, 3)})  # type: ignore[arg-type]


# --- binary payloads --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_payload_round_trip(dtype: str) -> None:
    rng = np.random.default_rng(0)
    arr = (rng.standard_normal((5, 7)) * 1000).astype(dtype)
    payload = array_payload(arr, dtype)
    assert set(payload) == {"view", "dtype", "shape"}
    assert isinstance(payload["view"], memoryview) and payload["view"].nbytes == arr.nbytes
    assert payload["dtype"] == dtype and payload["shape"] == [5, 7]
    back = payload_array(payload)
    assert back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back, arr)
    # non-contiguous input (a transposed view) is packed in its logical order
    np.testing.assert_array_equal(payload_array(array_payload(arr.T, dtype)), arr.T)
    # bytes (what a frontend sends back) decode too
    np.testing.assert_array_equal(payload_array({**payload, "view": payload_bytes(payload)}), arr)


def test_payload_converts_to_the_named_dtype() -> None:
    payload = array_payload([1.5, 2.5], "float32")
    assert payload_array(payload).dtype == np.float32
    assert payload_array(array_payload(torch.tensor([1, 2, 3]), "int32")).tolist() == [1, 2, 3]


def test_payload_rejects_other_dtypes() -> None:
    with pytest.raises(ValueError, match=r"'float64' is not one of \['float32', 'int32', 'uint8'\]"):
        array_payload(np.zeros(3), "float64")


# --- FeatureHeatmap / TokenHeatmap --------------------------------------------------------


@pytest.fixture
def values() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((N_TOKENS, 4)).astype(np.float32)


def test_values_travel_as_binary_feature_major(values: np.ndarray) -> None:
    w = FeatureHeatmap(DOCS, values, features=[10, 20, 30, 40], labels=["a", "b", "c", "d"])
    assert w.sent_columns == [0, 1, 2, 3]
    payload = w.values
    assert isinstance(payload["view"], memoryview | bytes)
    assert len(payload_bytes(payload)) == 4 * N_TOKENS * 4
    assert payload["dtype"] == "float32" and payload["shape"] == [4, N_TOKENS]
    rows = payload_array(payload)
    for i, col in enumerate(w.sent_columns):
        np.testing.assert_array_equal(rows[i], values[:, col])
    # token ids are int32 bytes into a vocab holding each string once
    assert w.token_ids["dtype"] == "int32" and len(payload_bytes(w.token_ids)) == 4 * N_TOKENS
    assert sorted(w.vocab) == sorted({t for d in DOCS for t in d}) and len(w.vocab) == len(set(w.vocab))
    assert [w.vocab[i] for i in payload_array(w.token_ids)] == [t for d in DOCS for t in d]
    assert payload_array(w.doc_starts).tolist() == [0, 4, 7, 8]
    # one colour scale per column: these columns have both signs, so diverging around 0, symmetric
    scales = payload_array(w.scales)
    assert scales.shape == (4, 4) and (scales[:, 0] == 1).all() and (scales[:, 2] == 0).all()
    np.testing.assert_allclose(scales[:, 3], np.abs(values).max(0))
    np.testing.assert_allclose(scales[:, 1], -np.abs(values).max(0))
    # every column is in the browser, so it finds the top features at a token itself: nothing extra sent
    assert w.top_features == {} and w.top_values == {}
    assert w.feature == 10 and w.feature_ids == [10, 20, 30, 40] and w.labels == ["a", "b", "c", "d"]
    assert w.show_picker and w.page_tokens == OPTIONS["page_tokens"]
    np.testing.assert_array_equal(w.column(30), values[:, 2])


def test_no_array_is_sent_as_a_json_list(values: np.ndarray) -> None:
    from ipywidgets.widgets.widget import _remove_buffers

    w = FeatureHeatmap(DOCS, values)
    state, paths, buffers = _remove_buffers(w.get_state())
    for trait in ("values", "token_ids", "doc_starts", "scales"):
        assert [trait, "view"] in paths, trait
    assert sum(len(b) for b in buffers) >= 4 * values.size
    assert state["sent_columns"] == [0, 1, 2, 3]
    # over the cap the top features per token travel too, as binary
    _kit.OPTIONS["max_values"], old = 1, _kit.OPTIONS["max_values"]
    try:
        capped = FeatureHeatmap(DOCS, values)
    finally:
        _kit.OPTIONS["max_values"] = old
    _, paths, _ = _remove_buffers(capped.get_state())
    assert ["top_features", "view"] in paths and ["top_values", "view"] in paths
    np.testing.assert_array_equal(payload_array(capped.top_features), capped.data.top_features)


def test_over_the_cap_only_the_selected_column_is_sent(monkeypatch: pytest.MonkeyPatch, values: np.ndarray) -> None:
    monkeypatch.setitem(_kit.OPTIONS, "max_values", N_TOKENS * 4 - 1)
    w = FeatureHeatmap(DOCS, values, features=[10, 20, 30, 40], feature=30)
    assert w.sent_columns == [2]
    assert len(payload_bytes(w.values)) == 4 * N_TOKENS
    np.testing.assert_array_equal(payload_array(w.values)[0], values[:, 2])

    sent: list[tuple[Any, Any]] = []
    monkeypatch.setattr(w, "send", lambda content, buffers=None: sent.append((content, buffers)))
    w._on_request(w, {"type": "column", "index": 3}, [])
    assert len(sent) == 1
    content, buffers = sent[0]
    assert content == {"type": "column", "index": 3}
    assert len(buffers) == 1 and len(buffers[0]) == 4 * N_TOKENS
    np.testing.assert_array_equal(np.frombuffer(buffers[0], dtype=np.float32), values[:, 3])
    # other messages and bad indexes are ignored
    for msg in ({"type": "other", "index": 1}, {"type": "column", "index": 4}, {"type": "column", "index": -1}, {}):
        w._on_request(w, msg, [])
    assert len(sent) == 1


def test_at_the_cap_every_column_is_sent(monkeypatch: pytest.MonkeyPatch, values: np.ndarray) -> None:
    monkeypatch.setitem(_kit.OPTIONS, "max_values", N_TOKENS * 4)
    assert FeatureHeatmap(DOCS, values).sent_columns == [0, 1, 2, 3]


def test_feature_must_be_one_shown(values: np.ndarray) -> None:
    w = FeatureHeatmap(DOCS, values, features=[10, 20, 30, 40])
    w.feature = 40
    assert w.feature == 40
    with pytest.raises(traitlets.TraitError, match=r"feature=3 is not among the features shown: \[10, 20, 30, 40\]"):
        w.feature = 3
    assert w.feature == 40
    with pytest.raises(ValueError, match=r"feature=11 is not among the features shown"):
        FeatureHeatmap(DOCS, values, features=[10, 20, 30, 40], feature=11)


def test_scale(values: np.ndarray) -> None:
    w = FeatureHeatmap(DOCS, values, scale="diverging")
    assert w.scale == "diverging"
    w.scale = "sequential"
    with pytest.raises(traitlets.TraitError):
        w.scale = "log"
    with pytest.raises(ValueError, match=r"scale='log' is not one of \('auto', 'sequential', 'diverging'\)"):
        FeatureHeatmap(DOCS, values, scale="log")
    with pytest.raises(ValueError, match="scale='log'"):
        TokenHeatmap(DOCS, values[:, 0], scale="log")


def test_colour_options_per_feature_bos_left_out() -> None:
    """vmin/vmax/center/scale on the widget; each feature gets its own scale; BOS does not set it."""
    docs = [["<bos>", " a", " b"], ["<bos>", " c", " d"]]
    values = np.array([[90, -668], [1, -610], [3, -300], [80, -420], [2, -57], [0.5, -500]], dtype=np.float32)
    w = FeatureHeatmap(docs, values, labels=["act", "direction"])
    assert payload_array(w.bos_tokens).tolist() == [0, 3]
    first, second = w.color_scale(0), w.color_scale(1)
    assert (first.kind, first.vmin, first.vmax) == ("sequential", 0.0, 3.0)  # not 90: BOS left out
    assert (second.kind, second.vmin, second.vmax) == ("sequential", -610.0, -57.0)  # one sign: not all blue
    np.testing.assert_array_equal(payload_array(w.scales), [s.to_list() for s in (first, second)])
    w.exclude_bos = False
    assert w.color_scale(0).vmax == 90.0 and payload_array(w.scales)[0, 3] == 90.0
    assert w.set_scale("diverging", center=-400.0) is w
    assert (w.scale, w.center, w.vmin, w.vmax) == ("diverging", -400.0, None, None)
    s = w.color_scale(1)
    assert (s.kind, s.center, s.vmin, s.vmax) == ("diverging", -400.0, -743.0, -57.0)
    assert payload_array(w.scales)[1].tolist() == [1.0, -743.0, -400.0, -57.0]
    w.vmax = 0.0  # one option at a time, when the result is valid
    assert w.color_scale(1).vmax == 0.0
    with pytest.raises(traitlets.TraitError, match=r"vmin=-100.0 must lie on its side of center=-400.0"):
        w.vmin = -100.0
    with pytest.raises(traitlets.TraitError, match=r"center=-400\.0 only applies to a diverging scale"):
        w.scale = "sequential"
    w.set_scale()  # back to "from the data"
    assert (w.scale, w.center, w.vmax) == ("auto", None, None)
    with pytest.raises(ValueError, match="vmin must be below vmax"):
        FeatureHeatmap(docs, values, vmin=5, vmax=1)
    with pytest.raises(ValueError, match=r"feature=7 is not among the features shown"):
        w.color_scale(7)
    t = TokenHeatmap(docs, values[:, 1], scale="diverging", center=-400.0, vmax=0.0)
    assert t.color_scale() == s.__class__("diverging", -743.0, 0.0, -400.0)


def test_sae_hover_lists_the_top_latents_over_all_of_them(tmp_path, monkeypatch) -> None:
    """The hover's top features come from every latent of the SAE, not only the offered ones, with their labels."""
    from interplab.core.features.labels import set_label
    from interplab.core.saes import SAE

    monkeypatch.setenv("INTERPLAB_CACHE", str(tmp_path))
    acts = hand_activations(d=6)
    sae = SAE.create("standard", d_in=6, d_sae=16, site=acts.sites[0])
    sae.init_weights(seed=1)
    latents = sae.encode(acts.flat(acts.sites[0])).detach()
    top = latents.topk(TOP_K, dim=1)
    outside = next(int(i) for i in top.indices[0].tolist() if i not in (3, 15))
    set_label(sae, outside, "not offered")
    w = FeatureHeatmap(acts, sae, features=[3, 15])
    np.testing.assert_array_equal(w.data.top_features, top.indices.numpy())
    np.testing.assert_allclose(w.data.top_values, top.values.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(payload_array(w.top_features), top.indices.numpy())  # sent: not computable there
    assert w.top_labels == {str(outside): "not offered"}


def test_token_heatmap() -> None:
    w = TokenHeatmap(DOCS, torch.arange(N_TOKENS, dtype=torch.float32), label="loss")
    assert w.feature_ids == [0] and w.labels == ["loss"] and not w.show_picker
    np.testing.assert_array_equal(payload_array(w.values)[0], np.arange(N_TOKENS, dtype=np.float32))
    with pytest.raises(ValueError, match=r"one value per token \(\[n_tokens\]\); got shape \(8, 2\)"):
        TokenHeatmap(DOCS, np.zeros((N_TOKENS, 2)))


def test_bad_sources_are_explained() -> None:
    with pytest.raises(TypeError, match=r"Give values with string tokens"):
        FeatureHeatmap(DOCS)
    with pytest.raises(TypeError, match="the second argument is an SAE"):
        FeatureHeatmap(hand_activations(), np.zeros((5, 2)))


def test_from_activations_and_heatmap_data(values: np.ndarray) -> None:
    acts = hand_activations(sites=("blocks.0.hook_resid_post", "blocks.1.hook_mlp_out"))
    w = FeatureHeatmap(acts, site="blocks.1.hook_mlp_out", features=[5, 2])
    assert w.feature_ids == [5, 2] and w.feature == 5
    np.testing.assert_array_equal(w.column(2), acts.flat("blocks.1.hook_mlp_out")[:, 2].numpy())
    with pytest.raises(ValueError, match="site="):
        FeatureHeatmap(acts)
    data = heatmap_data(DOCS, values)
    assert FeatureHeatmap(data).data is data


class FakeSAE(torch.nn.Module):
    """Anything with ``site`` and ``encode`` is an SAE to the heatmap."""

    def __init__(self, site: str, d_in: int, width: int, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.site = site
        self.enc = torch.nn.Linear(d_in, width)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.enc(x))


@pytest.mark.parametrize("width", [8, 64])
@pytest.mark.parametrize("block", [2048, 3])  # 3: tokens are encoded a few at a time, same result
def test_sae_latents_default_to_the_top_firing(width: int, block: int, monkeypatch) -> None:
    import interplab.core.views.heatmap as heatmap_views

    monkeypatch.setattr(heatmap_views, "ENCODE_ROWS", block)
    acts = hand_activations(d=6)
    site = acts.sites[0]
    sae = FakeSAE(site, 6, width)
    w = FeatureHeatmap(acts, sae)
    latents = sae.encode(acts.flat(site)).detach()
    n = min(32, width)
    assert len(w.feature_ids) == n and len(set(w.feature_ids)) == n
    expected = torch.topk(latents.max(0).values, n).indices.tolist()
    assert sorted(w.feature_ids) == sorted(expected)
    assert w.feature == w.feature_ids[0] == expected[0]  # the strongest first
    for f in w.feature_ids[:3]:
        np.testing.assert_allclose(w.column(f), latents[:, f].numpy(), rtol=1e-6)


def test_sae_latents_can_be_picked() -> None:
    acts = hand_activations(d=6)
    sae = FakeSAE(acts.sites[0], 6, 16)
    w = FeatureHeatmap(acts, sae, features=[3, 15], labels=["three", "fifteen"])
    assert w.feature_ids == [3, 15] and w.labels == ["three", "fifteen"]
    with pytest.raises(ValueError, match=r"Latents \[16\] are out of range for an SAE of width 16"):
        FeatureHeatmap(acts, sae, features=[3, 16])


def test_sae_latents_show_their_saved_labels(tmp_path, monkeypatch) -> None:
    from interplab.core.features.labels import set_label
    from interplab.core.saes import SAE

    monkeypatch.setenv("INTERPLAB_CACHE", str(tmp_path))
    acts = hand_activations(d=6)
    sae = SAE.create("standard", d_in=6, d_sae=16, site=acts.sites[0])
    set_label(sae, 15, "fifteen")
    w = FeatureHeatmap(acts, sae, features=[3, 15])
    assert w.labels == ["", "fifteen"]


def test_sae_site_must_be_held() -> None:
    acts = hand_activations()
    sae = FakeSAE("blocks.5.hook_resid_post", 6, 8)
    with pytest.raises(ValueError, match=r"'blocks.5.hook_resid_post'.*\['blocks.0.hook_resid_post'\]"):
        FeatureHeatmap(acts, sae)


def test_selected_text(values: np.ndarray) -> None:
    w = FeatureHeatmap(DOCS, values)
    assert w.selected_token == -1 and w.selected_text is None
    w.selected_token = 5
    assert w.selected_text == " dog"
    w.selected_token = 7
    assert w.selected_text == " cat"


def test_repr_is_concise_and_does_not_serialise(monkeypatch: pytest.MonkeyPatch) -> None:
    big = np.zeros((20_000, 8), dtype=np.float32)
    w = FeatureHeatmap(["x"] * 20_000, big)

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("repr serialised the widget state")

    monkeypatch.setattr(w, "get_state", boom)
    monkeypatch.setattr(w, "_trait_to_json", boom, raising=False)
    assert repr(w) == "FeatureHeatmap(1 docs, 20000 tokens, 8 features)"
    assert repr(TokenHeatmap(DOCS, np.zeros(N_TOKENS))) == "TokenHeatmap(3 docs, 8 tokens, 1 features)"


def test_scheme_follows_the_options(monkeypatch: pytest.MonkeyPatch, values: np.ndarray) -> None:
    assert FeatureHeatmap(DOCS, values).scheme == "auto"
    monkeypatch.setitem(OPTIONS, "scheme", "dark")
    assert FeatureHeatmap(DOCS, values).scheme == "dark"
    assert FeatureHeatmap(DOCS, values, scheme="light").scheme == "light"


def test_widget_source_ships_with_the_package() -> None:
    esm = str(FeatureHeatmap._esm)
    assert "function ilabDecode" in esm and "export default" in esm
    assert not re.search(r"\.innerHTML\s*=|insertAdjacentHTML|outerHTML\s*=", esm)  # token text is untrusted
    assert not re.search(r"^\s*import\b|\bimport\s*\(", esm, re.M)  # no imports: renders offline
    assert ".ilab-heatmap" in str(FeatureHeatmap._css)


# --- the IPython extension ----------------------------------------------------------------


@pytest.fixture
def options() -> Iterator[dict[str, Any]]:
    """OPTIONS, restored after the test."""
    saved = dict(OPTIONS)
    yield OPTIONS
    OPTIONS.clear()
    OPTIONS.update(saved)


def test_magic_sets_options(options: dict[str, Any]) -> None:
    shown = extension.interplab_magic("scheme=dark page_tokens=500")
    assert options["scheme"] == "dark" and options["page_tokens"] == 500
    assert shown == options and shown is not options
    assert extension.interplab_magic("max_values=1_000")["max_values"] == 1000
    assert extension.interplab_magic("") == options  # no arguments: just show them


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        ("colour=dark", r"Unknown option 'colour=dark'; use key=value with keys \['max_values', 'page_tokens', 's"),
        ("scheme", r"Unknown option 'scheme'.*keys \['max_values', 'page_tokens', 'scheme'\]"),
        ("scheme=pink", r"scheme='pink' is not one of \('auto', 'light', 'dark'\)"),
        ("page_tokens=lots", r"page_tokens must be a positive integer, got 'lots'"),
        ("page_tokens=0", r"page_tokens must be a positive integer, got 0"),
        ("max_values=-5", r"max_values must be a positive integer, got -5"),
    ],
)
def test_magic_rejects_bad_options(options: dict[str, Any], line: str, pattern: str) -> None:
    before = dict(options)
    with pytest.raises(ValueError, match=pattern):
        extension.interplab_magic(line)
    assert options == before


@pytest.fixture
def ipython_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Config:
    """Keep IPython's profile out of the home folder; history in memory."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    return config


@pytest.fixture
def terminal_shell(ipython_dir: Config) -> Iterator[InteractiveShell]:
    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance(config=ipython_dir)
    try:
        yield shell
    finally:
        extension.unload_ipython_extension(shell)
        InteractiveShell.clear_instance()


@pytest.fixture
def kernel_shell(ipython_dir: Config) -> Iterator[Any]:
    zmqshell = pytest.importorskip("ipykernel.zmqshell")
    InteractiveShell.clear_instance()
    shell = zmqshell.ZMQInteractiveShell.instance(config=ipython_dir)
    try:
        yield shell
    finally:
        extension.unload_ipython_extension(shell)
        zmqshell.ZMQInteractiveShell.clear_instance()
        InteractiveShell.clear_instance()


def test_terminal_keeps_the_text_repr(terminal_shell: InteractiveShell, options: dict[str, Any]) -> None:
    acts = hand_activations()
    extension.load_ipython_extension(terminal_shell)
    assert "interplab" in terminal_shell.magics_manager.magics["line"]
    data, _ = terminal_shell.display_formatter.format(acts)
    assert data == {"text/plain": repr(acts)}
    assert terminal_shell.run_line_magic("interplab", "scheme=light")["scheme"] == "light"
    assert options["scheme"] == "light"


def test_kernel_shows_activations_as_a_widget(kernel_shell: Any, options: dict[str, Any]) -> None:
    acts = hand_activations(sites=("blocks.0.hook_resid_post", "blocks.1.hook_mlp_out"))
    assert set(kernel_shell.display_formatter.format(acts)[0]) == {"text/plain"}
    extension.load_ipython_extension(kernel_shell)
    assert "interplab" in kernel_shell.magics_manager.magics["line"]
    data, _ = kernel_shell.display_formatter.format(acts)
    assert data["text/plain"] == repr(acts)
    assert data[WIDGET_VIEW]["model_id"]
    kernel_shell.run_line_magic("interplab", "page_tokens=300")
    assert options["page_tokens"] == 300

    extension.unload_ipython_extension(kernel_shell)
    assert kernel_shell.display_formatter.format(acts)[0] == {"text/plain": repr(acts)}


class ZMQInteractiveShell:
    """A stand-in with the kernel shell's class name and a real display formatter."""

    def __init__(self) -> None:
        self.display_formatter = DisplayFormatter()
        self.magics: dict[str, Any] = {}

    def register_magic_function(self, func: Any, magic_kind: str, magic_name: str) -> None:
        self.magics[magic_name] = func


def test_register_on_a_kernel_like_shell() -> None:
    shell = ZMQInteractiveShell()
    acts = hand_activations()
    extension.load_ipython_extension(shell)
    assert shell.magics["interplab"] is extension.interplab_magic
    data, _ = shell.display_formatter.format(acts)
    assert data["text/plain"] == repr(acts) and WIDGET_VIEW in data
    extension.unload_ipython_extension(shell)
    assert shell.display_formatter.format(acts)[0] == {"text/plain": repr(acts)}


def test_register_display_reaches_a_loaded_shell(kernel_shell: Any) -> None:
    class Result:
        def __repr__(self) -> str:
            return "Result()"

    extension.load_ipython_extension(kernel_shell)
    try:
        extension.register_display(Result, lambda obj: TokenHeatmap(["a"], [1.0]))
        data, _ = kernel_shell.display_formatter.format(Result())
        assert data["text/plain"] == "Result()" and WIDGET_VIEW in data
    finally:
        extension.DISPLAYS.pop(Result, None)


def test_widget_bundle_follows_edits_of_its_files_with_hot_reload(tmp_path):
    """With ANYWIDGET_HMR=1 a widget's concatenated module is rebuilt when one of its files changes."""
    from interplab.widgets._kit import Bundle

    parts = [tmp_path / "a.js", tmp_path / "b.js"]
    parts[0].write_text("const a = 1;")
    parts[1].write_text("export default {};")
    seen: list[str] = []
    bundle = Bundle(parts, hot_reload=True)
    bundle.changed.connect(seen.append)
    try:
        assert str(bundle) == "const a = 1;\nexport default {};"
        time.sleep(0.3)  # let the watchers start
        parts[0].write_text("const a = 2;")
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen and seen[-1] == "const a = 2;\nexport default {};" == str(bundle)
    finally:
        bundle.stop()
    assert str(Bundle(parts, hot_reload=False)) == "const a = 2;\nexport default {};"


def test_sae_hover_leaves_out_latents_the_sae_says_are_dense(tmp_path, monkeypatch) -> None:
    """With the SAE's firing rates, the hover's top latents (and the latents offered by default) leave out those
    firing on more than 10% of tokens; the widget sends its top lists and says what they leave out."""
    from interplab.core.saes import SAE

    monkeypatch.setenv("INTERPLAB_CACHE", str(tmp_path))
    acts = hand_activations(d=6)
    sae = SAE.create("standard", d_in=6, d_sae=16, site=acts.sites[0])
    sae.init_weights(seed=1)
    latents = sae.encode(acts.flat(acts.sites[0])).detach()
    strongest = latents.topk(1, dim=1).indices.ravel().unique()
    rates = torch.full((16,), 0.05)
    rates[strongest] = 0.6
    sae.firing_rates = rates
    dense = (rates > 0.1).numpy()
    w = FeatureHeatmap(acts, sae, features=list(range(16)))
    top = latents.masked_fill(torch.from_numpy(dense), 0).topk(TOP_K, dim=1)
    np.testing.assert_allclose(w.data.top_values, top.values.numpy(), rtol=1e-6)
    kept = w.data.top_values > 0
    assert not set(w.data.top_features[kept].tolist()) & set(np.flatnonzero(dense).tolist())
    assert w.top_filter == "latents on > 10% of tokens left out"
    np.testing.assert_array_equal(payload_array(w.top_features), w.data.top_features)  # every column sent, still
    default = FeatureHeatmap(acts, sae)  # the latents offered by default are not dense ones either
    assert not set(default.feature_ids) & set(np.flatnonzero(dense).tolist())
    unfiltered = FeatureHeatmap(acts, sae, features=list(range(16)), max_density=None)
    assert unfiltered.top_filter == "" and unfiltered.top_features == {}  # computed in the browser
    np.testing.assert_array_equal(unfiltered.data.top_features, latents.topk(TOP_K, dim=1).indices.numpy())
