"""The computational graph of edge-level circuits: its nodes, the inputs they read and the edges between them.

An *upstream* node writes to the residual stream: the embeddings ``input``, each attention head ``a{L}.h{H}``
(its slice of the output projection; through the post-attention norm, with that norm's scale of the same run,
where the model has one) and each MLP ``m{L}``. A *downstream* input reads the residual stream: a head's
query ``a{L}.h{H}<q>``, a key-value head's key and value ``a{L}.g{G}<k>`` / ``<v>`` (shared by the query
heads of its group), an MLP's input ``m{L}`` and the ``logits``. An edge joins an upstream node to every
downstream input after it in the forward pass (the same layer's MLP reads its heads, except in parallel blocks).

Example
-------
>>> graph = EdgeGraph.of(model)
>>> graph.upstream[:3], graph.downstream[-2:], int(graph.valid.sum())
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..model.sites import parallel_blocks

if TYPE_CHECKING:
    from ..model.model import Model


@dataclass(frozen=True)
class EdgeGraph:
    """Names of the upstream nodes and downstream inputs, and which (upstream, downstream) pairs are edges."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    upstream: list[str]
    downstream: list[str]
    valid: torch.Tensor  # bool [n_upstream, n_downstream]

    @staticmethod
    def of(model: Model) -> EdgeGraph:
        """The graph of one model (its layers, heads, key-value heads and block layout).

        >>> EdgeGraph.of(model).valid.shape
        """
        config = model.config
        n_kv = int(getattr(config, "num_key_value_heads", None) or model.n_heads)
        return EdgeGraph.build(model.n_layers, model.n_heads, n_kv, parallel_blocks(config))

    @staticmethod
    def build(n_layers: int, n_heads: int, n_kv_heads: int, parallel: bool = False) -> EdgeGraph:
        """The graph of a model shape (``parallel``: attention and MLP read the same stream).

        >>> EdgeGraph.build(2, 4, 2).downstream[:5]
        ['a0.h0<q>', 'a0.h1<q>', 'a0.h2<q>', 'a0.h3<q>', 'a0.g0<k>']
        """
        upstream, up_after = ["input"], [-1.0]  # where each upstream node writes (layer, 0 attention / .5 MLP)
        downstream, down_at = [], []  # where each downstream input reads
        for layer in range(n_layers):
            upstream += [f"a{layer}.h{h}" for h in range(n_heads)] + [f"m{layer}"]
            up_after += [layer] * n_heads + [layer + 0.5]
            reads = [f"a{layer}.h{h}<q>" for h in range(n_heads)]
            reads += [f"a{layer}.g{g}<{kv}>" for kv in ("k", "v") for g in range(n_kv_heads)]
            downstream += [*reads, f"m{layer}"]
            down_at += [layer] * len(reads) + [layer if parallel else layer + 0.25]
        downstream.append("logits")
        down_at.append(float(n_layers))
        valid = torch.tensor(up_after)[:, None] < torch.tensor(down_at, dtype=torch.float64)[None, :]
        return EdgeGraph(n_layers, n_heads, n_kv_heads, upstream, downstream, valid)

    @property
    def n_edges(self) -> int:
        """How many edges the graph has."""
        return int(self.valid.sum())

    def layer_inputs(self, layer: int) -> range:
        """Indices in :attr:`downstream` of one layer's head inputs (queries, keys, values) and MLP input."""
        width = self.n_heads + 2 * self.n_kv_heads + 1
        return range(layer * width, (layer + 1) * width)

    def layer_outputs(self, layer: int) -> range:
        """Indices in :attr:`upstream` of one layer's heads and MLP."""
        return range(1 + layer * (self.n_heads + 1), 1 + (layer + 1) * (self.n_heads + 1))

    def edge_names(self) -> list[str]:
        """Every edge as ``"upstream->downstream"``, in the order of ``valid.nonzero()``."""
        return [f"{self.upstream[u]}->{self.downstream[v]}" for u, v in self.valid.nonzero().tolist()]
