"""The ICL-transition notebook's network and claims (after Reddy, ICLR 2024; Chan et al., NeurIPS 2022).

:class:`ICLNet` reads a :func:`~interplab.core.train.tasks.bursty_icl` row as fixed random vectors (each item and
label token one Gaussian vector, not trained, as the paper's class means are; without its within-class noise)
beside a one-hot position, runs two attention-only layers and answers with a label: every item token's logit is
:data:`ITEM_LOGIT`, so the answer is always a label. :data:`SITES` names its sites for
:func:`interplab.load_model`. :func:`transition` and :func:`ablation` are the notebook's claims as plain dicts
with ``holds`` (a test shows them failing when an untrained network replaces the trained ones).

Example
-------
>>> task = ilab.train.bursty_icl(1024, pool=2048, n_labels=32, n_pairs=8, burst=4)
>>> net = ilab.train.icl.ICLNet(task)
>>> model = ilab.load_model(net, sites=ilab.train.icl.SITES, tokenizer=task.vocab)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ..checks import check_int
from ..model.model import Edit, Model
from .measures import head_ablation
from .nets import AttnOnlyBlock
from .tasks import Task

#: The logit of every item token: the network answers with a label.
ITEM_LOGIT = -30.0
#: Sites of :class:`ICLNet` for :func:`interplab.load_model` (``sites=``).
SITES = {
    "hook_embed": "embed",
    "blocks.{L}.hook_resid_post": "blocks.{L}",
    "blocks.{L}.attn.hook_z": "blocks.{L}.attn.out:input",
    "blocks.{L}.hook_attn_out": "blocks.{L}.attn",
    "unembed": "unembed",
}
#: An accuracy counts as high at least this much above chance (1 / n_labels) and above the other end's model.
MARGIN = 0.5


class FixedVectors(nn.Module):
    """Each token a fixed random vector of ``dim`` (drawn from ``seed``; a buffer, not trained, not saved), then a
    one-hot of its position: width ``dim + n_positions``."""

    table: torch.Tensor
    positions: torch.Tensor

    def __init__(self, n_tokens: int, dim: int, n_positions: int, seed: int = 0):
        super().__init__()
        table = torch.randn(n_tokens, dim, generator=torch.Generator().manual_seed(seed)) / dim**0.5
        self.register_buffer("table", table, persistent=False)
        self.register_buffer("positions", torch.eye(n_positions), persistent=False)

    def forward(self, ids_BL: torch.Tensor) -> torch.Tensor:
        pos_BLP = self.positions[: ids_BL.shape[1]].expand(*ids_BL.shape, -1)
        return torch.cat([self.table[ids_BL], pos_BLP], -1)


class LabelReadout(nn.Module):
    """Logits of the labels (the last ``n_labels`` tokens) from the stream; every item token's is :data:`ITEM_LOGIT`."""

    def __init__(self, d: int, n_tokens: int, n_labels: int):
        super().__init__()
        self.labels = nn.Linear(d, n_labels)
        self.out_features, self.n_items = n_tokens, n_tokens - n_labels

    def forward(self, x_BLD: torch.Tensor) -> torch.Tensor:
        return nn.functional.pad(self.labels(x_BLD), (self.n_items, 0), value=ITEM_LOGIT)


