"""QK attributions of an attention edge: which heads move information into a node, and why they attend there.

For a feature (or logit) node at query position ``q`` the heads of the layers up to its own write to it
through their value path: head ``h`` of layer ``l`` moves ``moved[l, h, k] = A[q, k] * (v_k . g_q)`` from key
position ``k``, with ``A`` the head's (frozen) attention pattern, ``v_k`` its value at ``k`` and ``g_q`` the
node's gradient at the head's output at ``q`` in the replacement model; summed over ``k`` it is the head's
whole direct share. For the chosen head and key position the pre-softmax score is split into its
query-side and key-side contributors: source ``i``'s query-side share is ``scaling * q_i . k`` (its
query vector against the whole key vector) and its key-side share ``scaling * q . k_i``; each side adds up
to the score (the rows and columns of :func:`interplab.core.circuits.qk.qk`'s table, without its
``d_head`` backward passes per head: two targets per head, batched).

Example
-------
>>> result = ilab.circuits.qk_edge(model, tcs, g, g.feature_index(6, 9, 120))   # its strongest head
>>> result.heads.head()                # layer, head, key_pos, moved, pattern; largest |moved| first
>>> result.query.head(), result.key.head()
>>> ilab.circuits.qk_edge(model, tcs, g, (target, source))   # an attention edge: key_pos = source's position
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from ..checks import check_positive_int
from ..model.model import Model
from ..model.sites import resolve
from .attribute import Sources, final_logits, find_sources
from .graph import Graph
from .qk import check_node_or_edge, check_target, graph_inputs, head_maps, source_labels, source_rows
from .replacement import ReplacementPass, check_family, replacement_pass


@dataclass
class QKResult:
    """One node's incoming attention (``heads``) and, for ``head`` at ``key_pos``, the score's contributors."""

    node: int
    head: tuple[int, int]
    key_pos: int
    score: float  # the head's pre-softmax score from ``node``'s position to ``key_pos``
    heads: pd.DataFrame  # layer, head, key_pos, moved, pattern; largest |moved| first
    query: pd.DataFrame  # source, node, contribution: each source's query-side share; largest first
    key: pd.DataFrame  # source, node, contribution: each source's key-side share

    def to_dict(self, top: int = 8) -> dict[str, Any]:
        """Plain data for a widget: the head, score, the ``top`` heads and contributors on each side.

        >>> result.to_dict(top=5)["query"][0]   # {"source": ..., "node": ..., "contribution": ...}
        """
        check_positive_int("top", top)

        def rows(table: pd.DataFrame, cols: list[str]) -> list[dict[str, Any]]:
            return json.loads(table.head(top)[cols].to_json(orient="records"))

        return {"node": self.node, "head": list(self.head), "key_pos": self.key_pos, "score": self.score,
                "heads": rows(self.heads, ["layer", "head", "key_pos", "moved", "pattern"]),
                "query": rows(self.query, ["source", "node", "contribution"]),
                "key": rows(self.key, ["source", "node", "contribution"])}  # fmt: skip

    def __repr__(self) -> str:
        layer, head = self.head
        return f"QKResult(node {self.node}: head L{layer}.H{head} from position {self.key_pos}, score {self.score:.3g})"


@contextlib.contextmanager
def head_io(model: Model, top_layer: int) -> Iterator[dict[int, dict[str, torch.Tensor]]]:
    """While open, each layer's (up to ``top_layer``) value projection output and head outputs (the output
    projection's input) of the next forward pass land in the yielded dict, attached to its autograd graph."""
    family = model.check_mapped()
    attn_path = check_family(model).qk[0].rsplit(".", 1)[0]
    seen: dict[int, dict[str, torch.Tensor]] = {}
    handles = []
    for layer in range(top_layer + 1):
        attn = resolve(model.module, f"{family.layers}.{layer}.{attn_path}")
        seen[layer] = {}
        handles.append(attn.v_proj.register_forward_hook(lambda m, a, out, s=seen[layer]: s.__setitem__("v", out)))
        handles.append(attn.o_proj.register_forward_pre_hook(lambda m, a, s=seen[layer]: s.__setitem__("z", a[0])))
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


