"""CircuitGraph in exported HTML, in headless Chromium over file:// with every network request aborted:
it draws the graph, its hover box names the node and stays inside the viewport, the slider prunes in
the browser, the dark theme paints a dark canvas with light nodes, and the logit labels and a clicked
feature's card (and its QK section: incoming heads, query-side and key-side contributors) are there without
a kernel; an edge-level circuit draws its heads and MLPs by layer and names a clicked head."""

from __future__ import annotations

from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
from interplab.core.circuits import attribute, feature_cards, qk_cards
from interplab.widgets import CircuitGraph
from interplab.widgets._kit import payload_array
from ipywidgets.embed import dependency_state, embed_data
from playwright.sync_api import Page, expect

from interplab.export import export_html
from tests.circuits.test_attribute import PROMPT, transcoders
from tests.export.test_export import ensure_web_assets
from tests.tiny import tiny_model

pytestmark = pytest.mark.browser
PAINTED = "ilab-circuit-painted"


def exported(tmp_path: Path, scheme: str) -> Path:
    return exported_widget(tmp_path, scheme)[0]


def exported_widget(
    tmp_path: Path, scheme: str, with_cards: bool = False, group: bool = False, qk_nodes: int = 0
) -> tuple[Path, CircuitGraph]:
    torch.set_num_threads(1)
    model = tiny_model("gemma3")
    tcs = transcoders(model.d_model)
    graph = attribute(model, tcs, PROMPT, batch_size=16, progress=False)
    cards = feature_cards(graph, model, tcs) if with_cards else None
    shown = CircuitGraph(graph).view_index
    qk_at = [i for i in range(graph.n_features) if graph.node(i)["pos"] > 1 and shown(i) is not None][:qk_nodes]
    qk = qk_cards(model, tcs, graph, qk_at, top=4, batch_size=16) if qk_nodes else None
    w = CircuitGraph(graph, scheme=scheme, cards=cards, qk=qk)
    w.threshold = 1.0
    if group:  # the first token and the last logit: opposite corners of the graph
        kinds = payload_array(w.graph["kind"])
        w.group("far apart", [int(np.nonzero(kinds == 2)[0][0]), int(np.nonzero(kinds == 3)[0][-1])])
    return export_widget(tmp_path, w), w


def export_widget(tmp_path: Path, w: CircuitGraph) -> Path:
    """``w`` stored with its state in a notebook, exported to HTML."""
    data = embed_data(views=[w], drop_defaults=False, state=dependency_state([w], drop_defaults=False))
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": data["manager_state"]}
    cell = nbformat.v4.new_code_cell("CircuitGraph(graph)", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("execute_result", execution_count=1, data={
        "application/vnd.jupyter.widget-view+json": data["view_specs"][0], "text/plain": repr(w)})]  # fmt: skip
    nb.cells = [cell]
    nbformat.write(nb, tmp_path / "c.ipynb")
    return export_html(tmp_path / "c.ipynb", tmp_path / "site" / "c.html", execute=False)


def open_offline(page: Page, html: Path) -> list[str]:
    blocked: list[str] = []
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(("file:", "data:", "blob:"))
               else (blocked.append(r.request.url), r.abort()))  # fmt: skip
    page.goto(html.as_uri(), wait_until="load")
    page.wait_for_function(f"performance.getEntriesByName('{PAINTED}', 'mark').length > 0", timeout=30_000)
    return blocked


