"""Learned positions: a soft position selector trained jointly with the DAS rotation (HyperDAS's first step).

Where a concept sits in the token sequence is often unknown. With ``fit(..., positions="learned")`` every
prompt shares one template (one token length), the source activations are read at every position, and
the intervention at each position ``p`` is the subspace swap scaled by the selector's weight
``softmax(w)[p]``: ``x_p + softmax(w)[p] * ((s_p - x_p) Q) Q^T``. ``w`` (one logit per position, fixed per
template) and the rotation are trained together by the same cross-entropy; the selector's temperature
falls over the first half of training so its mass gathers on a position. Inside the trace body only
tensors and torch run (remote-safe as :mod:`~interplab.core.das.intervene`).

Example
-------
>>> das = ilab.das.fit(model, pairs, "blocks.6.hook_resid_post", k=1, positions="learned")
>>> das.positions, das.selector                  # the argmax position; the selector's mass per position
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nnsight
import numpy as np
import torch

from ..memory.frozen import frozen_weights
from ..model.trace_ops import orthonormal, read_site, write_site
from ..views.charts import offline
from .intervene import evaluate, prepare, source_values
from .pairs import CounterfactualPairs, as_pairs, label_ids

if TYPE_CHECKING:
    from ..model.model import Model

LEARNED = "learned"


def template_length(model: Model, pairs: CounterfactualPairs) -> int:
    """The one token length every base and source prompt shares (the selector's positions); a clear error if not."""
    lengths: dict[int, str] = {}
    for text in [*pairs.base, *pairs.source]:
        lengths.setdefault(int(model.to_tokens(text)["attention_mask"].sum()), text)
    if len(lengths) != 1:
        shown = ", ".join(f"{n} ({t!r:.40})" for n, t in sorted(lengths.items()))
        raise ValueError(f"positions='learned' selects one position of one template, but the prompts have "
                         f"{len(lengths)} token lengths: {shown}. Give prompts of one template and length "
                         f"(group them by template, or pad them to one length).")  # fmt: skip
    return next(iter(lengths))


@dataclass
class AllPositions:
    """Base token ids [N, L] and source activations at every position [N, L, D] of one-template pairs."""

    site: str
    base_ids_NL: torch.Tensor
    source_NLD: torch.Tensor
    labels_N: torch.Tensor


def prepare_all(model: Model, pairs: CounterfactualPairs, site: str, length: int, batch_size: int = 16
                ) -> AllPositions:  # fmt: skip
    """Tokenise the base prompts and read the sources at every position (no-grad passes, stopped early)."""
    base = torch.stack([model.to_tokens(t)["input_ids"][0] for t in pairs.base])
    src = source_values(model, site, list(pairs.source), list(range(length)), batch_size)
    return AllPositions(site, base, src, label_ids(model, pairs.labels))


def soft_step(model: Model, prep: AllPositions, idx: torch.Tensor, A_DK: torch.Tensor, w_L: torch.Tensor,
              temperature: float) -> tuple[float, torch.Tensor, torch.Tensor]:  # fmt: skip
    """Loss and gradients (for ``A_DK`` and ``w_L``) of the selector-weighted interchange on pairs ``idx``."""
    device = model.device
    ids = prep.base_ids_NL[idx].to(device)
    src_NLD, labels_N = prep.source_NLD[idx].to(device), prep.labels_N[idx].to(device)
    envoy, io = model.envoy(prep.site)
    last, readout = model.block(model.n_layers - 1), model.readout
    leaves = [A_DK, w_L]
    A, w = A_DK.to(device), w_L.to(device)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    # the weights frozen (under the run lock): the backward saves only what the leaves' gradients need
    with (
        model.lock,
        frozen_weights(model.module),
        torch.enable_grad(),
        model.nn.trace(inputs, **model.trace_kwargs) as tracer,
    ):
        x = read_site(envoy, io)
        Q = orthonormal(A)
        weight_L = torch.softmax((w / temperature).float(), 0)
        b = x.float()
        delta = ((src_NLD.float() - b) @ Q) @ Q.T
        write_site(envoy, io, (b + weight_L[None, :, None] * delta).to(x.dtype))
        logits = readout(read_site(last, "output")[:, -1]).float()
        loss = torch.nn.functional.cross_entropy(logits.float(), labels_N)
        grads = torch.autograd.grad(loss, leaves)
        out = nnsight.save((loss.detach(), grads[0].detach(), grads[1].detach()))
        tracer.stop()
    loss, grad_A, grad_w = out
    return float(loss), grad_A.to("cpu"), grad_w.to("cpu")


def train_selector(model: Model, prep: AllPositions, A_DK: torch.Tensor, train_idx: torch.Tensor, lr: float,
                   epochs: int, batch_size: int, seed: int, progress: Any = None
                   ) -> tuple[torch.Tensor, list[float]]:  # fmt: skip
    """Adam on the rotation ``A_DK`` (in place) and the selector's logits, the temperature falling from 1 to 0.1
    over the first half of the steps and staying there (the rotation then trains where the mass is); returns the
    selector's final weights [L] (at temperature 0.1) and the losses."""
    length = prep.base_ids_NL.shape[1]
    w = torch.zeros(length, requires_grad=True)
    A_DK.requires_grad_(True)
    opt = torch.optim.Adam([{"params": [A_DK], "lr": lr}, {"params": [w], "lr": 0.1}])
    steps_per_epoch = -(-len(train_idx) // batch_size)
    total, losses = epochs * steps_per_epoch, list[float]()
    for step in range(total):
        epoch, offset = divmod(step, steps_per_epoch)
        order = train_idx[torch.randperm(len(train_idx), generator=torch.Generator().manual_seed(seed * 1000 + epoch))]
        temperature = 10 ** (-min(1.0, 2 * step / max(1, total - 1)))
        loss, grad_A, grad_w = soft_step(model, prep, order[offset * batch_size : (offset + 1) * batch_size], A_DK, w,
                                         temperature)  # fmt: skip
        opt.zero_grad()
        A_DK.grad, w.grad = grad_A, grad_w
        opt.step()
        losses.append(loss)
        if progress is not None:
            progress.update(1)
    A_DK.requires_grad_(False)
    return torch.softmax((w.detach() / 0.1).float(), 0), losses


def selector_positions(weights: Sequence[float] | torch.Tensor) -> list[int]:
    """The selector's argmax position as the one-element ``positions`` list a DAS result keeps."""
    return [int(torch.as_tensor(weights).argmax())]


@dataclass(repr=False)
class PositionSearch:
    """Brute force: the full-swap accuracy at each token position of one template (``best``: the highest)."""

    site: str
    iia: np.ndarray

    @property
    def best(self) -> int:
        return int(np.argmax(self.iia))

    def chart(self) -> Any:
        """Altair: full-swap accuracy per position."""
        import altair as alt
        import pandas as pd

        df = pd.DataFrame({"position": range(len(self.iia)), "full swap": self.iia})
        bars = alt.Chart(df).mark_bar().encode(x="position:O", y=alt.Y("full swap:Q", scale=alt.Scale(domain=[0, 1])))
        return offline(bars.properties(title=f"full swap per position at {self.site}", width=300, height=180))

    def __repr__(self) -> str:
        return f"PositionSearch({self.site}: full swap per position {np.round(self.iia, 2).tolist()}, best {self.best})"


def position_search(model: Model, pairs: Any, site: str, batch_size: int = 16) -> PositionSearch:
    """Swap the whole site vector at each position of a one-template pair set in turn (no training): where the
    concept can be swapped, the answer a learned selector should find.

    >>> ilab.das.position_search(model, pairs, "blocks.2.hook_resid_post").best
    """
    pairs = as_pairs(model, pairs)
    site = model.parse_site(site).name
    length = template_length(model, pairs)
    every = torch.arange(len(pairs))
    full = [evaluate(model, prepare(model, pairs, site, [p], batch_size), every, None, batch_size)["iia"]
            for p in range(length)]  # fmt: skip
    return PositionSearch(site, np.array(full))
