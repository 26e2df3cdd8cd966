"""CircuitGraph: an attribution graph drawn inline on a canvas, with a pruning slider, hover paths,
labels, pinned and hidden nodes, feature cards, supernodes and a linked FeatureDashboard.

Columns are token positions, rows layers (token embeddings at the bottom, logits at the top, labelled
with their tokens, spaces shown as ``␣``); nodes are coloured by kind, edges drawn with width by weight
and colour by sign. The graph is pruned by the rule of :mod:`interplab.core.circuits.view` (shown above
the canvas): by default the nodes carrying 80% of the influence on the logits, the edges carrying 90% of
it, at most 100 edges. Hovering a node highlights its strongest upstream and downstream paths; clicking a
node selects it (``selected``, and ``latent`` for a linked dashboard) and opens its card: where it is, its
strongest inputs and outputs, Pin (always shown, labelled) and Hide buttons (``pinned``, ``hidden``), and
for a feature with ``cards`` (:func:`interplab.core.circuits.feature_cards`) its top activations and the
tokens it promotes and suppresses; for a node with ``qk`` (:func:`interplab.core.circuits.qk_cards`) the
heads that move the most into it and the query-side and key-side contributors of the strongest one's score.
Clicking an edge (on the canvas, or a row of a node's strongest inputs) selects it (``selected_edge``) and
opens its card; an attention edge with ``qk`` data shows the head moving the most from the source's position
into the target, and its query-side and key-side contributors (``qk_cards(..., w.attention_edges())``).
The slider hides nodes by cumulative influence in the browser (no round trip); shift-click nodes and name
them to group them into a supernode (``supernodes``). Given an edge-level circuit (``EdgeScores.circuit(n)``)
it draws heads, key-value groups and MLPs by layer with the circuit's edges by score
(:mod:`interplab.core.circuits.edge_view`).

Example
-------
>>> g = ilab.circuits.attribute(model, transcoders, prompt)
>>> w = ilab.widgets.CircuitGraph(g, cards=ilab.circuits.feature_cards(g, model, transcoders))
>>> w = ilab.widgets.CircuitGraph(g, qk=ilab.circuits.qk_cards(model, transcoders, g, [node]))
>>> w.pinned = [w.view_index(i) for i in path]   # keep a path shown and labelled
>>> w.selected_node            # the clicked node: kind, layer, pos, latent
>>> edges = ilab.widgets.CircuitGraph(g).attention_edges()          # (target, source) pairs, strongest first
>>> w = ilab.widgets.CircuitGraph(g, qk=ilab.circuits.qk_cards(model, transcoders, g, edges[:8]))
>>> w.selected_edge_nodes      # the clicked edge: (target, source) graph nodes
>>> ilab.widgets.CircuitGraph(edge_scores.circuit(100))   # the head-level circuit
>>> w.show_intervention(ilab.circuits.intervene(model, transcoders, prompt, {(6, 3, 120): 0.0}))
"""

from __future__ import annotations

from typing import Any

import traitlets
from interplab.core.circuits.edge_circuit import Circuit
from interplab.core.circuits.edge_view import circuit_view
from interplab.core.circuits.graph import Graph
from interplab.core.circuits.interventions import InterventionResult
from interplab.core.circuits.view import (
    EDGE_THRESHOLD,
    MAX_EDGES,
    NODE_THRESHOLD,
    attention_edges,
    graph_view,
    qk_view,
)

from ._kit import Widget, array_payload, css, esm

_ARRAYS = {"kind": "uint8", "layer": "int32", "pos": "int32", "latent": "int32", "activation": "float32",
           "rank": "float32", "influence": "float32", "order": "int32", "src": "int32", "dst": "int32",
           "weight": "float32"}  # fmt: skip


