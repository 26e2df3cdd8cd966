"""Every explanation of a tiny Boolean MLP, enumerated: circuits (edge masks) and causally aligned algorithms.

For an MLP of ``nn.Linear`` layers with ReLU between them (a few neurons, trained on a Boolean task), the
two strategies of Méloux et al. (ICLR 2025, "Everything, everywhere, all at once: is mechanistic
interpretability identifiable?") can be run to the end:

* where-then-what, :func:`circuits`: every subset of the weights (an edge mask, biases kept) is evaluated at
  once, vectorised; a circuit *replicates* the behaviour when it gives the task's answer on every input.
* what-then-where, :func:`aligned_algorithms`: every two-gate algorithm ``out = g3(g1(x), g2(x))`` that computes
  the task, every mapping of its two intermediate variables to disjoint neuron sets of a hidden layer, judged
  by interchange interventions on every (base, source) pair of inputs; an algorithm is *aligned* when one
  mapping agrees on all of them.

Example
-------
>>> counts = circuits(net, ilab.train.boolean("xor"))
>>> counts.replicating, counts.minimal
>>> aligned = aligned_algorithms(net, ilab.train.boolean("xor"))
>>> len(aligned.algorithms)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .tasks import Task

#: Names of the two-input gates by truth table (bit ``2a + b`` holds the output for inputs ``a, b``).
GATES = {0: "FALSE", 1: "NOR", 2: "NOT a AND b", 3: "NOT a", 4: "a AND NOT b", 5: "NOT b", 6: "XOR", 7: "NAND",
         8: "AND", 9: "XNOR", 10: "b", 11: "NOT a OR b", 12: "a", 13: "a OR NOT b", 14: "OR", 15: "TRUE"}  # fmt: skip
#: The most weights :func:`circuits` enumerates masks of (2**22 masks).
MAX_EDGES = 22


def linear_layers(module: nn.Module) -> list[nn.Linear]:
    """The ``nn.Linear`` layers of an MLP in order; an error when there are none."""
    layers = [m for m in module.modules() if isinstance(m, nn.Linear)]
    if not layers:
        raise ValueError(f"{type(module).__name__} has no nn.Linear layers: this enumerates masks of an MLP's weights.")
    return layers


def _forward_masked(
    layers: list[nn.Linear], x_NI: torch.Tensor, masks_CE: torch.Tensor, keep: dict[int, torch.Tensor] | None = None
) -> torch.Tensor:
    """Logits [C, N, out] of the MLP with each of C edge masks applied to its weights."""
    h_CNI = x_NI.expand(masks_CE.shape[0], *x_NI.shape)
    start = 0
    for i, layer in enumerate(layers):
        w = layer.weight.detach()
        size = w.numel()
        mask_COI = masks_CE[:, start : start + size].view(-1, *w.shape)
        start += size
        h_CNI = torch.einsum("cni,coi->cno", h_CNI, w * mask_COI) + layer.bias.detach()
        if i < len(layers) - 1:
            h_CNI = h_CNI.relu()
    return h_CNI


@dataclass
class CircuitCount:
    """How many edge masks of ``n_edges`` weights give the task's answer on every input (``replicating``), and how
    many of those lose it when any one more edge goes (``minimal``)."""

    n_edges: int
    replicating: int
    minimal: int
    evaluations: int


def circuits(module: nn.Module, task: Task, chunk: int = 1 << 15) -> CircuitCount:
    """Count the circuits (weight subsets, biases kept) of an MLP that replicate ``task`` on all its inputs."""
    layers = linear_layers(module)
    n_edges = sum(layer.weight.numel() for layer in layers)
    if n_edges > MAX_EDGES:
        raise ValueError(f"{type(module).__name__} has {n_edges} weights: 2**{n_edges} masks is too many to enumerate "
                         f"(at most {MAX_EDGES} weights).")  # fmt: skip
    x_NI = task.inputs_NL.float()
    bits_E = 1 << torch.arange(n_edges)
    ok = np.zeros(1 << n_edges, dtype=bool)
    with torch.no_grad():
        for start in range(0, 1 << n_edges, chunk):
            ids = torch.arange(start, min(start + chunk, 1 << n_edges))
            masks_CE = ((ids[:, None] & bits_E) > 0).float()
            answers = _forward_masked(layers, x_NI, masks_CE).argmax(-1)
            ok[start : start + len(ids)] = (answers == task.targets_N).all(-1).numpy()
    index = np.arange(1 << n_edges)
    minimal = ok.copy()
    for e in range(n_edges):
        has = (index >> e) & 1 == 1
        minimal &= ~(has & ok[index ^ (1 << e)])
    return CircuitCount(n_edges, int(ok.sum()), int(minimal.sum()), (1 << n_edges) * len(x_NI))


def _table(fn_bits: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A two-input Boolean function given by its 4-bit truth table (bit ``2a + b``), applied elementwise."""
    return (fn_bits >> (2 * a + b)) & 1


