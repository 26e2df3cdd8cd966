"""QK attributions: why a head attended where it did, as bilinear contributions of the graph's sources.

An attribution graph freezes attention patterns. For a head at layer ``l`` and a query position ``q``
(where a feature or logit node downstream of the head sits) and a key position ``k``, the head's
pre-softmax score is bilinear in the residual streams entering layer ``l`` at ``q`` and ``k``::

    score = scaling * rope_q(n_q * W_Q norm(x_q)) . rope_k(n_k * W_K norm(x_k))

with every norm's scale frozen at its value in the real run (the block's input norm, and Gemma's per-head
``q_norm``/``k_norm``). In the replacement model each residual stream is a sum of the graph's sources
(active features, error nodes, token embeddings) carried through frozen attention and norms, plus a
constant (the transcoders' decoder biases): ``bias``. A cross-layer transcoder's feature is one source
whose vector carries what it writes to its own and every later layer's MLP output below the head's layer,
as the replacement pass adds those writes up. So the query vector is a sum of one vector per source
(and the key vector likewise), found by backward passes through the replacement model, one per
query/key component, and the score splits exactly into ``contribution[i, j] = scaling * q_i . k_j``:
the table's contributions add up to the real model's score.

Example
-------
>>> g = ilab.circuits.attribute(model, tcs, "When Mary and John went to the store, John gave a drink to")
>>> table = ilab.circuits.qk(model, tcs, g, node=0, head=(3, 2), key_pos=4)
>>> table.head()   # query, key, contribution, query_node, key_node; largest first
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..checks import check_positive_int
from ..model.model import Model
from ..model.sites import resolve
from .attribute import Sources, find_sources
from .graph import Graph
from .replacement import ReplacementPass, check_family, replacement_pass
from .replacers import Replacer, replacer


@dataclass(frozen=True)
class HeadMaps:
    """One head's query and key maps from an attention input [..., D] to post-RoPE vectors [..., d_head]."""

    attn: torch.nn.Module
    head: int
    kv_head: int
    cos_PH: torch.Tensor  # [P, d_head]
    sin_PH: torch.Tensor  # [P, d_head]
    q_scale_P: torch.Tensor  # [P, 1] the frozen q_norm scale times its gain, per position (ones without q_norm)
    k_scale_P: torch.Tensor

    def _side(self, x_ND: torch.Tensor, pos: int | slice, proj: str, head: int, scale_P: torch.Tensor) -> torch.Tensor:
        weight = getattr(self.attn, proj).weight.float()
        d_head = self.cos_PH.shape[-1]
        v_NH = x_ND.float() @ weight[head * d_head : (head + 1) * d_head].T
        bias = getattr(getattr(self.attn, proj), "bias", None)
        if bias is not None:
            v_NH = v_NH + bias.float()[head * d_head : (head + 1) * d_head]
        v_NH = v_NH * scale_P[pos]
        half = d_head // 2
        rotated = torch.cat([-v_NH[..., half:], v_NH[..., :half]], -1)
        return v_NH * self.cos_PH[pos] + rotated * self.sin_PH[pos]

    def query(self, x_ND: torch.Tensor, pos: int | slice) -> torch.Tensor:
        """The post-RoPE query of this head at ``pos`` for attention inputs ``x_ND`` (frozen norms); with a
        slice of positions, ``x_ND`` holds one input per position."""
        return self._side(x_ND, pos, "q_proj", self.head, self.q_scale_P)

    def key(self, x_ND: torch.Tensor, pos: int | slice) -> torch.Tensor:
        """The post-RoPE key of this head's key-value head at ``pos`` for attention inputs ``x_ND``."""
        return self._side(x_ND, pos, "k_proj", self.kv_head, self.k_scale_P)

    @property
    def scaling(self) -> float:
        return float(getattr(self.attn, "scaling", self.cos_PH.shape[-1] ** -0.5))


def _head_norm_scale(attn: torch.nn.Module, name: str, proj: str, head: int, x_PD: torch.Tensor,
                     d_head: int, unit_offset: bool) -> torch.Tensor:  # fmt: skip
    """The frozen per-position scale [P, 1] (times the gain, [P, d_head]) of a per-head norm, ones without one."""
    norm = getattr(attn, name, None)
    if norm is None:
        return torch.ones(x_PD.shape[0], 1)
    v_PH = x_PD.float() @ getattr(attn, proj).weight.float()[head * d_head : (head + 1) * d_head].T
    eps = float(getattr(norm, "eps", getattr(norm, "variance_epsilon", 1e-6)))
    gain = norm.weight.detach().float()
    gain = 1.0 + gain if unit_offset else gain
    return torch.rsqrt(v_PH.pow(2).mean(-1, keepdim=True) + eps) * gain