def test_exported_graph_draws_hovers_inside_the_viewport_and_prunes(page: Page, tmp_path):
    ensure_web_assets()
    html = exported(tmp_path, "light")
    page.set_viewport_size({"width": 1000, "height": 700})
    blocked = open_offline(page, html)
    assert not blocked
    canvas = page.locator(".ilab-circuit canvas")
    nodes, edges = int(canvas.get_attribute("data-nodes")), int(canvas.get_attribute("data-edges"))
    assert nodes > 10 and edges > 10
    # hover a node: the box names it and stays on screen
    # the drawn node nearest the middle of the canvas
    xy = page.evaluate("""() => { const c = document.querySelector('.ilab-circuit canvas'); let best = null;
        for (let i = 0; i < 500; i++) { const p = c.ilabNodePosition(i);
          if (p && (!best || Math.abs(p[0] - 450) < Math.abs(best[0] - 450))) best = p; } return best; }""")
    canvas.scroll_into_view_if_needed()
    page.evaluate(f"window.scrollBy(0, {xy[1]} - 200)")  # the node itself on screen
    page.wait_for_timeout(200)
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + xy[0], box["y"] + xy[1], steps=4)
    tip = page.locator(".ilab-cg-tip")
    tip.wait_for(state="visible")
    assert "logit" in tip.text_content() or "feature" in tip.text_content() or "error" in tip.text_content()
    t = tip.bounding_box()
    assert t["x"] >= 0 and t["y"] >= 0 and t["x"] + t["width"] <= 1000 and t["y"] + t["height"] <= 700
    # the slider prunes in the browser
    page.locator(".ilab-circuit input[type=range]").fill("0.1")
    fewer = int(canvas.get_attribute("data-nodes"))
    assert fewer < nodes


def test_dark_theme_paints_a_dark_canvas_with_light_nodes(page: Page, tmp_path):
    ensure_web_assets()
    html = exported(tmp_path, "dark")
    open_offline(page, html)
    stats = page.evaluate("""() => { const c = document.querySelector('.ilab-circuit canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let dark = 0, bright = 0;
        for (let i = 0; i < d.length; i += 4) { const l = (d[i] + d[i + 1] + d[i + 2]) / 3;
          if (l < 60) dark++; else if (l > 120) bright++; }
        return {dark, bright, total: d.length / 4}; }""")
    assert stats["dark"] > 0.5 * stats["total"] and stats["bright"] > 50


def test_exported_graph_keeps_its_labels_and_feature_cards(page: Page, tmp_path):
    ensure_web_assets()
    html, w = exported_widget(tmp_path, "light", with_cards=True)
    page.set_viewport_size({"width": 1400, "height": 900})
    assert not open_offline(page, html)
    canvas = page.locator(".ilab-circuit canvas")
    labels = canvas.evaluate("c => c.ilabLabels || []")
    assert len(labels) >= 2 and all(lab["text"] for lab in labels)  # every logit named on the canvas
    expect(page.locator(".ilab-cg-rule")).to_contain_text("influence on the logits")
    kinds = payload_array(w.graph["kind"])
    feature = int(np.nonzero(kinds == 0)[0][0])
    xy = canvas.evaluate(f"c => c.ilabNodePosition({feature})")
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    page.mouse.click(box["x"] + xy[0], box["y"] + xy[1])
    card = page.locator(".ilab-cg-card")
    expect(card).to_be_visible()
    expect(card.locator("h4")).to_have_text(f"feature: {w.graph['labels'][feature]}")
    expect(card).to_contain_text("top activations")
    assert card.locator(".ilab-cg-promotes tr").count() > 0


def test_a_supernode_rings_its_members_instead_of_boxing_the_graph(page: Page, tmp_path):
    ensure_web_assets()
    html, w = exported_widget(tmp_path, "light", group=True)
    assert not open_offline(page, html)
    a, b = w.supernodes[0]["nodes"]
    gold = """([x, y]) => { const c = document.querySelector('.ilab-circuit canvas');
        const d = window.devicePixelRatio || 1;
        const p = c.getContext('2d').getImageData(Math.round(x * d), Math.round(y * d), 1, 1).data;
        return p[0] > 140 && p[1] > 90 && p[1] < 170 && p[2] < 60; }"""  # fmt: skip
    canvas = page.locator(".ilab-circuit canvas")
    (ax, ay), (bx, by) = (canvas.evaluate(f"c => c.ilabNodePosition({i})") for i in (a, b))
    assert bx - ax > 300 and ay - by > 100  # far apart

    def ring(x: float, y: float) -> bool:  # gold 8-10 px to each side
        return all(any(page.evaluate(gold, [x + side * r, y]) for r in (8, 9, 10)) for side in (-1, 1))

    assert ring(ax, ay) and ring(bx, by)  # a ring around each member
    # a box around both would run along x = ax - 8, y = by - 8 and x = bx + 8 between them: nothing is drawn there
    mid_x, mid_y = (ax + bx) / 2, (ay + by) / 2
    box = [(ax - 8 + e, mid_y) for e in (-1, 0, 1)] + [(mid_x, by - 8 + e) for e in (-1, 0, 1)]
    box += [(bx + 8 + e, mid_y) for e in (-1, 0, 1)]
    assert not any(page.evaluate(gold, list(p)) for p in box)


