"""FeatureDashboard in a real JupyterLab (live kernel) and in exported HTML (no kernel, no network).

The data is real: feature_data over a few texts of the default corpus with the embedded model and
its pretrained layer-6 SAE. One token string is replaced by HTML markup to check it stays text.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Page, expect

from tests.export.test_export import ensure_web_assets, export_code, kernel_home
from tests.notebooks.test_notebooks import export_checked

from .conftest import REPO_ROOT, cell_output_locator
from .test_export_html import RENDER_TIMEOUT_MS, Offline, offline  # noqa: F401  (fixture)
from .test_heatmap import kernel_eval, wait_for_python
from .test_tour import _notebook

if TYPE_CHECKING:
    from .conftest import LabServer, RunNotebook

pytestmark = pytest.mark.browser

HTML_TOKEN = " <img src=x onerror=alert(1)>"
BUILD = f"""
import json
import numpy as np
import interplab as ilab
from interplab.core.features import feature_data
model = ilab.load_model()
sae = ilab.load_sae("embedded", layer=6)
texts = ilab.default_corpus()[:6]
data = feature_data(sae, model, texts, n_tokens=1500, progress=False)
order = np.argsort(-data.density, kind="stable")
A, B = int(order[0]), int(order[1])          # the two densest latents: sent up front
FAR = int(order[-1])                          # the least dense: not sent, fetched on demand
tid = int(data.top_tokens[A, 0][data.top_tokens[A, 0] >= 0][0])
data.token_strings[tid] = {HTML_TOKEN!r}      # untrusted text in the card
data.labels_path = "labels.json"              # label edits go to the scratch folder
data.labels[B] = "zebra stripes"
dash = ilab.widgets.FeatureDashboard(data, sae=sae, model=model, n_cards=4)
print(A, B, FAR, dash.sent)
dash
"""
LINK = """
acts = model.collect(texts[:2], sites=[sae.site])
heat = ilab.widgets.FeatureHeatmap(acts, sae, features=[A, B, FAR])
dash.link(heat)
heat
"""


def ids_from(text: str) -> tuple[int, int, int]:
    a, b, far = (int(x) for x in text.split()[:3])
    return a, b, far


def test_dashboard_in_jupyterlab(page: Page, run_notebook: RunNotebook, lab_server: LabServer, scratch_dir: Path):
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    nb = scratch_dir / "dashboard.ipynb"
    nb.write_text(json.dumps(_notebook(BUILD, LINK)))
    cells = run_notebook(page, nb.relative_to(lab_server.root).as_posix(), timeout_s=300)
    assert not any(c["has_error"] for c in cells), json.dumps(cells, indent=1)
    a, b, far = ids_from(kernel_eval(page, "print(A, B, FAR)"))

    out = cell_output_locator(page, cells[0]["index"], cells[0]["panel_id"])
    root = out.locator(".ilab-dash")
    card = root.locator(".ilab-dash-card")
    expect(card).to_have_attribute("data-latent", str(a), timeout=30_000)
    rows = root.locator(".ilab-dash-row")
    expect(root.locator(".ilab-dash-count")).to_have_text("4096 latents (first 200 shown)")
    assert rows.first.get_attribute("data-latent") == str(a)  # sorted by density

    # The card: top contexts as coloured tokens, a histogram, a logit table, neighbours.
    examples = card.locator(".ilab-dash-examples").first.locator(".ilab-dash-ex")
    assert examples.count() > 0
    spans = examples.first.locator(".ilab-tok")
    assert any(float(v) > 0 for v in spans.evaluate_all("els => els.map(e => e.dataset.v)"))
    # the example's max is underlined and is the strongest activation of the latent on the corpus
    lead = examples.first.locator(".ilab-dash-lead")
    assert lead.count() == 1
    top = float(kernel_eval(page, f"print(float(data.top_max[{a}, 0]))"))
    assert float(lead.get_attribute("data-v") or "nan") == pytest.approx(top, rel=1e-6)
    assert card.locator("svg.ilab-dash-hist rect").count() > 0
    assert card.locator(".ilab-dash-logit").count() > 0
    # logit effects (unit decoder rows) with their trailing zeros and a sign, two decimals: "-0.90", not "-0.9"
    shown = card.locator(".ilab-dash-logitv").all_text_contents()
    code = f"v = np.stack([data.logit_top_values[{a}], data.logit_bottom_values[{a}]]); print(json.dumps(v.tolist()))"
    want = [f"{x:+.2f}" if x else "0.00" for side in json.loads(kernel_eval(page, code)) for x in side]
    assert shown == want
    assert all(abs(float(x)) < 50 for x in shown)  # through the unit decoder row: not ~1e3
    near_ids = card.locator(".ilab-dash-near .ilab-dash-nearbtn").evaluate_all("els => els.map(e => +e.dataset.latent)")
    assert near_ids == json.loads(kernel_eval(page, f"print(json.dumps(data.neighbour_ids[{a}].tolist()))"))

    # Markup in a token stays literal text.
    assert card.locator(".ilab-tok", has_text="<img src=x onerror=alert(1)>").count() >= 1
    assert root.locator("img").count() == 0

    # The list has a header naming its columns.
    expect(root.locator(".ilab-dash-listhead")).to_have_text("latent · labeldensity")

    # The search box filters by label, by id and by top token; Enter opens the first match.
    search = root.locator("input.ilab-search")
    word = kernel_eval(page, f"print(next(t.strip() for t in data.max_tokens({a}) if len(t.strip()) >= 3))")
    search.fill(word.lower())
    code = f"print(json.dumps(ilab.features.search_latents(data, {word.lower()!r}).tolist()))"
    want_rows = json.loads(kernel_eval(page, code))  # the browser's search applies the same rule
    assert a in want_rows and 0 < len(want_rows) <= 200
    expect(rows).to_have_count(len(want_rows))
    assert sorted(int(r) for r in rows.evaluate_all("els => els.map(e => e.dataset.latent)")) == want_rows
    search.press("Enter")
    wait_for_python(page, "dash.selected", rows.first.get_attribute("data-latent") or "")
    search.fill("zebra stripes")  # the label; "zebra" alone also finds latents promoting ' zebra'
    expect(rows).to_have_count(1)
    assert rows.first.get_attribute("data-latent") == str(b)
    expect(rows.first).to_contain_text(f"{b} · zebra stripes")
    search.fill("409")
    expect(rows).to_have_count(7)  # 409 and 4090..4095
    assert sorted(int(r) for r in rows.evaluate_all("els => els.map(e => e.dataset.latent)")) == [
        409,
        *range(4090, 4096),
    ]
    wait_for_python(page, "dash.query", "409")

    # The query is a trait: Python can set it too.
    kernel_eval(page, "dash.query = 'zebra stripes'")
    expect(rows).to_have_count(1)
    expect(search).to_have_value("zebra stripes")

    # Clicking a row switches the card and sets `selected` in Python.
    rows.first.click()
    wait_for_python(page, "dash.selected", str(b))
    expect(card).to_have_attribute("data-latent", str(b))
    expect(card.locator(".ilab-dash-title")).to_have_text(f"latent {b} · zebra stripes")

    # Setting `selected` from Python opens a latent whose card was not sent: fetched on demand.
    kernel_eval(page, f"dash.selected = {far}")
    expect(card).to_have_attribute("data-latent", str(far))
    expect(card.locator("svg.ilab-dash-hist")).to_have_count(1, timeout=30_000)

    # Clicking a neighbour opens it.
    near = card.locator(".ilab-dash-nearbtn").first
    near_id = near.get_attribute("data-latent")
    near.click()
    wait_for_python(page, "dash.selected", str(near_id))

    # Editing the label saves it in Python and shows it in the list.
    kernel_eval(page, f"dash.selected = {a}")
    expect(card).to_have_attribute("data-latent", str(a))
    label_box = card.locator("input.ilab-dash-label")
    label_box.fill("densest one")
    label_box.press("Enter")
    wait_for_python(page, f"dash.data.labels.get({a})", "densest one")
    search.fill("densest")
    expect(rows).to_have_count(1)
    # ... and reaches the linked heatmap (its feature list shows the label)
    wait_for_python(page, f"heat.labels[heat.feature_ids.index({a})]", "densest one")
    heat_out = cell_output_locator(page, cells[1]["index"], cells[1]["panel_id"])
    expect(heat_out.locator("select.ilab-select option", has_text="densest one")).to_have_count(1)

    # "Try your text": the kernel runs model + SAE and returns per-token activations.
    text = "The cat sat on the mat. <img src=x onerror=alert(1)>"
    box = root.locator("textarea.ilab-dash-text")
    expect(box).to_be_enabled(timeout=30_000)
    box.fill(text)
    root.locator("button.ilab-dash-run").click()
    got = root.locator(".ilab-dash-trytokens .ilab-tok")
    expect(got.first).to_be_visible(timeout=30_000)
    want = json.loads(
        kernel_eval(page, f"import json; print(json.dumps(dash.try_text({text!r}, {a})['acts'].tolist()))")
    )
    seen = [float(v) for v in got.evaluate_all("els => els.map(e => e.dataset.v)")]
    assert seen == pytest.approx(want, abs=1e-4)
    assert "".join(got.all_text_contents()).replace("·", " ") == text
    assert root.locator(".ilab-dash-tryrow").count() == len(want)
    assert root.locator("img").count() == 0
    # a latent listed at a token opens on click
    first_top = root.locator(".ilab-dash-tryrow .ilab-dash-nearbtn").first
    top_id = first_top.get_attribute("data-latent")
    first_top.click()
    wait_for_python(page, "dash.selected", str(top_id))

    # Linked heatmap: picking a latent there opens its card here.
    kernel_eval(page, f"heat.feature = {b}")
    wait_for_python(page, "dash.selected", str(b))
    expect(card).to_have_attribute("data-latent", str(b))
    heat = cell_output_locator(page, cells[1]["index"], cells[1]["panel_id"])
    heat.locator("select.ilab-select").select_option(str(far))
    wait_for_python(page, "dash.selected", str(far))
    assert not dialogs, dialogs


def test_exported_dashboard_renders_offline(page: Page, offline: Offline, tmp_path: Path) -> None:  # noqa: F811
    export_code(tmp_path, "dash", BUILD)
    site = tmp_path / "moved"
    shutil.move(tmp_path / "built", site)

    page.goto((site / "dash.html").as_uri())
    card = page.locator(".ilab-dash .ilab-dash-card")
    page.wait_for_selector(".ilab-dash .ilab-dash-card .ilab-dash-ex .ilab-tok", timeout=RENDER_TIMEOUT_MS)
    page.wait_for_timeout(500)
    page.screenshot(path=str(tmp_path / "dash.png"), full_page=True)
    first = card.get_attribute("data-latent")
    assert card.locator("svg.ilab-dash-hist rect").count() > 0
    assert card.locator(".ilab-dash-logit").count() > 0
    assert card.locator(".ilab-tok", has_text="<img src=x onerror=alert(1)>").count() >= 1
    assert page.locator(".ilab-dash img").count() == 0

    # Another latent sent up front renders on click, with no kernel.
    rows = page.locator(".ilab-dash .ilab-dash-row")
    second = rows.nth(1)
    second_id = second.get_attribute("data-latent")
    assert second_id != first
    second.click()
    expect(card).to_have_attribute("data-latent", str(second_id))
    assert card.locator(".ilab-dash-ex").count() > 0
    expect(card.locator(".ilab-dash-title")).to_contain_text("zebra stripes")
    # A latent that was not sent says so; the try box is disabled without a kernel.
    rows.nth(150).click()
    expect(card).to_contain_text("was not exported")
    expect(page.locator(".ilab-dash textarea.ilab-dash-text")).to_be_disabled()
    assert not offline.blocked and not offline.dialogs and not offline.errors, offline.problems()
    assert not offline.console_errors, offline.problems()


@pytest.mark.notebook
def test_dashboard_notebook_renders_offline(page: Page, offline: Offline, tmp_path: Path) -> None:  # noqa: F811
    ensure_web_assets()
    notebook = Path(__file__).resolve().parents[2] / "nbs" / "03_feature_dashboards.ipynb"
    with kernel_home(tmp_path / "home"):
        html = export_checked(notebook, tmp_path)  # the notebook's run: its cells and memory checked
    page.goto(html.as_uri())
    page.wait_for_selector(".ilab-dash .ilab-dash-card .ilab-dash-ex .ilab-tok", timeout=RENDER_TIMEOUT_MS)
    page.wait_for_timeout(500)
    page.screenshot(path=str(tmp_path / "03.png"), full_page=True)
    cards = page.locator(".ilab-dash .ilab-dash-card")
    assert cards.count() == 2  # the dashboard and the reloaded one
    for k in range(2):
        assert cards.nth(k).locator("svg.ilab-dash-hist rect").count() > 0
        assert cards.nth(k).locator(".ilab-dash-ex .ilab-tok").count() > 0
    # the first card is the weekday latent, labelled in the notebook; the heatmap rendered too
    expect(cards.first.locator(".ilab-dash-ex .ilab-dash-lead").first).to_contain_text("day")
    expect(cards.nth(1).locator(".ilab-dash-title")).to_contain_text("day of the week")
    assert page.locator(".ilab-heatmap .ilab-tok").count() > 0
    assert not offline.blocked and not offline.dialogs and not offline.errors, offline.problems()


HAND = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT)!r})
import interplab as ilab
from tests.widgets.test_dashboard import hand_feature_data
data = hand_feature_data()
first, second = data.logit_top_ids[0, :2].tolist()
data.token_strings[first], data.token_strings[second] = " evening", "evening"
data.labels_path = "labels.json"
hand = ilab.widgets.FeatureDashboard(data, n_cards=4)
hand
"""