class ICLNet(nn.Module):
    """Two attention-only layers over fixed item vectors and one-hot positions, sized for a ``bursty_icl`` task.

    >>> task = ilab.train.bursty_icl(64, pool=256, n_labels=32, n_pairs=8, burst=4)
    >>> ICLNet(task)(task.inputs_NL[:2]).shape
    torch.Size([2, 17, 288])
    """

    def __init__(self, task: Task, dim: int = 27, n_heads: int = 1, n_layers: int = 2, seed: int = 0):
        super().__init__()
        if not isinstance(task, Task) or task.name != "bursty_icl":
            raise ValueError(
                f"ICLNet reads a bursty_icl task (ilab.train.bursty_icl), got {getattr(task, 'name', task)!r}."
            )
        n_positions = task.inputs_NL.shape[1]
        width = check_int("dim", dim, 1) + n_positions
        n_heads = check_int("n_heads", n_heads, 1, width)
        if width % n_heads:
            raise ValueError(f"n_heads={n_heads} does not divide the width {width} (dim {dim} + {n_positions} "
                             f"positions): choose one of {[h for h in range(1, 9) if width % h == 0]}.")  # fmt: skip
        self.n_heads, self.max_positions = n_heads, n_positions
        self.embed = FixedVectors(len(task.vocab), dim, n_positions, seed)
        self.blocks = nn.ModuleList(AttnOnlyBlock(width, n_heads) for _ in range(check_int("n_layers", n_layers, 1)))
        self.unembed = LabelReadout(width, len(task.vocab), task.settings["n_labels"])

    def forward(self, ids_BL: torch.Tensor) -> torch.Tensor:
        x_BLD = self.embed(ids_BL)
        for block in self.blocks:
            x_BLD = block(x_BLD)
        return self.unembed(x_BLD)


def query_head_ablation(model: Model, layer: int, head: int) -> Edit:
    """An ``edit`` for :meth:`Model.logits` that zeroes one head's ``attn.hook_z`` slice at the last position (the
    query's), where the answer is read; the head still writes at every other position.

    >>> ilab.train.measures.accuracy(model, task, edit=query_head_ablation(model, 1, 0))
    """
    return head_ablation(model, layer, head, last_only=True)


def _high(acc: float, chance: float, other: float) -> bool:
    return acc >= chance + MARGIN and acc >= other + MARGIN


def transition(icl: Mapping[int, float], iwl: Mapping[int, float], n_labels: int) -> dict[str, Any]:
    """The transition claim from accuracies by task diversity (``icl``: novel classes, labels only in the context;
    ``iwl``: trained classes absent from the context): in-context accuracy high at the highest diversity and not
    at the lowest, in-weights accuracy the other way round (high: :data:`MARGIN` above chance ``1 / n_labels``
    and above the other end's model; not: less than :data:`MARGIN` above chance); ``holds`` is all of them.

    >>> transition({16: 0.04, 1024: 0.96}, {16: 1.0, 1024: 0.05}, n_labels=32)["holds"]
    True
    """
    if sorted(icl) != sorted(iwl) or len(icl) < 2:
        raise ValueError(f"icl and iwl give accuracies at the same diversities (at least 2), got {sorted(icl)} and "
                         f"{sorted(iwl)}.")  # fmt: skip
    low, high = min(icl), max(icl)
    chance = 1 / check_int("n_labels", n_labels, 2)
    checks = {
        "in-context learning at high diversity": _high(icl[high], chance, icl[low]),
        "no in-context learning at low diversity": icl[low] < chance + MARGIN,
        "in-weights learning at low diversity": _high(iwl[low], chance, iwl[high]),
        "no in-weights learning at high diversity": iwl[high] < chance + MARGIN,
    }
    return {**checks, "holds": all(checks.values())}


def ablation(icl: float, icl_ablated: float, icl_control: float, iwl: float, iwl_ablated: float,
             n_labels: int) -> dict[str, Any]:  # fmt: skip
    """The ablation claim: ablating the induction head takes in-context accuracy (of the high-diversity model) to
    near chance (within ``MARGIN / 2``) from high, ablating the control head does not (it stays high), and the
    in-weights accuracy of the low-diversity model stays high under the same ablation; ``holds`` is all of them.

    >>> ablation(0.96, 0.05, 0.95, iwl=1.0, iwl_ablated=0.99, n_labels=32)["holds"]
    True
    """
    chance = 1 / check_int("n_labels", n_labels, 2)
    checks = {
        "in-context learning without ablation": icl >= chance + MARGIN,
        "ablating the induction head removes it": icl_ablated <= chance + MARGIN / 2,
        "ablating the control head keeps it": icl_control >= chance + MARGIN,
        "in-weights learning survives the ablation": iwl >= chance + MARGIN and iwl_ablated >= chance + MARGIN,
    }
    return {**checks, "holds": all(checks.values())}
