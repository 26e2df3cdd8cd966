"""CircuitGraph's attention edges in exported HTML, in headless Chromium over file:// with every network request
aborted: clicking an attention edge on the canvas opens its card with the QK section that ``qk_cards`` computed
for it (the head moving the most from the source's position, its query-side and key-side contributors), and a
node's incoming attention edge in its card's strongest inputs opens the same card; an edge within one position
says it does not go through attention."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.circuits import attribute, qk_cards
from interplab.widgets import CircuitGraph
from interplab.widgets._kit import payload_array
from playwright.sync_api import Page, expect

from tests.browser.test_circuit import export_widget, open_offline
from tests.circuits.test_attribute import PROMPT, transcoders
from tests.export.test_export import ensure_web_assets
from tests.tiny import tiny_model

pytestmark = pytest.mark.browser


def edge_widget() -> CircuitGraph:
    torch.set_num_threads(1)
    model = tiny_model("gemma3")
    tcs = transcoders(model.d_model)
    graph = attribute(model, tcs, PROMPT, batch_size=16, progress=False)
    edges = CircuitGraph(graph).attention_edges()[:3]
    w = CircuitGraph(graph, qk=qk_cards(model, tcs, graph, edges, top=4, batch_size=16))
    w.threshold = 1.0
    return w


def test_clicking_an_attention_edge_shows_its_qk_panel_in_exported_html(page: Page, tmp_path):
    ensure_web_assets()
    w = edge_widget()
    html = export_widget(tmp_path, w)
    page.set_viewport_size({"width": 1400, "height": 900})
    assert not open_offline(page, html)
    src, dst = payload_array(w.graph["src"]), payload_array(w.graph["dst"])
    keyed = [e for e in range(len(src)) if f"{dst[e]},{src[e]}" in w.graph["qk"]]
    assert keyed  # the edges qk_cards was given are drawn, with their QK data
    canvas = page.locator(".ilab-circuit canvas")
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    e = next(e for e in keyed if canvas.evaluate(f"c => c.ilabEdgePoint({e})") is not None)
    entry = w.graph["qk"][f"{dst[e]},{src[e]}"]
    x, y = canvas.evaluate(f"c => c.ilabEdgePoint({e})")
    page.mouse.click(box["x"] + x, box["y"] + y)
    card = page.locator(".ilab-cg-card")
    expect(card.locator("h4")).to_have_text(f"edge: {w.graph['labels'][src[e]]} → {w.graph['labels'][dst[e]]}")
    assert card.get_attribute("data-edge") == str(e)
    qk = card.locator(".ilab-cg-qk")
    expect(qk).to_be_visible()
    layer, head = entry["head"]
    expect(qk).to_contain_text(f"why L{layer}.H{head} attends to")
    assert entry["key_pos"] == int(payload_array(w.graph["pos"])[src[e]])  # the source's position
    assert qk.locator(".ilab-cg-qk-query tr").count() == len(entry["query"]) > 0
    assert qk.locator(".ilab-cg-qk-key tr").count() == len(entry["key"]) > 0
    # the target's card links its incoming attention edge to the same panel
    xy = canvas.evaluate(f"c => c.ilabNodePosition({dst[e]})")
    page.mouse.click(box["x"] + xy[0], box["y"] + xy[1])
    expect(card.locator("h4")).not_to_contain_text("edge:")
    weight = payload_array(w.graph["weight"])
    top_in = sorted((k for k in range(len(src)) if dst[k] == dst[e]), key=lambda k: -abs(weight[k]))[:3]
    linked = [k for k in top_in if f"{dst[k]},{src[k]}" in w.graph["qk"]]
    links = card.locator(".ilab-cg-edge-link")
    assert links.count() == len(linked) > 0
    links.first.click()
    expect(card.locator("h4")).to_have_text(f"edge: {w.graph['labels'][src[linked[0]]]} → {w.graph['labels'][dst[e]]}")
    expect(card.locator(".ilab-cg-qk")).to_be_visible()
    # an edge within one position goes through no attention: no QK section
    pos = payload_array(w.graph["pos"])
    local = [k for k in range(len(src)) if pos[src[k]] == pos[dst[k]]]
    k = next(k for k in local if canvas.evaluate(f"c => c.ilabEdgePoint({k})") is not None)
    x, y = canvas.evaluate(f"c => c.ilabEdgePoint({k})")
    page.mouse.click(box["x"] + x, box["y"] + y)
    expect(card).to_contain_text("within one position")
    assert card.locator(".ilab-cg-qk").count() == 0 and card.get_attribute("data-edge") == str(k)
    assert np.any(pos[src] < pos[dst])
