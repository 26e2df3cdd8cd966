"""Edge-level circuits: a set of edges of the graph, evaluated by patching every other edge with the corrupted run.

A circuit run is the clean prompts where each downstream input reads, from every upstream node *outside* the
circuit, that node's output in the corrupted run (and from nodes inside it their output in this same run).
Its faithfulness is ``(M(circuit) - M(corrupt)) / (M(clean) - M(corrupt))``: 1 when the circuit alone carries
the clean behaviour, 0 when it carries none (Hanna et al. 2024; the empty circuit is the corrupted run and
the full graph the clean one).

Example
-------
>>> circuit = scores.circuit(200)
>>> circuit.heads()                     # the heads it touches, by how many of its edges they have
>>> scores.faithfulness([50, 200, 800], random=3)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pandas as pd
import torch

from ..storage.progress import progress_bar
from ..views.charts import offline
from .edge_forward import EdgeForward
from .edge_graph import EdgeGraph

if TYPE_CHECKING:
    from ..model.model import Model
    from ..readout.metrics import BoundMetric


class EdgeScores(Protocol):
    """What evaluating a circuit reads from :class:`interplab.core.circuits.edges.EdgeScores`."""

    model: Model
    graph: EdgeGraph
    ids_clean: torch.Tensor
    corrupt_upstream: torch.Tensor
    metric: BoundMetric
    clean_metric: float
    corrupt_metric: float


@dataclass
class Circuit:
    """Edges of an :class:`EdgeGraph`: ``mask`` bool [n_upstream, n_downstream] and their table."""

    graph: EdgeGraph
    mask: torch.Tensor
    edges: pd.DataFrame  # upstream, downstream, score, in the order chosen

    @staticmethod
    def from_indices(graph: EdgeGraph, pairs: torch.Tensor, scores: torch.Tensor) -> Circuit:
        """The circuit of (upstream, downstream) index ``pairs`` [n, 2] with their ``scores``.

        >>> Circuit.from_indices(graph, torch.tensor([[0, 4]]), scores)
        """
        mask = torch.zeros_like(graph.valid)
        mask[pairs[:, 0], pairs[:, 1]] = True
        table = pd.DataFrame({"upstream": [graph.upstream[u] for u in pairs[:, 0].tolist()],
                              "downstream": [graph.downstream[v] for v in pairs[:, 1].tolist()],
                              "score": scores[pairs[:, 0], pairs[:, 1]].tolist()})  # fmt: skip
        return Circuit(graph, mask, table)

    @property
    def n_edges(self) -> int:
        """How many edges the circuit has."""
        return int(self.mask.sum())

    def heads(self) -> pd.Series:
        """The attention heads the circuit's edges touch, with how many edges each has (most first).

        >>> circuit.heads().head()
        """
        names = [n.split("<")[0] for n in pd.concat([self.edges["upstream"], self.edges["downstream"]])]
        heads = [n for n in names if n.startswith("a") and ".h" in n]
        return pd.Series(heads, dtype=str).value_counts()

    def __repr__(self) -> str:
        return f"Circuit({self.n_edges} of {self.graph.n_edges:,} edges)"


def circuit_metric(scores: EdgeScores, circuit: Circuit, run: EdgeForward | None = None) -> float:
    """The mean metric of the clean prompts with every edge outside ``circuit`` reading the corrupted run.

    >>> circuit_metric(scores, scores.circuit(100))
    """
    run = run or EdgeForward(scores.model, scores.graph)
    patched = (scores.graph.valid & ~circuit.mask).to(torch.float32)
    out = run(scores.ids_clean, patch=(scores.corrupt_upstream, patched))
    return float(scores.metric(out.logits, torch.arange(out.logits.shape[0])).mean())


def evaluate_circuits(scores: EdgeScores, circuits: list[tuple[str, int, Circuit]], progress: Any) -> pd.DataFrame:
    """One row per circuit: its kind ("top" / "random"), size, metric and faithfulness."""
    run = EdgeForward(scores.model, scores.graph)
    span = scores.clean_metric - scores.corrupt_metric
    rows = []
    with progress_bar(len(circuits), desc="faithfulness", show=progress) as bar:
        for kind, n, circuit in circuits:
            value = circuit_metric(scores, circuit, run)
            faithful = (value - scores.corrupt_metric) / span if span else float("nan")
            rows.append({"circuit": kind, "n_edges": n, "metric": value, "faithfulness": faithful})
            bar.update(1)
    return pd.DataFrame(rows)


def faithfulness_chart(table: pd.DataFrame, method: str) -> Any:
    """Faithfulness against the number of edges: the top circuits' line, random circuits' points and their mean."""
    import altair as alt

    x = alt.X("n_edges:Q", scale=alt.Scale(type="log"), title="edges in the circuit")
    y = alt.Y("faithfulness:Q", title="faithfulness")
    colour = alt.Color("circuit:N", title="circuit")
    means = table.groupby(["circuit", "n_edges"], as_index=False)["faithfulness"].mean()
    lines = alt.Chart(means).mark_line(point=True).encode(x=x, y=y, color=colour)
    points = alt.Chart(table[table["circuit"] == "random"]).mark_point(opacity=0.4).encode(x=x, y=y, color=colour)
    rules = alt.Chart(pd.DataFrame({"faithfulness": [0.0, 1.0]})).mark_rule(strokeDash=[4, 4]).encode(y=y)
    title = f"{method.upper()} circuits: faithfulness against random circuits of the same size"
    return offline((lines + points + rules).properties(title=title, width=420, height=260))