def attention_pattern(maps: Any, attn_in_PD: torch.Tensor, query_pos: int, cfg: Any) -> torch.Tensor:
    """The head's attention [query_pos + 1] from ``query_pos`` over the key positions (causal, sliding window
    and score softcap as the model applies them), from its frozen query and key maps."""
    with torch.no_grad():
        q_H = maps.query(attn_in_PD[query_pos], query_pos)
        keys = maps.key(attn_in_PD[: query_pos + 1], slice(0, query_pos + 1))
        scores_K = keys @ q_H * maps.scaling
        cap = getattr(cfg, "attn_logit_softcapping", None)
        if cap:
            scores_K = torch.tanh(scores_K / cap) * cap
        window = getattr(maps.attn, "sliding_window", None)
        if window:
            scores_K[: max(0, query_pos - int(window) + 1)] = float("-inf")
        return torch.softmax(scores_K.float(), -1).to(scores_K.dtype)


class QKSession:
    """One replacement pass of a graph's prompt, with the head inputs and outputs it needs, for ``n_nodes`` nodes
    (its batch: two rows a node, at most ``batch_size``)."""

    def __init__(self, model: Model, transcoders: Any, graph: Graph, batch_size: int = 32, n_nodes: int = 16):
        if not isinstance(graph, Graph):
            raise TypeError(f"graph must be an attribution graph (ilab.circuits.attribute), got "
                            f"{type(graph).__name__}.")  # fmt: skip
        check_family(model)
        check_positive_int("batch_size", batch_size)
        rep, ids_1P, skips = graph_inputs(model, transcoders, graph)
        with model.lock, head_io(model, model.n_layers - 1) as seen:
            self.run: ReplacementPass = replacement_pass(model, ids_1P, skips, min(batch_size, 2 * n_nodes))
        if any(set(io) != {"v", "z"} for io in seen.values()):
            raise RuntimeError(
                "QK attributions read each head's values and outputs through hooks on the local module, and the "
                "pass ran elsewhere (a remote model?): load the model locally."
            )
        self.io = seen
        self.model, self.graph, self.rep = model, graph, rep
        self.src: Sources = find_sources(self.run, rep, True, True)
        self.names, self.nodes = source_labels(self.src, graph, model.n_layers, graph.n_pos)
        self._maps: dict[tuple[int, int], Any] = {}
        self._patterns: dict[tuple[int, int, int], torch.Tensor] = {}
        self._mean_D: torch.Tensor | None = None

    def maps(self, layer: int, head: int) -> Any:
        """The head's frozen query and key maps (cached)."""
        if (layer, head) not in self._maps:
            self._maps[layer, head] = head_maps(self.model, layer, head, self.run.attn_in[layer][0])
        return self._maps[layer, head]

    def target_value(self, node: int, row: int) -> torch.Tensor:
        """The node's value in batch row ``row`` of the linear pass: a feature's pre-activation or a logit's
        difference from the mean logit."""
        info = self.graph.node(node)
        if info["kind"] == "feature":
            enc = self.rep.reader(info["layer"])[:, info["latent"]]
            return self.run.mlp_in[info["layer"]][row, info["pos"]].float() @ enc
        W_U = self.model.readout_modules()[1].weight
        if not isinstance(W_U, torch.Tensor):
            raise TypeError(f"The unembedding's weight is a {type(W_U).__name__}, not a tensor.")
        if self._mean_D is None:
            self._mean_D = final_logits(self.model, W_U.detach(), self.run.final[0, -1])[1]
        direction = W_U.detach()[info["token_id"]].float() - self._mean_D
        return self.run.final[row, -1].float() @ direction

    def top_layer(self, node: int) -> int:
        """The highest layer whose heads write to ``node`` (a layer's attention runs before its MLP)."""
        info = self.graph.node(node)
        return info["layer"] if info["kind"] == "feature" else self.graph.n_layers - 1

    def incoming(self, nodes: list[int]) -> list[pd.DataFrame]:
        """Each node's incoming attention: what every head up to its layer moves from each key position
        (``moved``) and its attention weight (``pattern``); largest ``|moved|`` first. One backward pass a batch."""
        batch, n_heads, d_head = self.run.embed_leaf.shape[0], self.model.n_heads, self.model.d_head
        tables = []
        for start in range(0, len(nodes), batch):
            chunk = nodes[start : start + batch]
            value = torch.stack([self.target_value(node, row) for row, node in enumerate(chunk)]).sum()
            top = max(self.top_layer(node) for node in chunk)
            zs = [self.io[layer]["z"] for layer in range(top + 1)]
            grads = torch.autograd.grad(value, zs, retain_graph=True, allow_unused=True)
            for row, node in enumerate(chunk):
                rows = []
                query_pos = self.graph.node(node)["pos"]
                for layer in range(self.top_layer(node) + 1):
                    if grads[layer] is not None:
                        rows += self._moved(
                            layer, query_pos, grads[layer][row, query_pos].float().view(n_heads, d_head)
                        )
                table = pd.DataFrame(rows, columns=["layer", "head", "key_pos", "moved", "pattern"])
                tables.append(table.iloc[table.moved.abs().argsort()[::-1]].reset_index(drop=True))
        return tables

    def pattern(self, layer: int, head: int, query_pos: int) -> torch.Tensor:
        """The head's attention [query_pos + 1] from ``query_pos`` (cached)."""
        if (layer, head, query_pos) not in self._patterns:
            maps = self.maps(layer, head)
            self._patterns[layer, head, query_pos] = attention_pattern(maps, self.run.attn_in[layer][0], query_pos,
                                                                       self.model.config)  # fmt: skip
        return self._patterns[layer, head, query_pos]

    def _moved(self, layer: int, query_pos: int, g_HD: torch.Tensor) -> list[tuple[int, int, int, float, float]]:
        """(layer, head, key position, moved, pattern) rows of every head of ``layer`` whose output at
        ``query_pos`` has the gradient ``g_HD`` [heads, d_head]."""
        v_PKD = self.io[layer]["v"][0].detach().float().view(self.graph.n_pos, -1, g_HD.shape[-1])
        rows = []
        for head in range(g_HD.shape[0]):
            pattern_K = self.pattern(layer, head, query_pos)
            moved_K = pattern_K * (v_PKD[: query_pos + 1, self.maps(layer, head).kv_head] @ g_HD[head])
            rows += [(layer, head, k, m, p) for k, (m, p) in enumerate(zip(moved_K.tolist(), pattern_K.tolist()))]
        return rows

    def contributors(self, requests: list[tuple[int, int, int, int]]) -> list[tuple[float, torch.Tensor, torch.Tensor]]:
        """For each (layer, head, query_pos, key_pos): the score and each source's query-side and key-side
        shares ([sources + 1] each, the last the bias), two targets per request, a batch per backward pass."""
        targets = [(i, side) for i in range(len(requests)) for side in ("q", "k")]
        totals = []
        with torch.no_grad():
            for layer, head, query_pos, key_pos in requests:
                maps, x_PD = self.maps(layer, head), self.run.attn_in[layer][0]
                totals.append((maps.query(x_PD[query_pos], query_pos), maps.key(x_PD[key_pos], key_pos)))
        shares = []
        batch = self.run.embed_leaf.shape[0]
        for start in range(0, len(targets), batch):
            chunk = targets[start : start + batch]
            value = torch.zeros((), device=self.run.embed_leaf.device)
            for row, (i, side) in enumerate(chunk):
                layer, head, query_pos, key_pos = requests[i]
                maps, x_BPD = self.maps(layer, head), self.run.attn_in[layer]
                q_H, k_H = totals[i]
                vec = (maps.query(x_BPD[row, query_pos], query_pos) @ k_H if side == "q"
                       else q_H @ maps.key(x_BPD[row, key_pos], key_pos))  # fmt: skip
                value = value + vec * maps.scaling
            grads = torch.autograd.grad(value, self.run.leaves, retain_graph=True, allow_unused=True)
            g = [torch.zeros_like(leaf[: len(chunk)], dtype=torch.float32) if gr is None else gr[: len(chunk)].float()
                 for leaf, gr in zip(self.run.leaves, grads, strict=True)]  # fmt: skip
            shares.append(source_rows(g, self.src, self.model.n_layers).cpu())
        rows = torch.cat(shares)
        out = []
        for i, (layer, head, _, _) in enumerate(requests):
            score = float(totals[i][0] @ totals[i][1]) * self.maps(layer, head).scaling
            q_S, k_S = rows[2 * i], rows[2 * i + 1]
            bias = torch.tensor([score - q_S.sum(), score - k_S.sum()])
            out.append((score, torch.cat([q_S, bias[:1]]), torch.cat([k_S, bias[1:]])))
        return out

    def side_table(self, share_S: torch.Tensor) -> pd.DataFrame:
        """The non-zero shares as a table (source, node, contribution), largest magnitude first."""
        nonzero = share_S.nonzero().flatten()
        keep = nonzero[share_S[nonzero].abs().argsort(descending=True)].tolist()
        return pd.DataFrame({"source": [self.names[i] for i in keep], "node": [self.nodes[i] for i in keep],
                             "contribution": share_S[keep].double().numpy()})  # fmt: skip


