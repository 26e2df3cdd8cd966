"""Which experts of a mixture-of-experts model serve which domain, and what removing them costs each domain.

Routing is read from the model's routing sites (``blocks.{L}.mlp.hook_expert_ids``, see
:mod:`interplab.core.model.routing`); an expert is removed by zeroing its output projection, so the router
still sends tokens to it and its share of the block's sum becomes zero (the resection of Monet, Park et al.,
ICLR 2025). Works on the Hugging Face MoE types whose experts module stacks the experts' weights
(``experts.down_proj`` ``[n_experts, ...]``: Mixtral, Qwen-MoE, OLMoE in transformers 5).

Example
-------
>>> usage = {d: expert_usage(model, texts[d]) for d in ("prose", "code")}   # [layers, experts] shares
>>> top = domain_experts(usage, "code", k=2)                                 # {layer: [experts]}
>>> ablation_losses(net, task, top)                                          # loss of each domain without them
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pandas as pd
import torch

from ..checks import check_int
from ..model.model import Model
from .tasks import TextTask


def expert_usage(model: Model, texts: Sequence[str], batch_size: int = 16) -> torch.Tensor:
    """The share of ``texts``' tokens routed to each expert, ``[moe layers, n_experts]`` (rows sum to 1).

    A token counts once for each of its top-k experts; padding is left out.

    >>> expert_usage(model, ["def f(x):"]).sum(1)
    tensor([1., 1.])
    """
    chosen = [s.name for s in sorted(model.parse_sites("expert_ids"), key=lambda s: s.layer)]
    logits = [name.replace("hook_expert_ids", "hook_router_logits") for name in chosen]
    acts = model.collect(list(texts), chosen + logits, batch_size=batch_size)
    n_experts = acts[logits[0]].shape[-1]
    counts = [torch.bincount(acts.flat(name).flatten().long(), minlength=n_experts).float() for name in chosen]
    usage = torch.stack(counts)
    return usage / usage.sum(1, keepdim=True)


def domain_experts(usage: Mapping[str, torch.Tensor], domain: str, k: int) -> dict[int, list[int]]:
    """Each layer's ``k`` experts most specific to ``domain``: the largest share of its tokens minus the largest
    share of any other domain's (``usage`` maps a domain to :func:`expert_usage`'s table).

    >>> domain_experts({"a": torch.tensor([[0.7, 0.3]]), "b": torch.tensor([[0.2, 0.8]])}, "a", k=1)
    {0: [0]}
    """
    if domain not in usage or len(usage) < 2:
        raise ValueError(f"domain={domain!r} must be one of at least two domains in usage: {', '.join(usage)}.")
    own = usage[domain]
    k = check_int("k", k, 1, own.shape[1])
    others = torch.stack([u for d, u in usage.items() if d != domain]).amax(0)
    specificity = own - others
    return {layer: specificity[layer].topk(k).indices.sort().values.tolist() for layer in range(own.shape[0])}


def _experts_weight(module: torch.nn.Module, layer: int) -> torch.nn.Parameter:
    blocks = getattr(getattr(module, "model", module), "layers", None)
    if blocks is not None and not 0 <= layer < len(blocks):
        raise ValueError(f"layer={layer} names no block of {type(module).__name__} (it has {len(blocks)}).")
    experts = getattr(blocks[layer].mlp, "experts", None) if blocks is not None else None
    weight = getattr(experts, "down_proj", None)
    if not isinstance(weight, torch.nn.Parameter):
        raise ValueError(
            f"{type(module).__name__} has no stacked experts at block {layer} (model.layers[{layer}].mlp.experts"
            ".down_proj [n_experts, ...]): removing experts works on Mixtral, Qwen-MoE and OLMoE types."
        )
    return weight


@contextmanager
def without_experts(module: torch.nn.Module, drop: Mapping[int, Sequence[int]]) -> Iterator[None]:
    """Inside the ``with``, the experts ``drop`` names (``{layer: [experts]}``) give zero; restored after.

    >>> with without_experts(net, {0: [2, 5]}):
    ...     loss = ablation_losses(net, task, {})
    """
    saved: list[tuple[torch.nn.Parameter, list[int], torch.Tensor]] = []
    for layer, experts in drop.items():
        weight = _experts_weight(module, layer)
        ids = [check_int("expert", e, 0, weight.shape[0] - 1) for e in experts]
        saved.append((weight, ids, weight.detach()[ids].clone()))
    try:
        with torch.no_grad():
            for weight, ids, _ in saved:
                weight[ids] = 0
        yield
    finally:
        with torch.no_grad():
            for weight, ids, values in saved:
                weight[ids] = values


def domain_losses(module: torch.nn.Module, task: TextTask, rows_N: torch.Tensor | None = None) -> dict[str, float]:
    """Each domain's mean next-byte loss on ``rows_N`` (default: the held-out rows) of ``task``."""
    rows_N = ~task.train_N if rows_N is None else rows_N
    losses = {}
    with torch.no_grad():
        for domain in task.domains:
            rows = rows_N & task.rows_of(domain)
            out: Any = module(task.inputs_NL[rows])
            logits = getattr(out, "logits", out)
            losses[domain] = float(
                torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), task.targets_N[rows].flatten())
            )
    return losses