def head_maps(model: Model, layer: int, head: int, attn_in_PD: torch.Tensor) -> HeadMaps:
    """The query and key maps of ``head`` at ``layer`` with norms frozen at the attention inputs ``attn_in_PD``."""
    family = model.check_mapped()
    lin = check_family(model)
    mod = model.module
    attn = resolve(mod, f"{family.layers}.{layer}.{lin.qk[0].rsplit('.', 1)[0]}")
    n_heads, d_head = model.n_heads, model.d_head
    n_kv = int(getattr(model.config, "num_key_value_heads", n_heads) or n_heads)
    kv_head = head // (n_heads // n_kv)
    x_PD = attn_in_PD.detach().float()
    with torch.no_grad():
        q_scale = _head_norm_scale(attn, "q_norm", "q_proj", head, x_PD, d_head, lin.unit_offset)
        k_scale = _head_norm_scale(attn, "k_norm", "k_proj", kv_head, x_PD, d_head, lin.unit_offset)
        rotary = resolve(mod, f"{family.layers.rsplit('.', 1)[0]}.rotary_emb")
        positions = torch.arange(x_PD.shape[0], device=x_PD.device)[None]
        layer_type = getattr(attn, "layer_type", None)
        args = (x_PD[None], positions) + ((layer_type,) if layer_type is not None else ())
        cos, sin = rotary(*args)
    return HeadMaps(attn, head, kv_head, cos[0].float(), sin[0].float(), q_scale, k_scale)


def source_rows(grads: list[torch.Tensor], src: Sources, n_layers: int) -> torch.Tensor:
    """Each source's share [n, sources] of ``n`` targets whose gradients at the leaves are ``grads``
    (embedding first, then each layer's MLP output, [n, P, D] each): features, errors (layer-major), tokens.
    A cross-layer transcoder's feature adds up what it writes to its own and every later layer's MLP output."""
    n, n_pos = grads[0].shape[0], grads[0].shape[1]
    n_f = len(src.features)
    rows = torch.zeros(n, n_f + n_layers * n_pos + n_pos, device=grads[0].device)
    for layer in range(n_layers):
        g_l = grads[layer + 1]
        span = src.span(layer)
        g_span = g_l if span == 1 else torch.cat(grads[layer + 1 : layer + 1 + span], -1)  # [n, P, K*D]
        for pos, (ids, dec) in enumerate(src.decoders[layer]):
            if len(ids):
                rows[:, ids] = g_span[:, pos] @ dec.T
        rows[:, n_f + layer * n_pos : n_f + (layer + 1) * n_pos] = (g_l * src.errors[layer]).sum(-1)
    rows[:, n_f + n_layers * n_pos :] = (grads[0] * src.embeds).sum(-1)
    return rows


def side_vectors(run: ReplacementPass, src: Sources, maps: HeadMaps, layer: int, query_pos: int, key_pos: int,
                 n_layers: int) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Each source's share of the query vector at ``query_pos`` and the key vector at ``key_pos``:
    ([sources, d_head], [sources, d_head]), one backward pass per ``batch`` components."""
    attn_in = run.attn_in[layer]  # [B, P, D] attached to the linear graph
    batch, d_head = attn_in.shape[0], maps.cos_PH.shape[-1]
    targets = [("q", j) for j in range(d_head)] + [("k", j) for j in range(d_head)]
    rows = []
    for start in range(0, len(targets), batch):
        chunk = targets[start : start + batch]
        value = torch.zeros((), device=attn_in.device)
        for row, (side, j) in enumerate(chunk):
            vec = maps.query(attn_in[row, query_pos], query_pos) if side == "q" else maps.key(attn_in[row, key_pos],
                                                                                            key_pos)  # fmt: skip
            value = value + vec[j]
        grads = torch.autograd.grad(value, run.leaves, retain_graph=True, allow_unused=True)
        n = len(chunk)
        g = [torch.zeros_like(leaf[:n], dtype=torch.float32) if gr is None else gr[:n].float()
             for leaf, gr in zip(run.leaves, grads, strict=True)]  # fmt: skip
        rows.append(source_rows(g, src, n_layers).cpu())
    all_rows = torch.cat(rows)
    return all_rows[:d_head].T, all_rows[d_head:].T


def source_labels(src: Sources, graph: Graph, n_layers: int, n_pos: int) -> tuple[list[str], list[int]]:
    """Each source's name and its node index in ``graph`` (-1 for a feature the graph left out, and the bias)."""
    index = {tuple(f): i for i, f in enumerate(graph.features.tolist())}
    names, nodes = [], []
    for layer, pos, latent in src.features.tolist():
        names.append(f"feature L{layer} P{pos} #{latent}")
        nodes.append(index.get((layer, pos, latent), -1))
    for layer in range(n_layers):
        for pos in range(n_pos):
            names.append(f"error L{layer} P{pos}")
            nodes.append(graph.n_features + layer * n_pos + pos)
    for pos in range(n_pos):
        names.append(f"token P{pos} {graph.tokens[pos]!r}")
        nodes.append(graph.n_features + graph.n_errors + pos)
    return [*names, "bias"], [*nodes, -1]


