"""The shared widget helpers (widgets/js/shared.js) in a real Chromium page, without JupyterLab."""

from __future__ import annotations

import pytest
from interplab.widgets._kit import HERE
from playwright.sync_api import Page

pytestmark = pytest.mark.browser


@pytest.fixture
def shared(page: Page) -> Page:
    page.set_content("<html><body></body></html>")
    page.add_script_tag(content=(HERE / "shared.js").read_text())
    return page


def test_legend_runs_from_its_vmin(shared: Page):
    """ilabLegend used to label and colour from -vmax or 0 whatever vmin it was given."""
    labels, stops = shared.evaluate(
        """() => {
          const box = ilabLegend(-2, 5, true);
          const labels = [...box.querySelectorAll('.ilab-legend-label')].map(e => e.textContent);
          return [labels, box.querySelector('.ilab-legend-bar').style.background];
        }"""
    )
    assert labels == ["-2", "5"]
    # the bar starts at -2 on a scale of 5 (a light blue, alpha 0.34), not at -5 (alpha 0.85)
    assert stops.startswith("linear-gradient(to right, rgba(49, 130, 189, 0.34)"), stops
    sequential = shared.evaluate("() => [...ilabLegend(1, 4, false).querySelectorAll('span')].map(e => e.textContent)")
    assert sequential[0] == "1"
