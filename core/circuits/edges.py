"""Edge attribution patching: a score for every edge between heads, MLPs, embeddings and logits.

Patching one edge ``u -> v`` (input ``v`` reads the corrupted run's output of ``u``, everything else
clean) changes the metric by about ``(corrupt_u - clean_u) . dM/d input_v`` (EAP, Syed et al. 2023): one
clean, one corrupted and one clean forward + backward give every edge's score at once (:mod:`.edge_forward`).
``method="eap-ig"`` (Hanna et al. 2024) averages the gradient over ``steps`` runs whose input embeddings go
from the corrupted run's to the clean run's (``corrupt + k/steps (clean - corrupt)``, ``k = 1 .. steps``; one
step is EAP). A score is a change of the mean metric over the pairs. :meth:`EdgeScores.circuit` keeps the
top edges and :meth:`EdgeScores.faithfulness` evaluates circuits (:mod:`.edge_circuit`).

Example
-------
>>> pairs = ilab.patching.ioi(model, n=8)
>>> scores = ilab.circuits.edges(model, pairs, method="eap-ig")
>>> scores.table().head()                       # the strongest edges
>>> scores.faithfulness([10, 100, 1000])        # the top-n circuits against random ones
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch

from ..checks import check_int, check_texts
from ..memory.budget import check_memory
from ..readout.metrics import BoundMetric, Metric, as_metric
from ..storage.progress import check_progress, progress_bar
from .edge_circuit import Circuit, evaluate_circuits, faithfulness_chart
from .edge_forward import EdgeForward, check_family
from .edge_graph import EdgeGraph

if TYPE_CHECKING:
    from ..model.model import Model

METHODS = ("eap", "eap-ig")


@dataclass
class EdgeScores:
    """Every edge's score (``scores`` [n_upstream, n_downstream], 0 off the graph) and what circuits are run on."""

    graph: EdgeGraph
    scores: torch.Tensor
    method: str
    steps: int
    clean_metric: float  # the mean metric of the clean and corrupted runs
    corrupt_metric: float
    model: Model = field(repr=False)
    ids_clean: torch.Tensor = field(repr=False)
    ids_corrupt: torch.Tensor = field(repr=False)
    corrupt_upstream: torch.Tensor = field(repr=False)  # [U, N, P, D] float32
    metric: BoundMetric = field(repr=False)

    def table(self) -> pd.DataFrame:
        """Every edge with its score, strongest (by absolute score) first.

        >>> scores.table().head(10)
        """
        pairs = self.graph.valid.nonzero().tolist()
        values = self.scores[self.graph.valid].tolist()
        table = pd.DataFrame({"upstream": [self.graph.upstream[u] for u, _ in pairs],
                              "downstream": [self.graph.downstream[v] for _, v in pairs], "score": values})  # fmt: skip
        table["edge"] = table["upstream"] + "->" + table["downstream"]
        return table.reindex(table["score"].abs().sort_values(ascending=False, kind="stable").index).reset_index(
            drop=True
        )

    def circuit(self, n_edges: int) -> Circuit:
        """The ``n_edges`` edges with the largest absolute scores.

        >>> scores.circuit(50).heads()
        """
        check_int("n_edges", n_edges, 1, self.graph.n_edges)
        order = self.scores[self.graph.valid].abs().argsort(descending=True, stable=True)[:n_edges]
        return Circuit.from_indices(self.graph, self.graph.valid.nonzero()[order], self.scores)

    def random_circuit(self, n_edges: int, seed: int = 0) -> Circuit:
        """``n_edges`` edges drawn uniformly from the graph (the control of a circuit of that size).

        >>> scores.random_circuit(50, seed=1)
        """
        check_int("n_edges", n_edges, 1, self.graph.n_edges)
        generator = torch.Generator().manual_seed(int(seed))
        order = torch.randperm(self.graph.n_edges, generator=generator)[:n_edges]
        return Circuit.from_indices(self.graph, self.graph.valid.nonzero()[order], self.scores)

    def faithfulness(
        self, ns: Sequence[int], *, random: int = 0, seed: int = 0, progress: bool | Any = False
    ) -> pd.DataFrame:
        """Each top-``n`` circuit's metric with every other edge patched to the corrupted run, and its faithfulness
        ``(M(circuit) - M(corrupt)) / (M(clean) - M(corrupt))``; with ``random=k`` also ``k`` random circuits of
        each size (rows with ``circuit="random"``).

        >>> scores.faithfulness([10, 100, 1000], random=3)
        """
        sizes = [check_int(f"ns[{i}]", n, 1, self.graph.n_edges) for i, n in enumerate(ns)]
        if not sizes:
            raise ValueError(f"ns is empty; give circuit sizes in 1..{self.graph.n_edges}.")
        check_int("random", random, minimum=0)
        circuits = [("top", n, self.circuit(n)) for n in sizes]
        circuits += [("random", n, self.random_circuit(n, seed + k)) for k in range(random) for n in sizes]
        return evaluate_circuits(self, circuits, progress)

    def chart(self, ns: Sequence[int] | None = None, random: int = 3) -> Any:
        """The faithfulness curve of the top-n circuits against random circuits of the same sizes (altair).

        >>> scores.chart([1, 10, 100, 1000])
        """
        if ns is None:
            top = self.graph.n_edges
            ns = sorted({max(1, int(top * f)) for f in (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)})
        return faithfulness_chart(self.faithfulness(ns, random=random), self.method)

    def __repr__(self) -> str:
        return (f"EdgeScores({self.method}, {self.graph.n_edges:,} edges, {int(self.ids_clean.shape[0])} pairs; "
                f"clean metric {self.clean_metric:.3g}, corrupted {self.corrupt_metric:.3g})")  # fmt: skip


