"""FeatureDashboard's Python side (no browser): payloads, selection, scores, labels, links, messages.

The browser halves are tests/browser/test_dashboard.py (JupyterLab, exported HTML).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import traitlets
from interplab.core.features import FeatureData
from interplab.core.saes import SAE
from interplab.widgets._kit import payload_array
from interplab.widgets.dashboard import FeatureDashboard
from interplab.widgets.heatmap import FeatureHeatmap

from tests.tiny import TEXTS, tiny_model

D_SAE, N_TOP, N_Q, CTX, N_LOGIT, N_BINS, N_NEAR = 12, 3, 2, 4, 3, 5, 4
HTML_TOKEN = " <img src=x onerror=alert(1)>"


def hand_feature_data(d_sae: int = D_SAE, seed: int = 0) -> FeatureData:
    """A FeatureData filled by hand: latent i's contexts use token ids 10*i.., token 7 is markup."""
    rng = np.random.default_rng(seed)
    top_tokens = np.arange(d_sae * N_TOP * CTX, dtype=np.int32).reshape(d_sae, N_TOP, CTX) % 50
    top_tokens[:, :, -1] = -1  # padding
    top_tokens[0, 0, 1] = 7
    top_acts = rng.random((d_sae, N_TOP, CTX), dtype=np.float32)
    top_max = np.sort(rng.random((d_sae, N_TOP), dtype=np.float32), axis=1)[:, ::-1].copy()
    top_max[d_sae - 1] = 0  # the last latent never fired
    q_tokens = (top_tokens[:, :N_Q] + 1) % 50
    edges = np.linspace(0, 1, N_BINS + 1, dtype=np.float32)[None].repeat(d_sae, 0) * (1 + np.arange(d_sae))[:, None]
    logit_top = (np.arange(d_sae * N_LOGIT, dtype=np.int32).reshape(d_sae, N_LOGIT) + 100) % 150
    strings = {t: f" tok{t}" for t in range(150)}
    strings[7] = HTML_TOKEN
    return FeatureData(
        site="blocks.0.hook_resid_post",
        d_sae=d_sae,
        n_tokens=1000,
        context=CTX,
        lead=1,
        density=np.linspace(0.5, 0.0, d_sae, dtype=np.float32),
        max_act=np.arange(1, d_sae + 1, dtype=np.float32),
        mean_act=np.full(d_sae, 0.5, dtype=np.float32),
        hist_edges=edges.astype(np.float32),
        hist_counts=rng.integers(0, 100, (d_sae, N_BINS)).astype(np.int64),
        top_tokens=top_tokens,
        top_acts=top_acts,
        top_max=top_max,
        top_where=np.zeros((d_sae, N_TOP, 2), dtype=np.int64),
        quantile_tokens=q_tokens,
        quantile_acts=top_acts[:, :N_Q].copy(),
        quantile_max=top_max[:, :N_Q].copy(),
        quantile_where=np.zeros((d_sae, N_Q, 2), dtype=np.int64),
        logit_top_ids=logit_top,
        logit_top_values=np.ones((d_sae, N_LOGIT), dtype=np.float32),
        logit_bottom_ids=(logit_top + 3) % 150,
        logit_bottom_values=-np.ones((d_sae, N_LOGIT), dtype=np.float32),
        neighbour_ids=((np.arange(d_sae)[:, None] + np.arange(1, N_NEAR + 1)[None]) % d_sae).astype(np.int32),
        neighbour_sims=np.linspace(0.9, 0.1, N_NEAR, dtype=np.float32)[None].repeat(d_sae, 0),
        token_strings=strings,
        labels={2: "second"},
    )


@pytest.fixture
def data() -> FeatureData:
    return hand_feature_data()


def arr(payload: dict[str, Any]) -> np.ndarray:
    return payload_array(payload)


