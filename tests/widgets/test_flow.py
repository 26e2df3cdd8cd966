"""FeatureFlow (Python side): the flow data follows chained matches; a click opens the card in a linked dashboard."""

from __future__ import annotations

import numpy as np
import pytest
from interplab.core.matching import Match
from interplab.core.views.flow import flow_data

import interplab as ilab

SITES = [f"blocks.{i}.hook_resid_post" for i in range(3)]


def chain() -> list[Match]:
    p1, p2 = np.array([2, 0, 1, 3]), np.array([3, 2, 1, 0])
    return [Match(p1, np.array([0.0, 0.1, 0.2, 0.3], np.float32), SITES[0], SITES[1]),
            Match(p2, np.array([0.1, 0.1, 0.4, 0.0], np.float32), SITES[1], SITES[2])]  # fmt: skip


def test_flow_data_follows_the_chain():
    data = flow_data(chain(), latents=[0, 1], labels=[{0: "zero"}, {}, {}], top_tokens=[{}, {2: [" the"]}, {}])
    assert data["columns"] == SITES
    ids = [n["id"] for n in data["nodes"]]
    assert ids == ["0:0", "1:2", "2:1", "0:1", "1:0", "2:3"]
    assert data["nodes"][0]["label"] == "zero" and data["nodes"][1]["tops"] == [" the"]
    first = data["edges"][0]
    assert (first["source"], first["target"], first["error"]) == ("0:0", "1:2", 0.0)
    assert first["quality"] == 1.0
    assert data["edges"][1]["error"] == pytest.approx(0.4) and 0 < data["edges"][1]["quality"] < 0.5
    with pytest.raises(ValueError, match=r"labels must be a list of 3 dicts"):
        flow_data(chain(), 0, labels=[{}])
    with pytest.raises(ValueError, match=r"Latent 9 is out of range"):
        flow_data(chain(), 9)


def test_a_click_opens_the_card_in_the_linked_dashboard():
    class Board:
        site, selected = SITES[1], 0

    board = Board()
    flow = ilab.widgets.FeatureFlow(chain(), latents=[0], dashboard=board)
    assert len(flow.nodes) == 3 and len(flow.edges) == 2
    flow.selected = {"column": 1, "site": SITES[1], "latent": 2}
    assert board.selected == 2
    flow.selected = {"column": 2, "site": SITES[2], "latent": 1}  # no dashboard for that layer: nothing to open
    assert board.selected == 2
    with pytest.raises(ValueError, match=r"dashboard for 'blocks\.9\.hook_resid_post' does not fit"):
        Board.site = "blocks.9.hook_resid_post"
        ilab.widgets.FeatureFlow(chain(), dashboard=Board())
