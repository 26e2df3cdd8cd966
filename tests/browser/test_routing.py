"""The Routing widget in exported HTML: one cell per expert and token, the chosen experts coloured, the hover box
naming the token, expert and weight, and token text that looks like markup kept as text."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.export.test_export import export_code

from .conftest import REPO_ROOT
from .test_export_html import Offline, offline  # noqa: F401  (the `offline` fixture)

pytestmark = pytest.mark.browser

SETUP = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT)!r})
import interplab as ilab
from tests.model.test_routing import tiny_moe
from tests.tiny import tiny_tokenizer
model = ilab.load_model(tiny_moe("mixtral"), tokenizer=tiny_tokenizer())
model.tokenizer.decode = lambda ids, **kw: "<b>x</b>"
ilab.widgets.Routing(model, "the cat sat on the mat", layer=1)
"""


def test_exported_routing_renders_offline(page: Page, offline: Offline, tmp_path: Path):  # noqa: F811
    html = export_code(tmp_path, "routing", SETUP)
    page.goto(html.as_uri())
    root = page.locator(".ilab-routing").first
    cells = root.locator(".ilab-routing-cell")
    tokens = root.locator(".ilab-routing-token")
    expect(tokens.first).to_be_visible(timeout=30_000)
    n_tokens = tokens.count()
    expect(cells).to_have_count(8 * n_tokens)
    expect(root.locator(".ilab-routing-chosen")).to_have_count(2 * n_tokens)
    assert root.locator("b").count() == 0
    expect(tokens.first).to_have_text("<b>x</b>")
    chosen = root.locator(".ilab-routing-chosen").first
    assert chosen.evaluate("e => getComputedStyle(e).backgroundColor") != "rgba(0, 0, 0, 0)"
    chosen.hover()
    tip = page.locator(".ilab-routing-tip:visible")
    expect(tip).to_contain_text("expert")
    expect(tip).to_contain_text("weight")
    assert not offline.blocked and not offline.dialogs and not offline.errors, offline.problems()