def check_card_reads(page: Page, card) -> None:
    """Histogram bins have hover values; a promoted token's leading space is visible."""
    bins = card.locator(".ilab-dash-binhit")
    expect(bins).to_have_count(5, timeout=30_000)
    bins.nth(2).hover()
    tip = page.locator(".ilab-dash-tip:visible")
    expect(tip).to_contain_text("activation 0.4–0.6")
    expect(tip).to_contain_text(" tokens (")
    promoted = card.locator(".ilab-dash-logitcol").first.locator(".ilab-dash-logit .ilab-tok")
    spaced, bare = promoted.nth(0).text_content() or "", promoted.nth(1).text_content() or ""
    assert bare == "evening" and spaced.strip() != bare and spaced.endswith("evening"), (spaced, bare)


def test_card_hover_values_visible_spaces_and_label_box(
    page: Page, run_notebook: RunNotebook, lab_server: LabServer, scratch_dir: Path
):
    nb = scratch_dir / "hand.ipynb"
    nb.write_text(json.dumps(_notebook(HAND)))
    cells = run_notebook(page, nb.relative_to(lab_server.root).as_posix(), timeout_s=240)
    assert not any(c["has_error"] for c in cells), json.dumps(cells, indent=1)
    card = cell_output_locator(page, cells[0]["index"], cells[0]["panel_id"]).locator(".ilab-dash-card")
    check_card_reads(page, card)
    counts = json.loads(kernel_eval(page, "import json; print(json.dumps(data.hist_counts[0].tolist()))"))
    assert f"\n{counts[2]} tokens (" in (page.locator(".ilab-dash-tip:visible").text_content() or "")
    # with a kernel, the label box edits the label
    box = card.locator("input.ilab-dash-label")
    expect(box).to_be_editable()
    box.fill("evening words")
    box.press("Enter")
    wait_for_python(page, "data.labels.get(0)", "evening words")


def test_exported_card_hover_values_and_read_only_label(page: Page, offline: Offline, tmp_path: Path) -> None:  # noqa: F811
    html = export_code(tmp_path, "hand", HAND)
    page.goto(html.as_uri())
    card = page.locator(".ilab-dash .ilab-dash-card")
    page.wait_for_selector(".ilab-dash .ilab-dash-card .ilab-dash-ex .ilab-tok", timeout=RENDER_TIMEOUT_MS)
    check_card_reads(page, card)
    # no kernel: nothing would keep a label, so the box is read-only and says why
    box = card.locator("input.ilab-dash-label")
    expect(box).not_to_be_editable()
    assert "run the notebook" in (box.get_attribute("title") or "")
    assert not offline.blocked and not offline.dialogs and not offline.errors, offline.problems()
