"""A readable CircuitGraph in a real JupyterLab (live kernel), with no dashboard linked: the logit nodes carry
their tokens' names on the canvas without overlapping, the pruning rule is written above the graph, clicking a
feature opens its card from the graph's own data (top activations, logit effects), Pin keeps a node shown and
labelled whatever the slider says, Hide removes one until "Show hidden" brings it back, and Python sees both."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Page, expect

from .test_circuit_lab import GRAPH_PRELUDE, node_xy, open_graph
from .test_heatmap import kernel_eval, wait_for_python

if TYPE_CHECKING:
    from .conftest import LabServer, RunNotebook

pytestmark = pytest.mark.browser

SETUP = (
    GRAPH_PRELUDE
    + """cards = ilab.circuits.feature_cards(graph, model, tcs, [PROMPT, *TEXTS[:3]])
w = ilab.widgets.CircuitGraph(graph, cards=cards)
kind, layer, rank, latent = (payload_array(w.graph[k]) for k in ("kind", "layer", "rank", "latent"))
NAMES = w.graph["names"]
LOGITS = [NAMES[i] for i in np.nonzero(kind == 3)[0]]
# a feature shown at the starting threshold (0.8) and hidden at 0.05, and another shown feature
F = int(np.nonzero((kind == 0) & (rank <= 0.8) & (rank > 0.05))[0][0])
OTHER = int(np.nonzero((kind == 0) & (rank <= 0.8) & (np.arange(len(kind)) != F))[0][0])
CARD = cards[f"{layer[F]}_{latent[F]}"]
display(w)
"""
)


def test_readable_graph_labels_card_pin_and_hide(page: Page, run_notebook: RunNotebook, lab_server: LabServer,
                                                 scratch_dir: Path):  # fmt: skip
    page.set_viewport_size({"width": 1280, "height": 900})
    out, canvas = open_graph(page, run_notebook, lab_server, scratch_dir / "readable.ipynb", SETUP)
    logits = json.loads(kernel_eval(page, "import json; print(json.dumps(LOGITS))"))
    f, other = (int(x) for x in kernel_eval(page, "print(F, OTHER)").split())
    card = json.loads(kernel_eval(page, "print(json.dumps(CARD))"))
    nodes = int(canvas.get_attribute("data-nodes") or 0)

    # every logit node is labelled with its token on the canvas, inside it, no two labels overlapping
    labels = canvas.evaluate("c => c.ilabLabels || []")
    assert sorted(lab["text"] for lab in labels) == sorted(logits) and len(logits) > 1
    boxes = sorted((lab["x"], lab["x"] + lab["width"]) for lab in labels)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(boxes)), boxes
    assert boxes[0][0] >= 0 and boxes[-1][1] <= float(canvas.evaluate("c => c.clientWidth"))
    inked = canvas.evaluate("""(c, lab) => { const d = window.devicePixelRatio || 1;
        const px = c.getContext('2d').getImageData(lab.x * d, lab.y * d, Math.max(1, lab.width * d), 10 * d).data;
        let dark = 0; for (let i = 0; i < px.length; i += 4) if (px[i] + px[i + 1] + px[i + 2] < 300) dark++;
        return dark; }""", labels[0])  # fmt: skip
    assert inked > 5  # the text is drawn, dark on the light canvas
    expect(out.locator(".ilab-cg-rule")).to_contain_text("at most 100")

    # hover a feature: its influence is a share of the total and a place among the nodes, not a bare fraction
    x, y = node_xy(page, canvas, f)
    page.mouse.move(x, y, steps=3)
    tip = page.locator(".ilab-cg-tip:visible")
    expect(tip).to_contain_text("% of the total (#")
    assert "influence rank" not in (tip.text_content() or "")

    # click it: its card, from the graph's own data, with no dashboard linked
    page.mouse.click(x, y)
    wait_for_python(page, "w.selected", str(f))
    box = out.locator(".ilab-cg-card")
    expect(box).to_be_visible()
    expect(box.locator("h4")).to_contain_text(f"L{card['layer']} #{card['latent']}")
    expect(box).to_contain_text("top activations")
    assert box.locator(".ilab-cg-example").count() == len(card["examples"]) > 0
    expect(box.locator(".ilab-cg-promotes td").first).to_have_text(card["promotes"][0][0])
    expect(box.locator(".ilab-cg-suppresses td").first).to_have_text(card["suppresses"][0][0])

    # Pin: Python sees it, and the node stays drawn and labelled when the slider would hide it
    box.locator("button.ilab-cg-pin").click()
    wait_for_python(page, "w.pinned", f"[{f}]")
    expect(box.locator("button.ilab-cg-pin")).to_have_text("Unpin")
    page.mouse.move(5, 5)
    out.locator(".ilab-circuit input[type=range]").fill("0.05")
    expect(canvas).not_to_have_attribute("data-nodes", str(nodes))
    assert canvas.evaluate(f"c => c.ilabNodePosition({f})") is not None
    pinned_name = kernel_eval(page, "print(NAMES[F])")
    assert pinned_name in [lab["text"] for lab in canvas.evaluate("c => c.ilabLabels")]

    # Hide another node: gone from the canvas until Show hidden brings it back
    out.locator(".ilab-circuit input[type=range]").fill("0.8")
    expect(canvas).to_have_attribute("data-nodes", str(nodes))
    ox, oy = node_xy(page, canvas, other)
    page.mouse.click(ox, oy)
    wait_for_python(page, "w.selected", str(other))
    box.locator("button.ilab-cg-hide").click()
    wait_for_python(page, "w.hidden", f"[{other}]")
    expect(canvas).to_have_attribute("data-nodes", str(nodes - 1))
    assert canvas.evaluate(f"c => c.ilabNodePosition({other})") is None
    unhide = out.locator("button.ilab-cg-unhide")
    expect(unhide).to_have_text("Show hidden (1)")
    unhide.click()
    wait_for_python(page, "w.hidden", "[]")
    expect(canvas).to_have_attribute("data-nodes", str(nodes))
    expect(unhide).to_be_hidden()
