"""FeatureDashboard's search box in a real JupyterLab: it finds a latent by a token it only promotes, and says
what it searched when it finds nothing. The heatmap's hover lists the top latents without the dense ones."""

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
# An SAE whose stored firing rates call the strongest latent at the second token dense (on 60% of tokens).
HEAT = """
import torch
from tests.widgets.test_heatmap import hand_activations
acts = hand_activations(d=6)
sae = ilab.SAE.create("standard", d_in=6, d_sae=16, site=acts.sites[0])
sae.init_weights(seed=1)
with torch.no_grad():
    z = sae.encode(acts.flat(acts.sites[0]))
DENSE = int(z[1].argmax())
sae.firing_rates = torch.full((16,), 0.01)
sae.firing_rates[DENSE] = 0.6
heat = ilab.widgets.FeatureHeatmap(acts, sae, features=[DENSE])
heat
"""


def test_search_finds_a_latent_by_a_token_it_only_promotes(
    page: Page, run_notebook: RunNotebook, lab_server: LabServer, scratch_dir: Path
) -> None:
    nb = scratch_dir / "dashboard_search.ipynb"
    nb.write_text(json.dumps(_notebook(BUILD, HEAT)))
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

    # the heatmap's hover: the top latents at a token leave out the dense one, and say so
    heat = cell_output_locator(page, cells[1]["index"], cells[1]["panel_id"])
    dense = int(kernel_eval(page, "print(DENSE)"))
    want = json.loads(kernel_eval(page, "print(json.dumps(heat.data.top_features[1].tolist()))"))
    assert dense not in want
    heat.locator(".ilab-tok").nth(1).hover()
    tip = page.locator(".ilab-heat-tip:visible")
    expect(tip).to_contain_text("top features here (latents on > 10% of tokens left out):")
    listed = (tip.text_content() or "").split("left out):")[1]
    assert f"  {dense}:" not in listed and f"  {want[0]}:" in listed, listed