def check_node_or_edge(graph: Graph, node_or_edge: Any) -> tuple[int, int | None]:
    """(the target node, the key position or None) of a feature or logit node index or a ``(target, source)``
    attention edge; a clear error naming the bad value and the valid choices otherwise."""

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    pair = isinstance(node_or_edge, tuple) and len(node_or_edge) == 2 and all(is_int(v) for v in node_or_edge)
    if not (is_int(node_or_edge) or pair):
        raise TypeError(f"node_or_edge must be a node index or a (target, source) pair of node indices of the graph "
                        f"(0..{graph.n_nodes - 1}), got {node_or_edge!r:.80}.")  # fmt: skip
    target, source = node_or_edge if pair else (node_or_edge, None)
    info = graph.node(target)
    if info["kind"] not in ("feature", "logit"):
        raise ValueError(
            f"node {target} is of kind {info['kind']!r}, which no attention head writes to through the graph; "
            f"QK attributions need a feature node (0..{graph.n_features - 1}) or a logit node "
            f"({graph.n_nodes - graph.n_logits}..{graph.n_nodes - 1})."
        )
    if source is None:
        return target, None
    src = graph.node(source)
    top = info["layer"] if info["kind"] == "feature" else graph.n_layers - 1
    if src["kind"] == "logit" or src["pos"] >= info["pos"] or src["layer"] >= top:
        raise ValueError(
            f"({target}, {source}) is not an attention edge: the source is a {src['kind']} at layer {src['layer']}, "
            f"position {src['pos']} and the target a {info['kind']} at layer {info['layer']}, position {info['pos']}. "
            f"An attention edge joins a feature, error or token at an earlier position (and a lower layer than "
            f"{top}) to a feature or logit a head at layers up to {top} writes to."
        )
    return target, int(src["pos"])


def check_target(graph: Graph, node_or_edge: Any, head: Any, key_pos: Any, n_heads: int) -> tuple[int, int, int, int]:
    """(head layer, head index, query position, key position) for a node and ``key_pos``, or an attention edge
    (whose source's position is the key position; ``key_pos`` None or the same); a clear error naming the bad
    value and the valid choices otherwise."""
    node, edge_key = check_node_or_edge(graph, node_or_edge)
    if edge_key is not None and key_pos is not None and key_pos != edge_key:
        raise ValueError(f"key_pos={key_pos!r} differs from the edge {node_or_edge!r}'s source position {edge_key}: "
                         f"give key_pos=None or {edge_key}.")  # fmt: skip
    key_pos = edge_key if edge_key is not None else key_pos
    info = graph.node(node)
    top = info["layer"] if info["kind"] == "feature" else graph.n_layers - 1  # a layer's attention runs before its MLP
    ints = isinstance(head, tuple) and all(isinstance(v, int) and not isinstance(v, bool) for v in head)
    ok = ints and len(head) == 2
    if not ok or not (0 <= head[0] <= top and 0 <= head[1] < n_heads):
        raise ValueError(
            f"head={head!r} does not write to node {node} (a {info['kind']} at layer {info['layer']}, position "
            f"{info['pos']}): give (layer, head) with layer in 0..{top} and head in 0..{n_heads - 1}."
        )
    query_pos = int(info["pos"])
    if not isinstance(key_pos, int) or isinstance(key_pos, bool) or not 0 <= key_pos <= query_pos:
        raise ValueError(f"key_pos={key_pos!r} is not a position the query at {query_pos} attends to: "
                         f"give one in 0..{query_pos}.")  # fmt: skip
    return head[0], head[1], query_pos, key_pos