def test_payloads_are_binary_and_cards_follow_the_sort(data: FeatureData) -> None:
    w = FeatureDashboard(data, n_cards=4)
    for trait in ("density", "max_act", "mean_act"):
        assert isinstance(getattr(w, trait)["view"], memoryview)
    assert arr(w.density).tolist() == data.density.tolist()
    # density falls with the id: the first 4 by density are 0..3
    assert w.sent == [0, 1, 2, 3] and w.selected == 0
    assert w.cards["n_top"] == N_TOP and w.cards["lead"] == data.lead
    tokens = arr(w.cards["tokens"])
    assert tokens.shape == (4, N_TOP + N_Q, CTX)
    assert (tokens[1, :N_TOP] == data.top_tokens[1]).all() and (tokens[1, N_TOP:] == data.quantile_tokens[1]).all()
    acts = arr(w.cards["acts"])
    assert np.array_equal(acts[3, N_TOP:], data.quantile_acts[3])
    assert arr(w.cards["hist_counts"]).tolist() == data.hist_counts[:4].tolist()
    logit = arr(w.cards["logit_ids"])
    assert logit.shape == (4, 2, N_LOGIT)
    assert logit[2, 0].tolist() == data.logit_top_ids[2].tolist()
    assert logit[2, 1].tolist() == data.logit_bottom_ids[2].tolist()
    # every token the cards show (and each latent's top tokens, for search) has its string, markup kept as text
    max_tokens = arr(w.max_tokens)
    assert max_tokens.shape == (D_SAE, N_TOP) and max_tokens[D_SAE - 1].tolist() == [-1] * N_TOP  # never fired
    assert max_tokens[:-1].tolist() == data.top_tokens[:-1, :, data.lead].tolist()
    shown = set(tokens[tokens >= 0].tolist()) | set(logit.ravel().tolist()) | set(max_tokens[max_tokens >= 0].tolist())
    assert {int(k) for k in w.token_strings} == shown
    assert w.token_strings["7"] == HTML_TOKEN
    # neighbours come from the data; without the SAE and model the box is not live
    assert arr(w.cards["near_ids"]).tolist() == data.neighbour_ids[:4].tolist()
    assert arr(w.cards["near_cos"]).tolist() == data.neighbour_sims[:4].tolist()
    assert not w.live
    assert w.labels == {"2": "second"}
    assert re.fullmatch(r"FeatureDashboard\(blocks.0.hook_resid_post, 12 latents, 1000 tokens, 4 cards sent\)", repr(w))


def test_named_latents_and_sort_by_max(data: FeatureData) -> None:
    w = FeatureDashboard(data, n_cards=2, sort="max_act", latents=[5, 9])
    assert w.sent == [5, 9, 11, 10] and w.selected == 5 and w.sort == "max_act"
    w2 = FeatureDashboard(data, n_cards=1, selected=7)
    assert w2.sent == [7, 0] and w2.selected == 7


def test_selected_is_validated(data: FeatureData) -> None:
    w = FeatureDashboard(data, n_cards=2)
    w.selected = 11
    assert w.selected == 11
    with pytest.raises(traitlets.TraitError, match=r"selected=12 is out of range: latents are 0..11"):
        w.selected = 12


def test_scores_sort_the_list(data: FeatureData) -> None:
    scores = (np.arange(D_SAE) % 4).astype(np.float64)
    w = FeatureDashboard(data, n_cards=3, scores=scores, score_name="probe")
    assert w.sent == [3, 7, 11] and w.score_name == "probe" and w.sort == "score"
    assert FeatureDashboard(data, n_cards=1, scores=scores, sort="id").sent == [0]
    assert arr(w.score_values).tolist() == (np.arange(D_SAE) % 4).astype(np.float32).tolist()
    w.scores = None
    assert w.sort == "density" and w.score_values == {}
    w.scores = torch.arange(D_SAE)
    assert w.sort == "score" and arr(w.score_values)[5] == 5
    with pytest.raises(ValueError, match=r"one value per latent, shape \(12,\); got \(3,\)"):
        w.scores = [1, 2, 3]


