"""A compact proof of a one-hidden-layer MLP's accuracy on a finite group's table, from its equivariance.

The network is ``f(a, b) = U ReLU(W_l[a] + W_r[b] + c) + d`` (:class:`GroupMLP`). The explanation (after
Wu, Jaburi, Drori and Gross, ICLR 2025, "Towards a unified and verified understanding of group-operation
networks") is that it is approximately equivariant in its left argument: for each element ``g`` a permutation
``P_g`` of the hidden neurons with ``W_l[g y] ≈ P_g W_l[y]``, ``W_r ≈ P_g W_r``, ``c ≈ P_g c`` and the readout's
rows permuted with its columns translated by ``g``. If that held exactly, ``f(g, b)`` would be ``f(e, b)`` with
its classes translated by ``g``, so the ``|G|`` pairs ``(e, b)`` would decide all ``|G|^2``.

:func:`prove` turns that into a sound bound: it evaluates the network on the pairs ``(e, b)`` only, bounds the
logit error of every other pair by the equivariance residuals (ReLU is 1-Lipschitz, so a neuron moves at most
by its preactivation's residual, weighted by its readout), and counts a pair proven when its reference margin
survives the error bounds of its classes. The bound (proven pairs / ``|G|^2``) never exceeds the accuracy;
its cost (multiply-adds, counted) is below the brute-force forward pass on every pair.
:func:`find_permutations` finds the ``P_g`` by matching neurons (Hungarian), the search, not part of the proof.

Example
-------
>>> net = GroupMLP("S4", hidden=96, tied=True)
>>> ilab.train.tiny(net, ilab.train.group_table("S4"), steps=1500, lr=1e-2, weight_decay=0.1)
>>> proof = prove(net, find_permutations(net))
>>> proof.bound, brute_force(net).accuracy, proof.cost < brute_force(net).cost
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .tasks import group_elements

#: The margin a proven pair keeps beyond its error bounds, for the float32 rounding of the network's forward pass.
SLACK = 1e-4


def multiplication_table(group: str) -> torch.Tensor:
    """``T[a, b]`` the index of ``a * b`` (the order of :func:`~interplab.core.train.tasks.group_elements`)."""
    elements, product = group_elements(group)
    n = len(elements)
    return torch.tensor([[product(a, b) for b in range(n)] for a in range(n)])


def _identity(table_GG: torch.Tensor) -> int:
    return int((table_GG == torch.arange(len(table_GG))).all(1).nonzero()[0])


class GroupMLP(nn.Module):
    """``f(a, b) = U ReLU(W_l[a] + W_r[b] + c) + d`` on token ids ``[batch, 2]``: logits over the group.

    ``tied`` ties the weights of neuron ``(x, k)`` (``hidden = |G| * channels``) to channel ``k``'s read
    through ``x``'s translation (a group convolution), plus a free part of the full shape times ``free_scale``
    (the whole weight when not tied): trained with weight decay the free part stays small, a symmetry-friendly
    parametrisation; the proof reads only the summed weights (:meth:`weights`) and is not told the structure.

    >>> GroupMLP("S4", hidden=96)(torch.tensor([[0, 1]])).shape
    torch.Size([1, 24])
    """

    translate_GG: torch.Tensor

    def __init__(self, group: str, hidden: int = 96, tied: bool = False, free_scale: float = 0.05, seed: int = 0):
        super().__init__()
        table_GG = multiplication_table(group)
        n = len(table_GG)
        if not isinstance(hidden, int) or hidden < 1 or (tied and hidden % n):
            need = f"a multiple of |{group}| = {n}" if tied else "a positive int"
            raise ValueError(f"hidden={hidden!r} must be {need}.")
        if not isinstance(free_scale, (int, float)) or not 0 <= free_scale <= 1:
            raise ValueError(f"free_scale={free_scale!r} must be a number in [0, 1]: the free part's weight.")
        self.group, self.n, self.hidden, self.tied = group, n, hidden, tied
        self.free_scale = free_scale if tied else 1.0
        gen = torch.Generator().manual_seed(seed)
        self.left = nn.Parameter(torch.randn(n, hidden, generator=gen) / 2)
        self.right = nn.Parameter(torch.randn(n, hidden, generator=gen) / 2)
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.readout = nn.Parameter(torch.randn(hidden, n, generator=gen) / hidden**0.5)
        self.out_bias = nn.Parameter(torch.zeros(n))
        if tied:
            k = hidden // n
            inverse = (table_GG == _identity(table_GG)).int().argmax(1)
            # neuron (x, k) reads element a through x^-1 a, and writes class z through x^-1 z
            self.register_buffer("translate_GG", table_GG[inverse], persistent=False)  # [x, a] -> x^-1 a
            self.chan_left = nn.Parameter(torch.randn(k, n, generator=gen))
            self.chan_right = nn.Parameter(torch.randn(k, n, generator=gen))
            self.chan_bias = nn.Parameter(torch.zeros(k))
            self.chan_readout = nn.Parameter(torch.randn(k, n, generator=gen) / hidden**0.5)

    def weights(self) -> tuple[torch.Tensor, ...]:
        """The effective ``(W_l [G, H], W_r [G, H], c [H], U [H, G], d [G])``."""
        s = self.free_scale
        w_l, w_r, c, u, d = s * self.left, s * self.right, s * self.bias, s * self.readout, self.out_bias
        if self.tied:
            k = self.hidden // self.n
            t = self.translate_GG  # [x, a]
            w_l = w_l + self.chan_left[:, t].permute(2, 1, 0).reshape(self.n, self.hidden)  # [a, (x, k)]
            w_r = w_r + self.chan_right.T[:, None, :].expand(self.n, self.n, k).reshape(self.n, self.hidden)
            c = c + self.chan_bias.repeat(self.n)
            u = u + self.chan_readout[:, t].permute(1, 0, 2).reshape(self.hidden, self.n)  # [(x, k), z]
        return w_l, w_r, c, u, d

    def forward(self, ids_BL: torch.Tensor) -> torch.Tensor:
        w_l, w_r, c, u, d = self.weights()
        return torch.relu(w_l[ids_BL[:, 0]] + w_r[ids_BL[:, 1]] + c) @ u + d


@dataclass
class Proof:
    """What :func:`prove` gives: ``proven_GG`` (pairs proven correct), ``bound`` (their fraction), ``cost``
    (multiply-adds of the proof: the forward pass on the ``(e, b)`` pairs and the weight checks, both in
    ``cost_parts``), and ``error_GG`` (each translated class's logit error bound, per element and class)."""

    proven_GG: torch.Tensor
    error_GG: torch.Tensor
    cost_parts: dict[str, int]

    @property
    def bound(self) -> float:
        """The proven lower bound on accuracy over every pair."""
        return float(self.proven_GG.float().mean())

    @property
    def cost(self) -> int:
        """The proof's multiply-adds in all."""
        return sum(self.cost_parts.values())


@dataclass
class BruteForce:
    """The accuracy over every pair by running them all, and that pass's multiply-adds."""

    accuracy: float
    correct_GG: torch.Tensor
    cost: int


def _forward_cost(n_pairs: int, hidden: int, n_classes: int) -> int:
    """Multiply-adds of the forward pass on ``n_pairs``: preactivations (two adds per neuron) and the readout."""
    return n_pairs * (2 * hidden + hidden * n_classes + n_classes)


def brute_force(net: GroupMLP) -> BruteForce:
    """Run every pair ``(a, b)`` and compare the answer with ``a * b``."""
    table_GG = multiplication_table(net.group)
    n = net.n
    pairs = torch.cartesian_prod(torch.arange(n), torch.arange(n))
    with torch.no_grad():
        correct_GG = (net(pairs).argmax(-1) == table_GG.flatten()).view(n, n)
    return BruteForce(float(correct_GG.float().mean()), correct_GG, _forward_cost(n * n, net.hidden, n))


def _check_permutations(net: GroupMLP, perms_GH: torch.Tensor) -> torch.Tensor:
    perms_GH = torch.as_tensor(perms_GH)
    if perms_GH.shape != (net.n, net.hidden):
        raise ValueError(f"perms must be [|G|, hidden] = [{net.n}, {net.hidden}], got {tuple(perms_GH.shape)}.")
    if not (perms_GH.sort(1).values == torch.arange(net.hidden)).all():
        raise ValueError("perms must hold one permutation of the hidden neurons per group element (row).")
    return perms_GH.long()


def prove(net: GroupMLP, perms_GH: torch.Tensor) -> Proof:
    """A lower bound on ``net``'s accuracy over every pair, from its left-equivariance under ``perms_GH``
    (row ``g``: neuron ``i`` of the reference goes to neuron ``perms_GH[g, i]``), sound whatever the perms.

    Pair ``(a, b)``'s class ``a z`` differs from the reference ``(e, b)``'s class ``z`` by at most
    ``E[a, z] = sum_i |U[P_a i, a z]| eps_i(a) + sum_i |U[P_a i, a z] - U[i, z]| max_b h_e[b, i] + |d[a z] - d[z]|``
    with ``eps_i(a) = |W_l[a, P_a i] - W_l[e, i] + c[P_a i] - c[i]| + max_b |W_r[b, P_a i] - W_r[b, i]|``. The
    answer of ``(a, b)`` is class ``a b``, the translate of the reference's answer ``b``: proven when
    ``z_e[b, b] - E[a, b] > z_e[b, z] + E[a, z] + SLACK`` for every other ``z`` (``SLACK`` covers float32
    rounding of the network's own forward pass).

    >>> prove(net, find_permutations(net)).bound
    """
    perms_GH = _check_permutations(net, perms_GH)
    table_GG = multiplication_table(net.group)
    n, hidden, e = net.n, net.hidden, _identity(table_GG)
    with torch.no_grad():
        w_l, w_r, c, u, d = (t.detach().double() for t in net.weights())
        h_e_GH = torch.relu(w_l[e] + w_r + c)  # the reference pairs (e, b)
        z_e_GG = h_e_GH @ u + d
        h_max_H = h_e_GH.max(0).values
        left_GH = (w_l.gather(1, perms_GH) - w_l[e] + c[perms_GH] - c).abs()
        right_GH = (w_r[:, perms_GH] - w_r[:, None, :]).abs().amax(0)  # [g, i]: max over b
        eps_GH = left_GH + right_GH
        u_moved_GHG = u[perms_GH[:, :, None], table_GG[:, None, :]]  # [a, i, z] = U[P_a i, a z]
        error_GG = torch.einsum("aiz,ai->az", u_moved_GHG.abs(), eps_GH)
        error_GG += torch.einsum("aiz,i->az", (u_moved_GHG - u).abs(), h_max_H)
        error_GG += (d[table_GG] - d).abs()
        # pair (a, b): answer b at the reference, every rival z (b excluded by -inf)
        low_GG = z_e_GG.diagonal()[None, :] - error_GG  # [a, b]
        rivals_GGG = z_e_GG[None, :, :] + error_GG[:, None, :]  # [a, b, z]
        rivals_GGG[:, torch.arange(n), torch.arange(n)] = -torch.inf
        proven_GG = low_GG > rivals_GGG.amax(-1) + SLACK
    parts = {"forward (e, b)": _forward_cost(n, hidden, n),
             "equivariance residuals": n * hidden * (2 + n),
             "error bounds": n * n * (3 * hidden + 1),
             "margins": n * n * n}  # fmt: skip
    return Proof(proven_GG, error_GG.float(), parts)


def find_permutations(net: GroupMLP) -> torch.Tensor:
    """For each element ``g`` the neuron permutation ``P_g`` matching the network to itself translated by ``g``
    (Hungarian on the squared distance of each neuron's left column read through ``g``, right column, bias and
    readout row written through ``g``): ``[|G|, hidden]``. The search for the explanation, not the proof.
    """
    from scipy.optimize import linear_sum_assignment

    table_GG = multiplication_table(net.group)
    with torch.no_grad():
        w_l, w_r, c, u, _ = (t.detach().double() for t in net.weights())
        ref_HF = torch.cat([w_l.T, w_r.T, c[:, None], u], 1)
        perms = []
        for g in range(net.n):
            moved_HF = torch.cat([w_l[table_GG[g]].T, w_r.T, c[:, None], u[:, table_GG[g]]], 1)
            cost_HH = torch.cdist(ref_HF, moved_HF)  # [i, j]: reference neuron i against neuron j moved
            perms.append(linear_sum_assignment(cost_HH.numpy())[1])
    return torch.as_tensor(np.stack(perms))


def claim(proof: Proof, brute: BruteForce, level: float = 0.5) -> dict[str, float | bool]:
    """The paper's claim for one network: the bound is sound (every proven pair is answered correctly, so it is
    at most the accuracy), non-vacuous (at least ``level``) and cheaper than brute force (multiply-adds).

    >>> claim(prove(net, find_permutations(net)), brute_force(net))["holds"]
    True
    """
    if not 0 < level <= 1:
        raise ValueError(f"level={level!r} must be a fraction in (0, 1] of the pairs.")
    sound = bool((proof.proven_GG <= brute.correct_GG).all()) and proof.bound <= brute.accuracy
    out: dict[str, float | bool] = {
        "bound": proof.bound,
        "accuracy": brute.accuracy,
        "cost ratio": proof.cost / brute.cost,
        "sound": sound,
        "non_vacuous": proof.bound >= level,
        "cheaper": proof.cost < brute.cost,
    }
    out["holds"] = bool(out["sound"] and out["non_vacuous"] and out["cheaper"])
    return out