def edges(
    model: Model, pairs: Any, method: str = "eap-ig", *, metric: Metric | Callable[..., Any] | None = None,
    steps: int = 5, batch_size: int = 4, progress: bool | Any = False,
) -> EdgeScores:  # fmt: skip
    """Score every edge of the model's head / MLP graph on prompt pairs (``PromptPairs`` or ``(clean, corrupt)``).

    ``metric`` defaults to the pairs' logit difference; ``steps`` is EAP-IG's number of points (EAP uses one);
    ``batch_size`` pairs go through each backward pass.

    >>> scores = ilab.circuits.edges(model, ilab.patching.ioi(model, n=8), method="eap-ig", steps=5)
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not one of {METHODS}.")
    steps = 1 if method == "eap" else check_int("steps", steps, 1)
    check_int("batch_size", batch_size, 1)
    check_progress(progress)
    check_family(model)
    ids_clean, ids_corrupt, bound = _check_pairs(model, pairs, metric)
    graph = EdgeGraph.of(model)
    n, p = ids_clean.shape
    check_memory(f"edges over {n} pairs of {p} tokens",
                 4 * n * p * model.d_model * (3 * len(graph.upstream) + 2 * len(graph.downstream))
                 + model.forward_bytes(n, p, 1) * 4, "Give fewer or shorter prompt pairs.")  # fmt: skip
    run = EdgeForward(model, graph)
    rows = torch.arange(n)

    def mean_metric(logits: torch.Tensor) -> torch.Tensor:
        return bound(logits, rows).mean()

    chunks = [slice(start, min(start + batch_size, n)) for start in range(0, n, batch_size)]
    with progress_bar(2 + steps * len(chunks), desc=f"edges ({method})", show=progress) as bar:
        clean, corrupt = run(ids_clean), run(ids_corrupt)
        bar.update(2)
        delta = corrupt.upstream - clean.upstream
        scores = torch.zeros(graph.valid.shape)
        for rows_chunk in chunks:  # gradients a few pairs at a time: the metric is a mean, so scores add up
            scores += _chunk_scores(run, ids_clean[rows_chunk], bound, rows[rows_chunk], n, steps,
                                    (corrupt.upstream[0, rows_chunk], clean.upstream[0, rows_chunk]),
                                    delta[:, rows_chunk], bar)  # fmt: skip
    scores *= graph.valid
    return EdgeScores(
        graph=graph, scores=scores, method=method, steps=steps, clean_metric=float(mean_metric(clean.logits)),
        corrupt_metric=float(mean_metric(corrupt.logits)), model=model, ids_clean=ids_clean,
        ids_corrupt=ids_corrupt, corrupt_upstream=corrupt.upstream, metric=bound,
    )  # fmt: skip


def _chunk_scores(
    run: EdgeForward, ids: torch.Tensor, bound: BoundMetric, rows: torch.Tensor, n_pairs: int, steps: int,
    embeds: tuple[torch.Tensor, torch.Tensor], delta: torch.Tensor, bar: Any,
) -> torch.Tensor:  # fmt: skip
    """[U, V]: the scores' share of some pairs: their activation differences times the path-averaged gradients."""
    start, end = embeds

    def metric_share(logits: torch.Tensor) -> torch.Tensor:
        return bound(logits, rows).sum() / n_pairs  # these pairs' share of the mean metric

    grads = torch.zeros(len(run.graph.downstream), *delta.shape[1:])
    for k in range(1, steps + 1):
        point = None if k == steps else start + k / steps * (end - start)  # the last point is the clean run
        grads += run(ids, metric=metric_share, embeds=point).grads / steps  # type: ignore[operator]
        bar.update(1)
    return torch.einsum("unpd,vnpd->uv", delta, grads)


def _check_pairs(
    model: Model, pairs: Any, metric: Metric | Callable[..., Any] | None
) -> tuple[torch.Tensor, torch.Tensor, BoundMetric]:
    """The clean and corrupted ids [N, P] (every prompt the same length) and the bound metric; before any pass."""
    if hasattr(pairs, "clean") and hasattr(pairs, "corrupt"):
        clean, corrupt = pairs.clean, pairs.corrupt
        metric = metric if metric is not None else pairs.logit_diff()
    elif isinstance(pairs, tuple) and len(pairs) == 2:
        clean, corrupt = pairs
    else:
        raise TypeError(f"pairs must be PromptPairs (e.g. ilab.patching.ioi(model)) or a (clean, corrupt) tuple of "
                        f"prompt lists; got {type(pairs).__name__}.")  # fmt: skip
    if metric is None:
        raise TypeError("Give a metric, e.g. metric=ilab.metrics.logit_diff(' Mary', ' John').")
    clean, corrupt = check_texts(clean), check_texts(corrupt)
    if len(clean) != len(corrupt):
        raise ValueError(f"Got {len(clean)} clean prompts and {len(corrupt)} corrupted ones; give one per pair.")
    lengths = [[int(model.to_tokens(t)["input_ids"].shape[1]) for t in side] for side in (clean, corrupt)]
    for i, (a, b) in enumerate(zip(*lengths, strict=True)):
        if a != b or a != lengths[0][0]:
            raise ValueError(
                f"Edge scores need prompt pairs of one length: pair {i} has {a} clean and {b} corrupted tokens, pair 0 "
                f"{lengths[0][0]}; corrupt with names of the same token length, or split them with "
                "pairs.by_length(model)."
            )
    model.check_lengths([lengths[0][0]])
    bound = as_metric(metric).bind(model.tokenizer, len(clean))
    return model.to_tokens(clean)["input_ids"], model.to_tokens(corrupt)["input_ids"], bound