def test_bad_input_is_named(data: FeatureData) -> None:
    with pytest.raises(ValueError, match="sort='size' is not one of"):
        FeatureDashboard(data, sort="size")
    with pytest.raises(ValueError, match=r"Latent 40 is out of range: latents are 0\.\.11"):
        FeatureDashboard(data, latents=[40])
    with pytest.raises(ValueError, match="sort='score' needs scores"):
        FeatureDashboard(data, sort="score")
    with pytest.raises(TypeError, match="takes FeatureData or an SAE; got list"):
        FeatureDashboard([1, 2])
    with pytest.raises(TypeError, match="needs the model"):
        FeatureDashboard(SAE.create("standard", d_in=4, d_sae=8))
    other = SAE.create("standard", d_in=4, d_sae=8)
    with pytest.raises(ValueError, match="The SAE has 8 latents but the feature data has 12"):
        FeatureDashboard(data, sae=other)


def test_labels_edit_from_browser_reach_the_data_and_file(data: FeatureData, tmp_path: Path) -> None:
    data.labels_path = str(tmp_path / "labels.json")
    w = FeatureDashboard(data, n_cards=2)
    w.labels = {**w.labels, "4": "cats"}  # what the label box does
    assert data.labels[4] == "cats" and data.labels[2] == "second"
    assert json.loads((tmp_path / "labels.json").read_text()) == {"4": "cats"}  # each edit is saved
    w.set_label(5, "dogs")
    assert data.labels[5] == "dogs" and w.labels["5"] == "dogs"
    w.labels = {"5": "dogs"}
    assert 2 not in data.labels and 4 not in data.labels
    assert json.loads((tmp_path / "labels.json").read_text()) == {"5": "dogs"}
    with pytest.raises(ValueError, match="out of range"):
        w.set_label(99, "x")


def test_histogram_chart(data: FeatureData) -> None:
    w = FeatureDashboard(data, n_cards=2)
    chart = w.histogram(2)
    spec = chart.to_dict()
    values = next(iter(spec["datasets"].values()))
    assert [v["count"] for v in values] == data.hist_counts[2].tolist()
    assert values[-1]["end"] == pytest.approx(float(data.hist_edges[2, -1]))
    assert spec["title"] == "latent 2 · second" and spec["mark"]["type"] == "bar"


def test_link_follows_the_heatmap(data: FeatureData) -> None:
    w = FeatureDashboard(data, n_cards=2)
    tokens = [["a", " b"], [" c"]]
    heat = FeatureHeatmap(tokens, np.ones((3, 3), dtype=np.float32), features=[2, 4, 9])
    assert w.link(heat) is w
    assert heat.labels == ["second", "", ""]
    heat.feature = 9
    assert w.selected == 9
    w.unlink()
    heat.feature = 4
    assert w.selected == 9


def collect_sent(w: FeatureDashboard) -> list[tuple[dict[str, Any], list[Any]]]:
    sent: list[tuple[dict[str, Any], list[Any]]] = []
    w.send = lambda content, buffers=None: sent.append((content, buffers or []))  # type: ignore[method-assign]
    return sent


def test_cards_on_demand_and_ping(data: FeatureData) -> None:
    w = FeatureDashboard(data, n_cards=2)
    sent = collect_sent(w)
    w._on_message(w, {"type": "ping"}, [])
    assert sent[-1][0] == {"type": "pong", "live": False}
    w._on_message(w, {"type": "card", "latent": 8}, [])
    content, buffers = sent[-1]
    meta = content["cards"]
    ids = np.frombuffer(bytes(buffers[meta["ids"]["buffer"]]), dtype=np.int32)
    assert content["type"] == "card" and ids.tolist() == [8]
    tok = np.frombuffer(bytes(buffers[meta["tokens"]["buffer"]]), dtype=np.int32).reshape(meta["tokens"]["shape"])
    assert np.array_equal(tok[0, :N_TOP], data.top_tokens[8])
    assert all(str(t) in content["token_strings"] for t in tok[tok >= 0].ravel())
    n = len(sent)
    w._on_message(w, {"type": "card", "latent": 99}, [])  # out of range: ignored
    w._on_message(w, {"type": "card", "latent": "x"}, [])
    assert len(sent) == n


