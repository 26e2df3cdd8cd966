"""The data a CircuitGraph widget draws: nodes placed by position and layer, edges, labels, influence.

The default pruning leaves a graph a person can read. **The rule:** keep the nodes that carry 80% of the
influence on the logits (``node_threshold``), then the edges that carry 90% of the influence among them
(``edge_threshold``), at most ``max_edges`` = 100 of them (those with the largest share of the influence),
and drop features and errors left without an edge on to the output (:func:`interplab.core.circuits.prune`).
Token and logit nodes always stay. Each node is sent with its cumulative influence rank, so a pruning
slider can hide nodes in the browser without asking Python: a node shows when its rank is at most the
slider's value (tokens, logits and pinned nodes always show), an edge when both its ends show.

Example
-------
>>> view = graph_view(graph)                       # the readable default
>>> view["n_nodes"], view["n_edges"], view["rule"]
>>> graph_view(graph, 0.9, 0.99, max_edges=1000)   # more of the graph
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..checks import check_positive_int
from .graph import Graph
from .prune import node_shares

KINDS = ("feature", "error", "token", "logit")
#: The default pruning (see the module doc).
NODE_THRESHOLD, EDGE_THRESHOLD, MAX_EDGES = 0.8, 0.9, 100


def visible_token(token: str) -> str:
    """A token with its leading and trailing whitespace made visible (``␣`` a space, ``↵`` a newline, ``⇥`` a tab).

    >>> visible_token(" Mary"), visible_token("\\n")
    ('␣Mary', '↵')
    """
    shown = token.replace("\n", "↵").replace("\t", "⇥")
    core = shown.strip(" ")
    if not core:
        return "␣" * len(shown) or "∅"
    start = len(shown) - len(shown.lstrip(" "))
    end = len(shown) - len(shown.rstrip(" "))
    return "␣" * start + core + "␣" * end


def pruning_rule(node_threshold: float, edge_threshold: float, max_edges: int) -> str:
    """The pruning rule in words, as the widget shows it."""
    return (f"nodes carrying {node_threshold:.0%} of the influence on the logits; edges carrying {edge_threshold:.0%} "
            f"of it, at most {max_edges}")  # fmt: skip


def node_names(info: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(short names drawn on the canvas, longer labels for hover boxes) of the nodes ``info`` describes."""
    names, labels = [], []
    for n in info:
        if n["kind"] == "feature":
            name = f"L{n['layer']} #{n['latent']}"
            label = name
        elif n["kind"] == "error":
            name = label = f"error L{n['layer']}"
        elif n["kind"] == "token":
            name = label = visible_token(n["token"])
        else:
            name = visible_token(n["token"])
            label = f"{name} (p={n['prob']:.2f})"
        names.append(name)
        labels.append(label)
    return names, labels


def graph_view(
    graph: Graph, node_threshold: float = NODE_THRESHOLD, edge_threshold: float = EDGE_THRESHOLD,
    max_edges: int = MAX_EDGES,
) -> dict[str, Any]:  # fmt: skip
    """Plain arrays for the widget (see the module doc): ``kind``, ``layer``, ``pos``, ``latent``, ``activation``,
    ``rank`` (cumulative influence), ``influence`` (the node's share), ``order`` (1 = most influential) per node;
    ``src``, ``dst``, ``weight`` per edge; ``names`` (canvas), ``labels`` (hover boxes), tokens and ``rule``."""
    check_positive_int("max_edges", max_edges)
    kept = graph.prune(node_threshold, edge_threshold, max_edges)
    idx = kept.nodes.nonzero().flatten()
    where = {int(i): j for j, i in enumerate(idx.tolist())}
    info = [graph.node(int(i)) for i in idx]
    kinds = np.array([KINDS.index(n["kind"]) for n in info], dtype=np.uint8)
    dst, src = kept.edges.nonzero(as_tuple=True)
    weights = graph.adjacency[dst, src]
    shares = node_shares(graph.adjacency, graph.logit_probs)
    order = torch.empty(len(shares), dtype=torch.int64)
    order[torch.argsort(shares, descending=True)] = torch.arange(1, len(shares) + 1)
    names, labels = node_names(info)
    return {
        "prompt_tokens": list(graph.tokens),
        "prompt_names": [visible_token(t) for t in graph.tokens],
        "n_layers": graph.n_layers,
        "n_pos": graph.n_pos,
        "n_nodes": len(info),
        "n_edges": len(weights),
        "n_graph_nodes": graph.n_nodes,
        "kind": kinds,
        "layer": np.array([n["layer"] for n in info], dtype=np.int32),
        "pos": np.array([n["pos"] for n in info], dtype=np.int32),
        "latent": np.array([n.get("latent", -1) for n in info], dtype=np.int32),
        "activation": np.array([n.get("activation", 0.0) for n in info], dtype=np.float32),
        "rank": kept.cumulative[idx].numpy().astype(np.float32),
        "influence": shares[idx].numpy().astype(np.float32),
        "order": order[idx].numpy().astype(np.int32),
        "node_index": idx.numpy().astype(np.int32),
        "names": names,
        "labels": labels,
        "src": np.array([where[int(s)] for s in src], dtype=np.int32),
        "dst": np.array([where[int(d)] for d in dst], dtype=np.int32),
        "weight": weights.numpy().astype(np.float32),
        "node_threshold": float(node_threshold),
        "rule": pruning_rule(node_threshold, edge_threshold, max_edges),
    }


def qk_view(qk: dict[str, dict[str, Any]], node_index: np.ndarray) -> dict[str, dict[str, Any]]:
    """QK data (:func:`interplab.core.circuits.qk_cards`, keyed by graph node or ``"target,source"`` edge) keyed by
    view index instead (an edge ``"target view,source view"``), each source with its view index (``view``, -1
    when it is not drawn); nodes and edges the view does not draw are left out.

    >>> qk_view(ilab.circuits.qk_cards(model, tcs, g, [node, (target, source)]), view["node_index"])
    """
    where = {int(n): j for j, n in enumerate(node_index.tolist())}
    shown = {}
    for key, entry in qk.items():
        ends = [int(n) for n in key.split(",")]
        if any(n not in where for n in ends):
            continue
        sides = {side: [{**row, "view": where.get(int(row["node"]), -1)} for row in entry[side]]
                 for side in ("query", "key")}  # fmt: skip
        shown[",".join(str(where[n]) for n in ends)] = {**entry, **sides}
    return shown


def attention_edges(graph: Graph, view: dict[str, Any]) -> list[tuple[int, int]]:
    """The drawn edges of ``view`` (:func:`graph_view` of ``graph``) that go through attention, as ``(target,
    source)`` graph node pairs, strongest first: from a feature, error or token at an earlier position into a
    feature or logit that a head above the source's layer writes to (what :func:`~interplab.core.circuits.qk_cards`
    takes).

    >>> ilab.circuits.qk_cards(model, tcs, g, attention_edges(g, graph_view(g))[:5])
    """
    index = view["node_index"]
    found = []
    for d, s, w in zip(view["dst"].tolist(), view["src"].tolist(), view["weight"].tolist(), strict=True):
        target, source = graph.node(int(index[d])), graph.node(int(index[s]))
        top = target["layer"] if target["kind"] == "feature" else graph.n_layers - 1
        if target["kind"] in ("feature", "logit") and source["kind"] != "logit" and source["pos"] < target["pos"] \
                and source["layer"] < top:  # fmt: skip
            found.append((abs(w), int(index[d]), int(index[s])))
    return [(t, s) for _, t, s in sorted(found, key=lambda x: -x[0])]
