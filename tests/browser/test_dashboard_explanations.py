"""Automatic explanations in exported HTML, offline: on the card with their score beside the baselines, in the
list marked as automatic, searchable; a hand label wins and is marked as set by hand; explanation text stays
text."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.export.test_export import export_code

from .conftest import REPO_ROOT
from .test_export_html import RENDER_TIMEOUT_MS, Offline, offline  # noqa: F401  (fixture)

pytestmark = pytest.mark.browser

BUILD = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT)!r})
import interplab as ilab
from tests.features.test_explanations import explained_and_scored
from tests.widgets.test_dashboard import hand_feature_data
data = hand_feature_data()
explained, scores = explained_and_scored()
explained.texts[2] = "<img src=x onerror=alert(1)> digits"
dash = ilab.widgets.FeatureDashboard(data, n_cards=4, sort="id")
dash.set_explanations(explained, scores)
dash.set_label(1, "my own name")
dash
"""


def test_exported_explanations_show_search_and_yield_to_hand_labels(page: Page, offline: Offline,  # noqa: F811
                                                                    tmp_path: Path) -> None:  # fmt: skip
    html = export_code(tmp_path, "explained", BUILD)
    page.goto(html.as_uri())
    page.wait_for_selector(".ilab-dash .ilab-dash-card .ilab-dash-ex .ilab-tok", timeout=RENDER_TIMEOUT_MS)
    root = page.locator(".ilab-dash")
    names = root.locator(".ilab-dash-row .ilab-dash-name")
    expect(names.nth(0)).to_have_text("0 · zebra crossings")
    expect(names.nth(0)).to_have_class("ilab-dash-name ilab-dash-auto")
    expect(names.nth(1)).to_have_text("1 · my own name")
    expect(names.nth(1)).to_have_class("ilab-dash-name ilab-dash-hand")
    expect(names.nth(3)).to_have_text("3")  # control: no explanation, no label
    assert "detection auroc 0.90 (shuffled 0.50, constant 0.50)" in (names.nth(0).get_attribute("title") or "")

    card = root.locator(".ilab-dash-card")
    root.locator('.ilab-dash-row[data-latent="0"]').click()
    expect(card.locator(".ilab-dash-explanation")).to_contain_text(
        "automatic explanation: zebra crossings · automatic explanation by tiny explainer; detection auroc 0.90 "
        "(shuffled 0.50, constant 0.50)"
    )
    root.locator('.ilab-dash-row[data-latent="1"]').click()
    expect(card.locator(".ilab-dash-source")).to_have_text("set by hand")
    explanation = card.locator(".ilab-dash-explanation")
    expect(explanation).to_contain_text("automatic explanation (the hand label wins): the word tok1")
    root.locator('.ilab-dash-row[data-latent="2"]').click()
    expect(card.locator(".ilab-dash-explanation")).to_contain_text("<img src=x onerror=alert(1)> digits")
    expect(card.locator(".ilab-dash-explanation")).to_contain_text("detection auroc n/a")
    assert root.locator("img").count() == 0

    search = root.locator("input.ilab-search")
    search.fill("ZEBRA")
    expect(root.locator(".ilab-dash-row")).to_have_count(1)
    expect(names.nth(0)).to_have_text("0 · zebra crossings")
    assert not offline.blocked and not offline.dialogs and not offline.errors, offline.problems()
