"""CircuitGraph in a real JupyterLab (live kernel): it draws, hovering a node lights its strongest paths with
the hover box inside the viewport, the pruning slider redraws in the browser (and tells Python), clicking a
feature opens its card in the linked FeatureDashboard, and shift-click + Group makes a supernode in Python."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Locator, Page, expect

from .conftest import REPO_ROOT, cell_output_locator
from .test_heatmap import kernel_eval, wait_for_python
from .test_tour import _notebook

if TYPE_CHECKING:
    from .conftest import LabServer, RunNotebook

pytestmark = pytest.mark.browser

#: The kernel's first lines in the circuit browser tests: the tiny Gemma 3, its transcoders and the graph's prompt.
GRAPH_PRELUDE = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT)!r})
import numpy as np
import torch
import interplab as ilab
from interplab.core.features import feature_data
from interplab.widgets._kit import payload_array
from tests.circuits.test_attribute import PROMPT, transcoders
from tests.tiny import TEXTS, tiny_model
torch.set_num_threads(1)
model = tiny_model("gemma3")
tcs = transcoders(model.d_model)
graph = ilab.circuits.attribute(model, tcs, PROMPT, batch_size=16, progress=False)
"""

SETUP = (
    GRAPH_PRELUDE
    + """data = feature_data(tcs[1], model, TEXTS, progress=False)
dash = ilab.widgets.FeatureDashboard(data, sae=tcs[1], model=model, n_cards=4)
w = ilab.widgets.CircuitGraph(graph, dashboard=dash, dashboard_layer=1)
kind, layer, rank = (payload_array(w.graph[k]) for k in ("kind", "layer", "rank"))
# a layer-1 feature shown at the starting threshold (0.8) and hidden at 0.1, and its latent
F = int(np.nonzero((kind == 0) & (layer == 1) & (rank <= 0.8) & (rank > 0.1))[0][0])
LATENT = int(payload_array(w.graph["latent"])[F])
OTHER = int(np.nonzero((kind == 0) & (rank <= 0.8) & (np.arange(len(kind)) != F))[0][0])
display(w, dash)
"""
)


def node_xy(page: Page, canvas: Locator, i: int) -> tuple[float, float]:
    """Node ``i``'s centre in page coordinates (the tiny model's graph is 240 px high: all of it on screen)."""
    canvas.evaluate("c => c.scrollIntoView({block: 'center'})")
    page.wait_for_timeout(150)
    xy = canvas.evaluate(f"c => c.ilabNodePosition({i})")
    box = canvas.bounding_box()
    assert xy and box, f"node {i} is not drawn"
    return box["x"] + xy[0], box["y"] + xy[1]


def open_graph(page: Page, run_notebook: RunNotebook, lab_server: LabServer, nb: Path, setup: str
               ) -> tuple[Locator, Locator]:  # fmt: skip
    """Run ``setup`` as a notebook in JupyterLab; (its output, the graph's canvas) once the canvas shows every node
    the starting threshold keeps."""
    nb.write_text(json.dumps(_notebook(setup)))
    cells = run_notebook(page, nb.relative_to(lab_server.root).as_posix(), timeout_s=240)
    assert not any(c["has_error"] for c in cells), json.dumps(cells, indent=1)
    out = cell_output_locator(page, cells[0]["index"], cells[0]["panel_id"])
    canvas = out.locator(".ilab-circuit canvas")
    shown = kernel_eval(page, "print(int(((kind >= 2) | (rank <= 0.8)).sum()))")  # tokens and logits always
    expect(canvas).to_have_attribute("data-nodes", shown, timeout=30_000)
    return out, canvas


def test_circuit_graph_in_jupyterlab(page: Page, run_notebook: RunNotebook, lab_server: LabServer, scratch_dir: Path):
    page.set_viewport_size({"width": 1280, "height": 800})
    out, canvas = open_graph(page, run_notebook, lab_server, scratch_dir / "circuit.ipynb", SETUP)
    nodes = int(canvas.get_attribute("data-nodes") or 0)
    assert nodes > 10 and int(canvas.get_attribute("data-edges") or 0) > 10
    f, latent, other = (int(x) for x in kernel_eval(page, "print(F, LATENT, OTHER)").split())

    # hover a feature: its strongest paths light up and the box names it, inside the viewport
    assert canvas.get_attribute("data-lit") == "0"
    x, y = node_xy(page, canvas, f)
    page.mouse.move(x, y, steps=3)
    tip = page.locator(".ilab-cg-tip:visible")
    expect(tip).to_contain_text(f"feature: L1 #{latent}")
    assert int(canvas.get_attribute("data-lit") or 0) > 0
    t, vp = tip.bounding_box(), page.viewport_size
    assert t and vp and t["x"] >= 0 and t["y"] >= 0, t
    assert t["x"] + t["width"] <= vp["width"] and t["y"] + t["height"] <= vp["height"], (t, vp)

    # click it: Python knows the node, and the linked dashboard opens the latent's card
    page.mouse.click(x, y)
    wait_for_python(page, "w.selected", str(f))
    wait_for_python(page, "dash.selected", str(latent))
    dash_card = out.locator(".ilab-dash .ilab-dash-card")
    expect(dash_card).to_have_attribute("data-latent", str(latent), timeout=15_000)

    # shift-click two nodes, name them, Group: a supernode in Python and in the widget's list (the dashboard
    # scrolls its opened row into view, and the graph's card sits between them: find the node again)
    x, y = node_xy(page, canvas, f)
    page.keyboard.down("Shift")
    page.mouse.click(x, y)
    ox, oy = node_xy(page, canvas, other)
    page.mouse.click(ox, oy)
    page.keyboard.up("Shift")
    out.locator(".ilab-circuit .ilab-cg-bar input.ilab-search").fill("answer path")
    out.locator(".ilab-circuit .ilab-cg-bar button").click()
    wait_for_python(page, "sorted(w.supernodes[0]['nodes']), w.supernodes[0]['label']",
                    f"{sorted([f, other])} answer path")  # fmt: skip
    expect(out.locator(".ilab-cg-groups")).to_contain_text("answer path (2)")

    # the slider prunes in the browser (fewer nodes drawn, the feature hidden) and tells Python
    page.mouse.move(5, 5)
    out.locator(".ilab-circuit input[type=range]").fill("0.1")
    expect(canvas).not_to_have_attribute("data-nodes", str(nodes))
    assert int(canvas.get_attribute("data-nodes") or 0) < nodes
    assert canvas.evaluate(f"c => c.ilabNodePosition({f})") is None
    wait_for_python(page, "w.threshold", "0.1")