def test_exported_graph_keeps_a_features_qk_section(page: Page, tmp_path):
    ensure_web_assets()
    html, w = exported_widget(tmp_path, "light", qk_nodes=2)
    page.set_viewport_size({"width": 1400, "height": 900})
    assert not open_offline(page, html)
    view_node = int(next(iter(w.graph["qk"])))
    entry = w.graph["qk"][str(view_node)]
    canvas = page.locator(".ilab-circuit canvas")
    xy = canvas.evaluate(f"c => c.ilabNodePosition({view_node})")
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    page.mouse.click(box["x"] + xy[0], box["y"] + xy[1])
    qk = page.locator(".ilab-cg-card .ilab-cg-qk")
    expect(qk).to_be_visible()
    layer, head = entry["head"]
    expect(qk).to_contain_text(f"why L{layer}.H{head} attends to")
    assert qk.locator(".ilab-cg-qk-heads tr").count() == len(entry["heads"]) > 0
    query_rows = qk.locator(".ilab-cg-qk-query tr")
    assert query_rows.count() == len(entry["query"]) > 0 and qk.locator(".ilab-cg-qk-key tr").count() > 0
    first = entry["query"][0]
    name = w.graph["labels"][first["view"]] if first["view"] >= 0 else first["source"]
    expect(query_rows.first).to_contain_text(name)
    # a node without QK data shows no QK section
    kinds = payload_array(w.graph["kind"])
    other = int(next(i for i in np.nonzero(kinds == 0)[0] if str(i) not in w.graph["qk"]))
    xy = canvas.evaluate(f"c => c.ilabNodePosition({other})")
    page.mouse.click(box["x"] + xy[0], box["y"] + xy[1])
    expect(page.locator(".ilab-cg-card h4")).to_have_text(f"feature: {w.graph['labels'][other]}")
    assert page.locator(".ilab-cg-card .ilab-cg-qk").count() == 0


def test_exported_edge_circuit_draws_heads_by_layer_and_names_a_clicked_head(page: Page, tmp_path):
    from tests.circuits.test_edge_view import small_circuit

    ensure_web_assets()
    w = CircuitGraph(small_circuit())
    html = export_widget(tmp_path, w)
    page.set_viewport_size({"width": 1400, "height": 900})
    assert not open_offline(page, html)
    canvas = page.locator(".ilab-circuit canvas")
    assert int(canvas.get_attribute("data-nodes")) == w.graph["n_nodes"]
    assert int(canvas.get_attribute("data-edges")) == w.graph["n_edges"] == 6
    expect(page.locator(".ilab-cg-rule")).to_contain_text("head-level circuit")
    names = w.graph["names"]
    head, mlp = names.index("a1.h3"), names.index("m1")
    (hx, hy), (mx, my) = (canvas.evaluate(f"c => c.ilabNodePosition({i})") for i in (head, mlp))
    assert hy == my and mx > hx  # the same layer's row, the MLP in the last column
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    page.mouse.click(box["x"] + hx, box["y"] + hy)
    card = page.locator(".ilab-cg-card")
    expect(card.locator("h4")).to_have_text("head: a1.h3")
    expect(card).to_contain_text("layer 1, column h3")
    expect(card).to_contain_text("strongest inputs")
    expect(card).not_to_contain_text("top activations")