@dataclass
class Alignment:
    """The algorithms ``(g1, g2, g3)`` (4-bit truth tables) aligned with the network, and every aligned
    ``(algorithm, hidden layer, neurons of g1, neurons of g2)``."""

    algorithms: list[tuple[int, int, int]]
    mappings: list[tuple[tuple[int, int, int], int, tuple[int, ...], tuple[int, ...]]]
    candidates: int

    def names(self) -> list[str]:
        """Each aligned algorithm in words: ``g3(g1, g2)`` by :data:`GATES`."""
        return [f"{GATES[g3]}({GATES[g1]}, {GATES[g2]})" for g1, g2, g3 in self.algorithms]


def candidate_algorithms(task: Task) -> list[tuple[int, int, int]]:
    """Every ``(g1, g2, g3)`` with ``g3(g1(x), g2(x))`` the task's answer on every input of a two-input task:
    ``g1 < g2`` distinct gates, neither constant nor the task (or its negation), ``g3`` reading both."""
    if task.inputs_NL.shape[1] != 2:
        raise ValueError(f"{task.name} has {task.inputs_NL.shape[1]} inputs; the two-gate algorithms need two.")
    a, b = task.inputs_NL[:, 0].numpy(), task.inputs_NL[:, 1].numpy()
    want = task.targets_N.numpy()
    task_tables = {t for t in range(16) if (_table(t, a, b) == want).all() or (_table(t, a, b) == 1 - want).all()}
    gates = [g for g in range(1, 15) if g not in task_tables]  # neither constant nor the task itself
    both = [g for g in range(16) if _depends_on_both(g)]
    return [(g1, g2, g3) for g1, g2 in itertools.combinations(gates, 2) for g3 in both
            if (_table(g3, _table(g1, a, b), _table(g2, a, b)) == want).all()]  # fmt: skip


def _depends_on_both(gate: int) -> bool:
    """Whether a two-input truth table changes with each of its inputs (a real two-step algorithm's last gate)."""
    u, v = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])
    out = _table(gate, u, v)
    return bool((out != _table(gate, 1 - u, v)).any() and (out != _table(gate, u, 1 - v)).any())


def _hidden(layers: list[nn.Linear], x_NI: torch.Tensor, upto: int) -> torch.Tensor:
    h = x_NI
    for layer in layers[: upto + 1]:
        h = layer(h).relu()
    return h


def _finish(layers: list[nn.Linear], h: torch.Tensor, after: int) -> torch.Tensor:
    for i, layer in enumerate(layers[after + 1 :], start=after + 1):
        h = layer(h)
        if i < len(layers) - 1:
            h = h.relu()
    return h


def _aligned(layers: list[nn.Linear], task: Task, alg: tuple[int, int, int], layer: int,
             sets: tuple[tuple[int, ...], tuple[int, ...]]) -> bool:  # fmt: skip
    """Whether every interchange intervention on either variable gives the algorithm's answer."""
    x_NI = task.inputs_NL.float()
    acts_NH = _hidden(layers, x_NI, layer)
    a, b = task.inputs_NL[:, 0].numpy(), task.inputs_NL[:, 1].numpy()
    values = [_table(alg[0], a, b), _table(alg[1], a, b)]
    n = len(x_NI)
    base, source = np.repeat(np.arange(n), n), np.tile(np.arange(n), n)
    for var, neurons in enumerate(sets):
        patched = acts_NH[base].clone()
        patched[:, list(neurons)] = acts_NH[source][:, list(neurons)]
        net = _finish(layers, patched, layer).argmax(-1).numpy()
        h = [values[0][base], values[1][base]]
        h[var] = values[var][source]
        if not (net == _table(alg[2], h[0], h[1])).all():
            return False
    return True


def _neuron_sets(width: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Every pair of disjoint non-empty neuron sets of a layer of ``width`` neurons."""
    out = []
    for labels in itertools.product((0, 1, 2), repeat=width):  # 0: neither, 1: g1's, 2: g2's
        first = tuple(i for i, lab in enumerate(labels) if lab == 1)
        second = tuple(i for i, lab in enumerate(labels) if lab == 2)
        if first and second:
            out.append((first, second))
    return out


def aligned_algorithms(module: nn.Module, task: Task) -> Alignment:
    """The two-gate algorithms of a two-input task aligned with an MLP at some hidden layer by interchange
    interventions; an algorithm counts once however many mappings align it."""
    layers = linear_layers(module)
    candidates = candidate_algorithms(task)
    mappings = []
    with torch.no_grad():
        for layer in range(len(layers) - 1):
            for sets in _neuron_sets(layers[layer].out_features):
                mappings += [(alg, layer, *sets) for alg in candidates if _aligned(layers, task, alg, layer, sets)]
    algorithms = sorted({m[0] for m in mappings})
    return Alignment(algorithms, mappings, len(candidates))


def non_identifiable(counts: list[CircuitCount], alignments: list[Alignment]) -> bool:
    """The paper's finding for a set of models: for most of them (more than half) more than one circuit replicates
    the behaviour and more than one algorithm is causally aligned.

    >>> non_identifiable([circuits(net, task)], [aligned_algorithms(net, task)])
    True
    """
    if len(counts) != len(alignments) or not counts:
        raise ValueError(
            f"Give one circuit count and one alignment per model; got {len(counts)} and {len(alignments)}."
        )
    both = sum(c.replicating > 1 and len(a.algorithms) > 1 for c, a in zip(counts, alignments, strict=True))
    return 2 * both > len(counts)