def graph_inputs(model: Model, transcoders: Any, graph: Graph) -> tuple[Replacer, torch.Tensor, list[Any]]:
    """What replaces the MLPs (per-layer transcoders or a cross-layer transcoder), the prompt's ids ``[1, P]``
    and the skip weights of the pass that built ``graph``; an error when the graph came from other tokens or
    other transcoders."""
    rep = replacer(model, transcoders)
    ids_1P = model.to_tokens(graph.prompt)["input_ids"][:1]
    if ids_1P[0].tolist() != graph.token_ids or rep.fingerprints() != graph.transcoders:
        raise ValueError("graph was not built from this model's tokens and these transcoders: build it with "
                         "ilab.circuits.attribute(model, transcoders, prompt) first.")  # fmt: skip
    return rep, ids_1P, rep.skips()


def qk(
    model: Model,
    transcoders: Any,
    graph: Graph,
    node: int | tuple[int, int],
    head: tuple[int, int],
    key_pos: int | None = None,
    *,
    batch_size: int = 32,
    skip_bos: bool = True,
    bos_error: bool = True,
) -> pd.DataFrame:
    """The pre-softmax score of ``head`` = (layer, index) from ``node``'s position to ``key_pos``, split into
    bilinear contributions of query-side and key-side sources (see the module doc).

    ``graph`` is the attribution graph of the same model and ``transcoders``; ``node`` a feature or logit node
    at the query position that the head writes to (its layer at most the feature's), or an attention edge
    ``(target, source)`` whose source's position is the key position. Returns one row per
    (query source, key source) with a non-zero share: ``query``, ``key``, ``contribution``, ``query_node``,
    ``key_node`` (graph node indices, -1 for the bias and for features the graph left out), largest
    ``|contribution|`` first; the contributions add up to the score (``table.attrs["score"]``).

    >>> ilab.circuits.qk(model, tcs, g, node=g.feature_index(1, 5, 17), head=(1, 0), key_pos=2).head(10)
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be an attribution graph (ilab.circuits.attribute), got {type(graph).__name__}.")
    check_family(model)
    layer, head_index, query_pos, key_pos = check_target(graph, node, head, key_pos, model.n_heads)
    check_positive_int("batch_size", batch_size)
    rep, ids_1P, skips = graph_inputs(model, transcoders, graph)
    with model.lock:
        run = replacement_pass(model, ids_1P, skips, min(batch_size, 2 * model.d_head))
    src = find_sources(run, rep, skip_bos, bos_error)
    maps = head_maps(model, layer, head_index, run.attn_in[layer][0])
    q_S, k_S = side_vectors(run, src, maps, layer, query_pos, key_pos, model.n_layers)
    with torch.no_grad():
        q_total = maps.query(run.attn_in[layer][0, query_pos], query_pos).cpu()
        k_total = maps.key(run.attn_in[layer][0, key_pos], key_pos).cpu()
    q_S = torch.cat([q_S, (q_total - q_S.sum(0))[None]])  # the bias: what no source carries
    k_S = torch.cat([k_S, (k_total - k_S.sum(0))[None]])
    return _table(q_S, k_S, maps.scaling, *source_labels(src, graph, model.n_layers, graph.n_pos),
                  float(q_total @ k_total) * maps.scaling)  # fmt: skip


def _table(q_S: torch.Tensor, k_S: torch.Tensor, scaling: float, names: list[str], nodes: list[int],
           score: float) -> pd.DataFrame:  # fmt: skip
    """The non-zero pairs of ``scaling * q_S @ k_S.T`` as a table, largest magnitude first."""
    q_keep = q_S.abs().sum(1).nonzero().flatten()
    k_keep = k_S.abs().sum(1).nonzero().flatten()
    pair_QK = (q_S[q_keep].double() @ k_S[k_keep].double().T) * scaling
    qi, ki = torch.meshgrid(q_keep, k_keep, indexing="ij")
    order = pair_QK.flatten().abs().argsort(descending=True)
    q_ids, k_ids = qi.flatten()[order].numpy(), ki.flatten()[order].numpy()
    node_of = np.asarray(nodes)
    table = pd.DataFrame({
        "query": pd.Categorical.from_codes(q_ids, categories=names),
        "key": pd.Categorical.from_codes(k_ids, categories=names),
        "contribution": pair_QK.flatten()[order].numpy(),
        "query_node": node_of[q_ids], "key_node": node_of[k_ids],
    })  # fmt: skip
    table.attrs["score"] = score
    return table
