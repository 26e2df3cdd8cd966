"""FeatureDashboard's search box in a real JupyterLab: it finds a latent by a token it only promotes, and says
what it searched when it finds nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Page, expect

from .conftest import REPO_ROOT, cell_output_locator
from .test_heatmap import kernel_eval
from .test_tour import _notebook

if TYPE_CHECKING:
    from .conftest import LabServer, RunNotebook

pytestmark = pytest.mark.browser

# Hand-made feature data (tests/widgets/test_dashboard.py): latent i fires on tokens ' tok0'..' tok49' and
# promotes tokens ' tok100'..' tok149'; ' tok120' is promoted by some latents and fired on by none.
BUILD = f"""
import json, sys
import numpy as np
sys.path.insert(0, {str(REPO_ROOT)!r})
import interplab as ilab
from tests.widgets.test_dashboard import hand_feature_data
data = hand_feature_data()
fired = set(np.where(data.top_max > 0, data.top_tokens[:, :, data.lead], -1).ravel().tolist())
assert 120 not in fired and not any("tok120" in label for label in data.labels.values())
PROMOTERS = sorted({{int(i) for i in np.flatnonzero((data.logit_top_ids == 120).any(1))}})
dash = ilab.widgets.FeatureDashboard(data, n_cards=2)
dash
"""


def test_search_finds_a_latent_by_a_token_it_only_promotes(
    page: Page, run_notebook: RunNotebook, lab_server: LabServer, scratch_dir: Path
) -> None:
    nb = scratch_dir / "dashboard_search.ipynb"
    nb.write_text(json.dumps(_notebook(BUILD)))
    cells = run_notebook(page, nb.relative_to(lab_server.root).as_posix(), timeout_s=180)
    assert not any(c["has_error"] for c in cells), json.dumps(cells, indent=1)
    promoters = json.loads(kernel_eval(page, "print(json.dumps(PROMOTERS))"))
    assert promoters == json.loads(
        kernel_eval(page, "print(json.dumps(ilab.features.search_latents(data, 'tok120').tolist()))")
    )

    root = cell_output_locator(page, cells[0]["index"], cells[0]["panel_id"]).locator(".ilab-dash")
    rows = root.locator(".ilab-dash-row")
    count = root.locator(".ilab-dash-count")
    expect(count).to_have_text("12 latents")
    search = root.locator("input.ilab-search")
    search.fill("TOK120")
    expect(rows).to_have_count(len(promoters))
    assert sorted(int(r) for r in rows.evaluate_all("els => els.map(e => e.dataset.latent)")) == promoters

    # nothing found: the list says what it searched
    search.fill("zanzibar")
    expect(rows).to_have_count(0)
    expect(count).to_have_text(
        'no latent matches "zanzibar" (searched: id, label, the tokens it fires on most, the 3 tokens it promotes most)'
    )