def _choose(table: pd.DataFrame, query_pos: int, key_pos: int | None, min_layer: int,
            head: tuple[int, int] | None) -> tuple[int, int, int]:  # fmt: skip
    """The strongest (layer, head, key position), of ``head`` when given: at ``key_pos`` when given (heads above
    ``min_layer``), else over the earlier positions (the first, the attention sink, only when it is the only one)."""
    if head is not None:
        table = table[(table.layer == head[0]) & (table["head"] == head[1])]
    if key_pos is not None:
        rows = table[(table.key_pos == key_pos) & (table.layer > min_layer)]
    else:
        rows = table[(table.key_pos < query_pos) & ((table.key_pos > 0) | (query_pos == 1))]
        rows = rows if len(rows) else table
    best = rows.iloc[0]
    return int(best.layer), int(best["head"]), int(best.key_pos)


def _results(session: QKSession, targets: list[tuple[int, int | None, int]], head: tuple[int, int] | None,
             ) -> list[QKResult]:  # fmt: skip
    """The QK results of (node, key position or None, lowest source layer) targets, all in one session."""
    tables = session.incoming([node for node, _, _ in targets])
    requests = []
    for (node, key_pos, min_layer), table in zip(targets, tables, strict=True):
        query_pos = session.graph.node(node)["pos"]
        layer, index, k = _choose(table, query_pos, key_pos, min_layer, head)
        requests.append((layer, index, query_pos, k))
    out = []
    for (node, _, _), table, request, (score, q_S, k_S) in zip(
        targets, tables, requests, session.contributors(requests), strict=True
    ):
        out.append(QKResult(node, (request[0], request[1]), request[3], score, table, session.side_table(q_S),
                            session.side_table(k_S)))  # fmt: skip
    return out