class CircuitGraph(Widget):
    """An attribution graph (see the module doc)."""

    _esm = esm("circuit")
    _css = css("circuit")

    graph = traitlets.Dict().tag(sync=True)
    threshold = traitlets.Float(0.8).tag(sync=True)  # the slider: nodes up to this cumulative influence show
    selected = traitlets.Int(-1).tag(sync=True)  # index into the view's nodes (-1: none)
    selected_edge = traitlets.Int(-1).tag(sync=True)  # index into the view's edges (-1: none)
    latent = traitlets.Int(-1).tag(sync=True)  # the clicked feature's latent (a linked dashboard opens it)
    supernodes = traitlets.List(traitlets.Dict()).tag(sync=True)  # [{"label": str, "nodes": [view indices]}]
    intervention = traitlets.Dict().tag(sync=True)  # what show_intervention gave: the answer before and after
    pinned = traitlets.List(traitlets.Int()).tag(sync=True)  # view indices always shown, with their labels
    hidden = traitlets.List(traitlets.Int()).tag(sync=True)  # view indices never shown

    def __init__(self, graph: Graph | Circuit, dashboard: Any = None, dashboard_layer: int | None = None,
                 node_threshold: float = NODE_THRESHOLD, edge_threshold: float = EDGE_THRESHOLD,
                 max_edges: int = MAX_EDGES, cards: dict[str, dict[str, Any]] | None = None,
                 qk: dict[str, dict[str, Any]] | None = None, **kwargs: Any) -> None:  # fmt: skip
        if not isinstance(graph, Graph | Circuit):
            raise TypeError(f"CircuitGraph shows an ilab.circuits.Graph or an edge-level Circuit, got "
                            f"{type(graph).__name__}.")  # fmt: skip
        if cards is not None and not (isinstance(cards, dict) and all(isinstance(c, dict) for c in cards.values())):
            raise TypeError(
                f"cards must be what ilab.circuits.feature_cards returns (a dict of dicts), got {cards!r:.80}."
            )
        if qk is not None and not (isinstance(qk, dict) and all(isinstance(c, dict) and "query" in c
                                                                 for c in qk.values())):  # fmt: skip
            raise TypeError(f"qk must be what ilab.circuits.qk_cards returns (a dict of dicts), got {qk!r:.80}.")
        if isinstance(graph, Circuit):
            view = circuit_view(graph)
        else:
            view = graph_view(graph, node_threshold, edge_threshold, max_edges)
        self._graph, self._view, self._dashboard_layer = graph, view, dashboard_layer
        data = {k: (array_payload(v, _ARRAYS[k]) if k in _ARRAYS else v) for k, v in view.items()
                if k != "node_index"}  # fmt: skip
        shown = {f"{layer}_{latent}" for layer, latent, kind in zip(view["layer"], view["latent"], view["kind"])
                 if kind == 0}  # fmt: skip
        data["cards"] = {k: v for k, v in (cards or {}).items() if k in shown}
        data["qk"] = qk_view(qk or {}, view["node_index"])
        data["linked"] = dashboard is not None
        super().__init__(graph=data, threshold=min(0.8, view["node_threshold"]), **kwargs)
        if dashboard is not None:
            dashboard.link(self)

    @traitlets.observe("selected")
    def _follow(self, change: dict[str, Any]) -> None:
        node = self.selected_node
        if node is not None and node["kind"] == "feature" and (
                self._dashboard_layer is None or node["layer"] == self._dashboard_layer):  # fmt: skip
            self.latent = node["latent"]

    @property
    def selected_node(self) -> dict[str, Any] | None:
        """The clicked node as :meth:`interplab.core.circuits.Graph.node` describes it (None: none)."""
        if not 0 <= self.selected < self._view["n_nodes"]:
            return None
        if isinstance(self._graph, Circuit):  # an edge-level circuit: a head, key-value group, MLP, input or logits
            i = self.selected
            return {"kind": self._view["kind_names"][self._view["kind"][i]], "name": self._view["names"][i],
                    "layer": int(self._view["layer"][i])}  # fmt: skip
        return self._graph.node(int(self._view["node_index"][self.selected]))

    @property
    def selected_edge_nodes(self) -> tuple[int, int] | None:
        """The clicked edge of an attribution graph as (target, source) graph node indices (None: none)."""
        e = self.selected_edge
        if isinstance(self._graph, Circuit) or not 0 <= e < self._view["n_edges"]:
            return None
        index = self._view["node_index"]
        return int(index[self._view["dst"][e]]), int(index[self._view["src"][e]])

    def attention_edges(self) -> list[tuple[int, int]]:
        """The drawn edges that go through attention as (target, source) graph node pairs, strongest first: what
        :func:`interplab.core.circuits.qk_cards` takes to show an edge's QK panel on a click."""
        if isinstance(self._graph, Circuit):
            raise TypeError("attention_edges belongs to an attribution graph's CircuitGraph, not a head-level circuit.")
        return attention_edges(self._graph, self._view)

    def view_index(self, node: int) -> int | None:
        """The widget's index of graph node ``node`` (what :meth:`group` takes); None when pruned away."""
        hit = (self._view["node_index"] == int(node)).nonzero()[0]
        return int(hit[0]) if len(hit) else None

    def set_row_text(self, labels: dict[int, str]) -> None:
        """Labels of latents (a linked FeatureDashboard sends its labels here); shown in hover boxes."""
        if not isinstance(labels, dict):
            raise TypeError(f"labels must map latent ids to label strings, got {type(labels).__name__}.")
        data = dict(self.graph)
        data["latent_labels"] = {str(int(k)): str(v) for k, v in labels.items()}
        self.graph = data

    def group(self, label: str, nodes: list[int]) -> None:
        """Group view nodes into a labelled supernode (what shift-click and the Group button do)."""
        if not isinstance(label, str) or not label.strip():
            raise ValueError("A supernode needs a non-empty label.")
        bad = [n for n in nodes if not isinstance(n, int) or not 0 <= n < self._view["n_nodes"]]
        if bad or not nodes:
            raise ValueError(f"nodes must be view node indices 0..{self._view['n_nodes'] - 1}, got {nodes!r:.80}.")
        self.supernodes = [*self.supernodes, {"label": label, "nodes": list(nodes)}]

    def show_intervention(self, result: InterventionResult) -> None:
        """Show an intervention's answer before and after next to the graph."""
        if not isinstance(result, InterventionResult):
            raise TypeError(f"show_intervention takes an ilab.circuits.intervene result, got {type(result).__name__}.")
        self.intervention = result.to_dict()

    def __repr__(self) -> str:
        return f"CircuitGraph({self._view['n_nodes']} nodes, {self._view['n_edges']} edges)"
