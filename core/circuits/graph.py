"""The attribution graph result: plain data (nodes, adjacency), pruning, scores, files and viewer JSON.

Nodes are ordered as circuit-tracer orders them: the feature nodes (``features`` rows: layer, position,
latent), then one error node per (layer, position), layer-major, then one token node per position, then
the logit nodes. ``adjacency[target, source]`` is the direct effect of ``source`` on ``target``.

Example
-------
>>> g = ilab.circuits.attribute(model, transcoders, "The capital of France is")
>>> g.prune(0.8, 0.98).nodes.sum(); g.scores()
>>> g.save("graph/"); g = Graph.load("graph/")
>>> g.to_json()          # what Neuronpedia's and circuit-tracer's graph viewers read
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from ..memory.budget import check_memory
from ..storage.atomic import atomic_folder, reads_folder, write_safetensors
from ..storage.readers import (
    Fields,
    FileError,
    expect_arrays,
    expect_values,
    in_folder,
    read_json,
    read_safetensors,
    safetensors_header,
)
from .prune import Pruned, graph_scores, prune

FORMAT = "interplab attribution graph"
VERSION = 1
_META, _ARRAYS = "graph.json", "graph.safetensors"


@dataclass
class Graph:
    """An attribution graph (see the module doc). Everything is plain data: tensors, lists, strings."""

    prompt: str
    token_ids: list[int]
    tokens: list[str]
    n_layers: int
    features: torch.Tensor  # [F, 3] int64: layer, position, latent
    activations: torch.Tensor  # [F] float32
    logit_ids: list[int]
    logit_tokens: list[str]
    logit_probs: torch.Tensor  # [K] float32
    adjacency: torch.Tensor  # [N, N] float32, rows targets, columns sources
    model_name: str = ""
    transcoders: list[str] = field(default_factory=list)  # each layer's transcoder fingerprint

    # ------------------------------------------------------------- layout
    @property
    def n_pos(self) -> int:
        return len(self.token_ids)

    @property
    def n_features(self) -> int:
        return int(self.features.shape[0])

    @property
    def n_errors(self) -> int:
        return self.n_layers * self.n_pos

    @property
    def n_logits(self) -> int:
        return len(self.logit_ids)

    @property
    def n_nodes(self) -> int:
        return self.n_features + self.n_errors + self.n_pos + self.n_logits

    def node(self, index: int) -> dict[str, Any]:
        """What node ``index`` is: ``kind`` (feature, error, token, logit), ``layer``, ``pos`` and more."""
        f, e, t = self.n_features, self.n_features + self.n_errors, self.n_features + self.n_errors + self.n_pos
        if not 0 <= index < self.n_nodes:
            raise IndexError(f"Node {index} is out of range: the graph has {self.n_nodes} nodes.")
        if index < f:
            layer, pos, latent = (int(v) for v in self.features[index])
            return {"kind": "feature", "layer": layer, "pos": pos, "latent": latent,
                    "activation": float(self.activations[index])}  # fmt: skip
        if index < e:
            layer, pos = divmod(index - f, self.n_pos)
            return {"kind": "error", "layer": layer, "pos": pos}
        if index < t:
            return {"kind": "token", "layer": -1, "pos": index - e, "token": self.tokens[index - e]}
        k = index - t
        return {"kind": "logit", "layer": self.n_layers, "pos": self.n_pos - 1, "token": self.logit_tokens[k],
                "token_id": self.logit_ids[k], "prob": float(self.logit_probs[k])}  # fmt: skip

    def feature_index(self, layer: int, pos: int, latent: int) -> int:
        """The node index of the feature (layer, pos, latent); a clear error if it is not in the graph."""
        hit = (self.features[:, 0] == layer) & (self.features[:, 1] == pos) & (self.features[:, 2] == latent)
        found = hit.nonzero().flatten()
        if len(found) == 0:
            raise ValueError(f"Feature (layer={layer}, pos={pos}, latent={latent}) is not a node of this graph.")
        return int(found[0])

    def sparse(self) -> sp.csr_matrix:
        """The adjacency as a scipy CSR matrix (rows targets, columns sources)."""
        return sp.csr_matrix(self.adjacency.numpy())

    # ------------------------------------------------------ prune, scores
    def prune(self, node_threshold: float = 0.8, edge_threshold: float = 0.98, max_edges: int | None = None) -> Pruned:
        """Node and edge masks keeping that fraction of the influence on the logits, at most ``max_edges`` edges
        (see :mod:`.prune`)."""
        return prune(self.adjacency, self.n_features, self.n_pos, self.n_logits, self.logit_probs,
                     node_threshold, edge_threshold, max_edges)  # fmt: skip

    def scores(self) -> tuple[float, float]:
        """(replacement score, completeness score) of the unpruned graph."""
        return graph_scores(self.adjacency, self.n_features, self.n_errors, self.n_pos, self.logit_probs)

    # -------------------------------------------------------------- files
    def save(self, path: str | Path) -> Path:
        """Write ``graph.json`` (everything but arrays) and ``graph.safetensors`` (CSR adjacency), atomically."""
        csr = self.sparse()
        arrays = {
            "features": self.features.to(torch.int64).contiguous(),
            "activations": self.activations.float().contiguous(),
            "logit_probs": self.logit_probs.float().contiguous(),
            "indptr": torch.from_numpy(csr.indptr.astype(np.int64)),
            "indices": torch.from_numpy(csr.indices.astype(np.int64)),
            "values": torch.from_numpy(csr.data.astype(np.float32)),
        }
        meta = {
            "format": FORMAT, "version": VERSION, "prompt": self.prompt, "token_ids": self.token_ids,
            "tokens": self.tokens, "n_layers": self.n_layers, "logit_ids": self.logit_ids,
            "logit_tokens": self.logit_tokens, "model_name": self.model_name, "transcoders": self.transcoders,
        }  # fmt: skip
        target = Path(path)
        with atomic_folder(target) as work:
            write_safetensors(work / _ARRAYS, arrays)
            (work / _META).write_text(json.dumps(meta))
        return target

    @staticmethod
    @reads_folder("path")
    def load(path: str | Path) -> Graph:
        """Read a graph written by :meth:`save`, validating every field and array before allocating."""
        folder = Path(path)
        meta_file, arrays_file = in_folder(folder, _META), in_folder(folder, _ARRAYS)
        if not meta_file.exists():
            raise FileNotFoundError(f"No attribution graph at {str(folder)!r} (expected {_META} and {_ARRAYS}).")
        m = Fields(meta_file, read_json(meta_file, max_bytes=64 * 1024**2))
        if m.str("format") != FORMAT:
            raise FileError(meta_file, "format", f"is not {FORMAT!r}")
        m.int("version", minimum=1, maximum=VERSION)
        token_ids, tokens = _int_list(m, "token_ids"), _str_list(m, "tokens")
        logit_ids, logit_tokens = _int_list(m, "logit_ids"), _str_list(m, "logit_tokens")
        n_layers = m.int("n_layers", minimum=1)
        expect_values(meta_file, "token_ids", token_ids, 0)
        expect_values(meta_file, "logit_ids", logit_ids, 0)
        if len(tokens) != len(token_ids) or len(logit_tokens) != len(logit_ids):
            raise FileError(meta_file, "tokens", "and token_ids (or logit_tokens and logit_ids) differ in length")
        header = safetensors_header(arrays_file)
        shapes = {name: tuple(info.shape) for name, info in header.tensors.items()}
        n_f = shapes.get("features", (0,))[0]
        n = n_f + n_layers * len(token_ids) + len(token_ids) + len(logit_ids)
        nnz = shapes.get("values", (0,))[0]
        ints, floats = ("I64",), ("F32",)
        expect_arrays(arrays_file, header.tensors, {
            "features": ((n_f, 3), ints), "activations": ((n_f,), floats), "logit_probs": ((len(logit_ids),), floats),
            "indptr": ((n + 1,), ints), "indices": ((nnz,), ints), "values": ((nnz,), floats)})  # fmt: skip
        check_memory(f"Loading the attribution graph at {str(folder)!r}", 4 * n * n + header.nbytes)
        _, t = read_safetensors(arrays_file)
        indptr, indices = t["indptr"].numpy(), t["indices"].numpy()
        bad_index = nnz > 0 and (indices.min() < 0 or indices.max() >= n)
        if indptr[0] != 0 or indptr[-1] != nnz or (np.diff(indptr) < 0).any() or bad_index:
            raise FileError(arrays_file, "indptr", "does not describe a valid sparse adjacency")
        _check_values(arrays_file, t, n_layers, len(token_ids))
        dense = sp.csr_matrix((t["values"].numpy(), indices, indptr), shape=(n, n)).toarray()
        return Graph(
            prompt=m.str("prompt"), token_ids=token_ids, tokens=tokens, n_layers=n_layers, features=t["features"],
            activations=t["activations"], logit_ids=logit_ids, logit_tokens=logit_tokens,
            logit_probs=t["logit_probs"], adjacency=torch.from_numpy(dense), model_name=m.str("model_name", ""),
            transcoders=_str_list(m, "transcoders"),
        )  # fmt: skip

    # ------------------------------------------------------------ viewers
    def to_json(self, slug: str = "interplab-graph", node_threshold: float = 0.8, edge_threshold: float = 0.98,
                scan: str | None = None) -> dict[str, Any]:  # fmt: skip
        """The graph file Neuronpedia's and circuit-tracer's viewers read (``metadata``, ``qParams``, ``nodes``,
        ``links``), pruned at the given thresholds."""
        kept = self.prune(node_threshold, edge_threshold)
        ids: dict[int, str] = {}
        nodes = []
        for i in kept.nodes.nonzero().flatten().tolist():
            entry = self._viewer_node(i, float(kept.cumulative[i]))
            ids[i] = entry["node_id"]
            nodes.append(entry)
        dst, src = kept.edges.nonzero(as_tuple=True)
        links = [{"source": ids[s], "target": ids[d], "weight": float(self.adjacency[d, s])}
                 for d, s in zip(dst.tolist(), src.tolist()) if s in ids and d in ids]  # fmt: skip
        return {
            "metadata": {"slug": slug, "scan": scan or self.model_name or "interplab", "transcoder_list":
                         self.transcoders, "prompt_tokens": self.tokens, "prompt": self.prompt,
                         "node_threshold": node_threshold, "schema_version": 1},
            "qParams": {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""},
            "nodes": nodes,
            "links": links,
        }  # fmt: skip

    def _viewer_node(self, i: int, infl: float) -> dict[str, Any]:
        """Node ``i`` as the viewers' graph file spells it, with its influence ``infl``."""
        node = self.node(i)
        if node["kind"] == "feature":
            layer, pos, latent = node["layer"], node["pos"], node["latent"]
            entry = {
                "node_id": f"{layer}_{latent}_{pos}",
                "feature": (layer + latent) * (layer + latent + 1) // 2 + latent,
                "layer": str(layer),
                "ctx_idx": pos,
                "feature_type": "cross layer transcoder",
                "jsNodeId": f"{layer}_{latent}-0",
                "influence": infl,
                "activation": node["activation"],
            }
        elif node["kind"] == "error":
            layer, pos = node["layer"], node["pos"]
            entry = {
                "node_id": f"{layer}_-1_{pos}",
                "feature": -1,
                "layer": str(layer),
                "ctx_idx": pos,
                "feature_type": "mlp reconstruction error",
                "jsNodeId": f"{layer}_-1-{pos}",
                "influence": infl,
            }
        elif node["kind"] == "token":
            pos, vocab = node["pos"], self.token_ids[node["pos"]]
            entry = {
                "node_id": f"E_{vocab}_{pos}",
                "feature": pos,
                "layer": "E",
                "ctx_idx": pos,
                "feature_type": "embedding",
                "jsNodeId": f"E_{vocab}-{pos}",
                "influence": infl,
            }
        else:
            k = i - (self.n_nodes - self.n_logits)
            layer, vocab = str(self.n_layers + 1), node["token_id"]
            entry = {
                "node_id": f"{layer}_{vocab}_{self.n_pos - 1}",
                "feature": vocab,
                "layer": layer,
                "ctx_idx": self.n_pos - 1,
                "feature_type": "logit",
                "token_prob": node["prob"],
                "is_target_logit": k == 0,
                "jsNodeId": f"L_{vocab}-{self.n_pos - 1}",
                "clerp": f'Output "{node["token"]}" (p={node["prob"]:.3f})',
            }
        entry.setdefault("token_prob", 0.0)
        entry.setdefault("is_target_logit", False)
        entry.setdefault("clerp", "")
        entry.update(run_idx=0, reverse_ctx_idx=0)
        return entry

    def __repr__(self) -> str:
        return (f"Graph({shorten(self.prompt, 48)!r}, {self.n_features} features, {self.n_errors} errors, "
                f"{self.n_pos} tokens, {self.n_logits} logits)")  # fmt: skip


