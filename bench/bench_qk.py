"""Benchmark QK attributions against the attribution graph they explain.

Run ``python bench/bench_qk.py`` (about a minute on the embedded model; ``--quick`` uses a tiny random Gemma 3
and random transcoders). It prints ONE JSON object on stdout; progress goes to stderr.

The IOI prompt's graph on the embedded model with its shipped transcoders (``attribute``, the default
dtype, ``--max-feature-nodes`` rows, ``--batch-size`` targets per backward pass) is timed alone (A) and
followed by ``qk_cards`` (B) for the top logit and the ``--nodes`` most influential feature nodes after the
first two positions: each node's incoming heads (one backward pass a batch of nodes) and its strongest
head's query-side and key-side contributors (two backward targets per head). Runs are interleaved
A, B, A, B, A, B; the JSON gives the medians of 3, the ratio (graph + QK) / graph (goal <= 2) of the
medians and of the minima (steadier on a loaded machine), the QK part alone, the heads chosen and the
machine's load average before and after (other processes share it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

PROMPT = "When Mary and John went to the store, John gave a drink to"
GOAL = 2.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def setup(quick: bool) -> tuple[Any, Any, str]:
    """(model, transcoders, prompt): the embedded model and its transcoders, or a tiny random pair."""
    import interplab as ilab

    if quick:
        from bench.bench_circuits import random_transcoders
        from tests.tiny import tiny_model

        model = tiny_model("gemma3")
        return model, random_transcoders(model, 64, 4, threshold=0.02), "the cat sat on the mat and the dog ran to"
    return ilab.load_model(), ilab.circuits.embedded_transcoders(), PROMPT


def qk_nodes(graph: Any, n_nodes: int) -> list[int]:
    """The top logit and the ``n_nodes`` most influential features after the first two positions."""
    from interplab.core.circuits.prune import node_shares

    shares = node_shares(graph.adjacency, graph.logit_probs)[: graph.n_features]
    order = [int(i) for i in shares.argsort(descending=True) if int(graph.features[i, 1]) > 1]
    return [graph.n_nodes - graph.n_logits, *order[:n_nodes]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny model and random transcoders")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-feature-nodes", type=int, default=128)
    parser.add_argument("--nodes", type=int, default=4, help="feature nodes with QK data, besides the top logit")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from interplab.core.circuits import attribute, qk_cards

    model, tcs, prompt = setup(args.quick)
    settings = {"max_feature_nodes": args.max_feature_nodes, "batch_size": args.batch_size, "progress": False}
    attribute(model, tcs, prompt, **settings)  # warm-up: page in the weights
    load_before = os.getloadavg()
    graph_s, both_s, qk_s, cards = [], [], [], {}
    for rep in range(args.repeats):
        start = time.perf_counter()
        attribute(model, tcs, prompt, **settings)
        graph_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        graph = attribute(model, tcs, prompt, **settings)
        mid = time.perf_counter()
        cards = qk_cards(model, tcs, graph, qk_nodes(graph, args.nodes), batch_size=args.batch_size)
        both_s.append(time.perf_counter() - start)
        qk_s.append(time.perf_counter() - mid)
        log(f"repeat {rep}: graph {graph_s[-1]:.2f} s, graph + QK {both_s[-1]:.2f} s")
    graph_med, both_med = statistics.median(graph_s), statistics.median(both_s)
    print(json.dumps({
        "model": model.name, "dtype": str(model.dtype), "prompt": prompt, "threads": torch.get_num_threads(),
        "max_feature_nodes": args.max_feature_nodes, "batch_size": args.batch_size, "qk_nodes": len(cards),
        "heads": {node: card["head"] for node, card in cards.items()},
        "graph_s": graph_s, "graph_qk_s": both_s, "qk_s": qk_s,
        "graph_median_s": round(graph_med, 3), "graph_qk_median_s": round(both_med, 3),
        "qk_median_s": round(statistics.median(qk_s), 3), "ratio": round(both_med / graph_med, 3),
        "ratio_of_minima": round(min(both_s) / min(graph_s), 3),
        "goal": GOAL, "load_before": load_before, "load_after": os.getloadavg(),
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