def qk_edge(model: Model, transcoders: Any, graph: Graph, node_or_edge: int | tuple[int, int], *,
            head: tuple[int, int] | None = None, batch_size: int = 32) -> QKResult:  # fmt: skip
    """The incoming attention of a feature or logit node, or of an attention edge ``(target, source)``, and the
    query-side and key-side contributors of its strongest head's score (see the module doc).

    The head is the one that moves the most into the node from the source's position (an edge) or from any
    earlier position but the first (a node), unless ``head`` = (layer, index) names one.

    >>> r = ilab.circuits.qk_edge(model, tcs, g, g.feature_index(6, 9, 120))
    >>> r.head, r.key_pos, r.query.head(), r.key.head()
    """
    target, key_pos = check_node_or_edge(graph, node_or_edge)
    min_layer = graph.node(node_or_edge[1])["layer"] if isinstance(node_or_edge, tuple) else -1
    if head is not None:
        check_target(graph, node_or_edge, head, None if key_pos is not None else 0, model.n_heads)
    session = QKSession(model, transcoders, graph, batch_size, n_nodes=1)
    return _results(session, [(target, key_pos, min_layer)], head)[0]


def qk_cards(model: Model, transcoders: Any, graph: Graph, nodes: list[Any], *, top: int = 8,
             batch_size: int = 32) -> dict[str, dict[str, Any]]:  # fmt: skip
    """QK data for a :class:`interplab.widgets.CircuitGraph`: of each feature or logit node in ``nodes`` (past the
    first position) its strongest heads and the ``top`` query-side and key-side contributors of the strongest
    one's score, keyed by the node's index as a string; of each attention edge ``(target, source)`` in
    ``nodes`` the same for the head moving the most from the source's position into the target, keyed
    ``"target,source"`` (with ``edge`` = [target, source]); one replacement pass for all.

    >>> ilab.widgets.CircuitGraph(g, qk=ilab.circuits.qk_cards(model, tcs, g, [node, (target, source)]))
    """
    if not isinstance(nodes, list | tuple) or not nodes:
        raise ValueError(f"nodes must be a non-empty list of node indices of the graph or (target, source) "
                         f"attention edges, got {nodes!r:.80}.")  # fmt: skip
    targets = []
    for item in nodes:
        node, key_pos = check_node_or_edge(graph, item)
        if graph.node(node)["pos"] == 0:
            raise ValueError(f"node {node} is at position 0, where a head can attend only to itself: give nodes at "
                             f"later positions.")  # fmt: skip
        targets.append((node, key_pos, graph.node(item[1])["layer"] if key_pos is not None else -1))
    check_positive_int("top", top)
    session = QKSession(model, transcoders, graph, batch_size, n_nodes=len(nodes))
    cards = {}
    for item, result in zip(nodes, _results(session, targets, None), strict=True):
        if isinstance(item, tuple):
            cards[f"{item[0]},{item[1]}"] = {**result.to_dict(top), "edge": [int(item[0]), int(item[1])]}
        else:
            cards[str(item)] = result.to_dict(top)
    return cards