def shorten(text: str, width: int) -> str:
    """``text`` cut at the last word boundary within ``width`` characters, with an ellipsis when cut.

    >>> shorten("When Mary and John went to the store", 20)
    'When Mary and John…'
    """
    if len(text) <= width:
        return text
    head = text[: width - 1]
    cut = head.rsplit(" ", 1)[0] if " " in head.strip() else head
    return cut.rstrip() + "…"


def _check_values(file: Path, arrays: dict[str, torch.Tensor], n_layers: int, n_pos: int) -> None:
    """Every number of a graph's arrays in its range: feature layers and positions inside the graph, latents
    >= 0, activations and edge weights finite, logit probabilities in 0..1."""
    features = arrays["features"]
    expect_values(file, "features[:, 0] (layer)", features[:, 0], 0, n_layers, "n_layers")
    expect_values(file, "features[:, 1] (position)", features[:, 1], 0, n_pos, "tokens")
    expect_values(file, "features[:, 2] (latent)", features[:, 2], 0)
    expect_values(file, "activations", arrays["activations"])
    expect_values(file, "values", arrays["values"])
    expect_values(file, "logit_probs", arrays["logit_probs"], 0, maximum=1)


def _int_list(m: Fields, key: str) -> list[int]:
    value = m.data.get(key)
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise FileError(m.file, m.name(key), "must be a list of integers")
    return value


def _str_list(m: Fields, key: str) -> list[str]:
    value = m.data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FileError(m.file, m.name(key), "must be a list of strings")
    return value