def ablation_losses(module: torch.nn.Module, task: TextTask, drop: Mapping[int, Sequence[int]]) -> dict[str, float]:
    """How much each domain's held-out loss rises when the experts ``drop`` names are removed (nats)."""
    base = domain_losses(module, task)
    with without_experts(module, drop):
        removed = domain_losses(module, task)
    return {domain: removed[domain] - base[domain] for domain in task.domains}


def random_experts(
    n_experts: int, layers: Sequence[int], k: int, draws: int, seed: int = 0
) -> list[dict[int, list[int]]]:
    """``draws`` random choices of ``k`` experts at each of ``layers`` (the control for :func:`domain_experts`)."""
    gen = torch.Generator().manual_seed(seed)
    return [{layer: torch.randperm(n_experts, generator=gen)[:k].sort().values.tolist() for layer in layers}
            for _ in range(draws)]  # fmt: skip


def resection(
    module: torch.nn.Module, task: TextTask, usage: Mapping[str, torch.Tensor], k: int = 2, draws: int = 20,
    seed: int = 0,
) -> pd.DataFrame:  # fmt: skip
    """Remove each domain's top ``k`` experts per layer, then ``draws`` random sets of as many: the loss rises.

    One row per domain removed: ``own`` (its loss rise, nats), ``other`` (the largest rise of another domain),
    the same two averaged over the random sets (``own_random``, ``other_random``), the share of random sets whose
    ``own - other`` gap is smaller than the domain experts' (``beats_random``), and the experts removed.
    """
    layers = sorted(domain_experts(usage, task.domains[0], 1))
    n_experts = next(iter(usage.values())).shape[1]
    controls = random_experts(n_experts, layers, k, draws, seed)
    random_rises = [ablation_losses(module, task, drop) for drop in controls]
    rows = {}
    for domain in task.domains:
        top = domain_experts(usage, domain, k)
        rise = ablation_losses(module, task, top)
        own_r = [r[domain] for r in random_rises]
        other_r = [max(v for d, v in r.items() if d != domain) for r in random_rises]
        other = max(v for d, v in rise.items() if d != domain)
        beaten = [o - t < rise[domain] - other for o, t in zip(own_r, other_r, strict=True)]
        rows[domain] = {"own": rise[domain], "other": other, "own_random": sum(own_r) / draws,
                        "other_random": sum(other_r) / draws, "beats_random": sum(beaten) / draws,
                        "experts": top}  # fmt: skip
    return pd.DataFrame(rows).T


def selective(
    table: pd.DataFrame, domains: Sequence[str] | None = None, ratio: float = 2.0, least: float = 0.05,
    beats: float = 0.9,
) -> bool:  # fmt: skip
    """Monet's claim on :func:`resection`'s table, for ``domains`` (default all): removing a domain's experts raises
    its own loss by at least ``least`` nats and ``ratio`` times the others' rise, a gap larger than ``beats`` of
    the random sets give.

    >>> selective(experts.resection(net, task, usage), domains=["code"])
    True
    """
    table = table.loc[list(domains)] if domains is not None else table
    own, other = table["own"].astype(float), table["other"].astype(float)
    return bool(((own >= least) & (own >= ratio * other.clip(lower=0)) & (table["beats_random"] >= beats)).all())