def test_try_text_on_a_tiny_model() -> None:
    model = tiny_model("gpt2")
    sae = SAE.create("standard", d_in=model.d_model, d_sae=D_SAE, site="blocks.0.hook_resid_post")
    sae.init_weights(seed=3)
    w = FeatureDashboard(hand_feature_data(), sae=sae, model=model, n_cards=2, max_density=None)
    assert w.live
    out = w.try_text(TEXTS[0], latent=3)
    acts = model.collect([TEXTS[0]], sites=[sae.site])
    lat = sae.encode(acts.flat(sae.site)).detach()
    n = len(out["tokens"])
    assert n in (lat.shape[0], lat.shape[0] - 1)
    lat = lat[-n:]
    assert np.allclose(out["acts"], lat[:, 3].numpy(), atol=1e-5)
    assert np.allclose(out["top_values"][:, 0], lat.max(1).values.numpy(), atol=1e-5)
    # by default the lists leave out latents firing on more than 10% of the data's tokens
    w = FeatureDashboard(hand_feature_data(), sae=sae, model=model, n_cards=2)
    dense = torch.from_numpy(w.data.density > 0.1)
    filtered = w.try_text(TEXTS[0], latent=3)
    assert np.allclose(filtered["acts"], out["acts"])
    assert np.allclose(filtered["top_values"][:, 0], lat.masked_fill(dense, 0).max(1).values.numpy(), atol=1e-5)
    assert not set(filtered["top_ids"][filtered["top_values"] > 0].tolist()) & set(np.flatnonzero(dense).tolist())
    assert filtered["density_filter"].startswith("latents firing on more than 10% of tokens left out (density: feature")
    sent = collect_sent(w)
    w._on_message(w, {"type": "try", "text": TEXTS[0], "latent": 3}, [])
    content, buffers = sent[-1]
    assert content["tokens"] == out["tokens"] and content["latent"] == 3
    assert content["density_filter"] == filtered["density_filter"]  # the box says what its lists leave out
    assert np.frombuffer(bytes(buffers[0]), dtype=np.float32).tolist() == out["acts"].tolist()
    w._on_message(w, {"type": "try", "text": "  ", "latent": 3}, [])
    assert "non-empty string" in sent[-1][0]["error"]
    with pytest.raises(RuntimeError, match="needs the SAE and the model"):
        FeatureDashboard(hand_feature_data()).try_text("hi")


def test_computes_feature_data_from_an_sae() -> None:
    model = tiny_model("gpt2")
    sae = SAE.create("standard", d_in=model.d_model, d_sae=D_SAE, site="blocks.0.hook_resid_post")
    w = FeatureDashboard(sae, model, TEXTS, n_tokens=40, n_top=3, context=6, progress=False, n_cards=5)
    d = w.data
    assert isinstance(d, FeatureData) and d.d_sae == D_SAE and 0 < d.n_tokens <= 40
    assert w.live and len(w.sent) == 5
    assert arr(w.density).tolist() == d.density.tolist()
    assert arr(w.cards["tokens"]).shape == (5, d.n_top + d.n_quantile, 6)
    with pytest.raises(TypeError, match="only sae= and model="):
        FeatureDashboard(d, model, TEXTS)


def test_the_search_index_is_shipped_to_the_browser(data: FeatureData) -> None:
    """The search box looks in the index Python builds: the same texts, entries and kinds, and says what it
    searched."""
    from interplab.core.features.search_index import search_index

    w = FeatureDashboard(data, n_cards=2)
    index = search_index(data)
    sent = w.search_index
    assert sent["texts"] == index.texts and sent["searched"] == index.searched
    for name in ("starts", "entries", "kinds"):
        np.testing.assert_array_equal(arr(sent[name]), getattr(index, name))
    assert "promotes most" in sent["searched"]
