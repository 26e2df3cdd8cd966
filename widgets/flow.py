"""FeatureFlow: a latent and its matches across layers, drawn as a flow (a column per layer).

Edges are drawn thicker and darker the better the match; hover a node for its label and top tokens;
click a node to select it (``selected``) and open its card in a linked :class:`FeatureDashboard` of
that layer.

Example
-------
>>> chain = ilab.matching.match_chain(saes)
>>> flow = ilab.widgets.FeatureFlow(chain, latents=[12, 40], labels=labels, dashboard=dash)
>>> flow.selected              # {"column": 2, "site": "blocks.7.hook_resid_post", "latent": 88} after a click
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import traitlets
from interplab.core.views.flow import flow_data

from ._kit import Widget, css, esm


class FeatureFlow(Widget):
    """Latents followed through chained SAE matches; ``dashboard`` (a FeatureDashboard, or one per column in a
    dict site -> dashboard) opens the clicked latent's card."""

    _esm = esm("flow")
    _css = css("flow")

    columns = traitlets.List(traitlets.Unicode()).tag(sync=True)
    nodes = traitlets.List(traitlets.Dict()).tag(sync=True)
    edges = traitlets.List(traitlets.Dict()).tag(sync=True)
    selected = traitlets.Dict().tag(sync=True)  # {"column", "site", "latent"} of the node last clicked

    def __init__(
        self, chain: Sequence[Any], latents: int | Sequence[int] = 0, *,
        labels: Sequence[Mapping[int, str]] | None = None,
        top_tokens: Sequence[Mapping[int, Sequence[str]]] | None = None, dashboard: Any = None, **kwargs: Any,
    ) -> None:  # fmt: skip
        data = flow_data(chain, latents, labels, top_tokens)
        boards = dashboard if isinstance(dashboard, Mapping) else (
            {dashboard.site: dashboard} if dashboard is not None else {})  # fmt: skip
        for site, board in boards.items():
            if not hasattr(board, "selected") or site not in data["columns"]:
                raise ValueError(f"dashboard for {site!r} does not fit: the flow's columns are "
                                 f"{data['columns']} and a dashboard needs a `selected` latent "
                                 "(ilab.widgets.FeatureDashboard).")  # fmt: skip
        self._boards = dict(boards)
        super().__init__(columns=data["columns"], nodes=data["nodes"], edges=data["edges"], **kwargs)
        self.observe(self._open_card, names="selected")

    def _open_card(self, change: dict[str, Any]) -> None:
        board = self._boards.get(change["new"].get("site", ""))
        if board is not None:
            board.selected = int(change["new"]["latent"])
