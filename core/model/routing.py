"""Mixture-of-experts routing sites: the router found under each block, read like any other site.

A MoE block (Mixtral's ``mlp``, GraniteMoE's ``block_sparse_moe``, Llama 4's ``feed_forward``) holds a
router module that maps each token to expert logits and picks the top-k experts. The router's class is the
one Hugging Face records for ``output_router_logits`` (``_can_record_outputs["router_logits"]``, which also
says which element of the router's output tuple is the logits); failing that, a child whose class name holds
``Router``. Its output on one token says its layout (:func:`router_layout`, :data:`READS`): ``(logits, weights,
indices, ...)`` (Mixtral, Qwen-MoE, OLMoE, GPT-OSS, DeepSeek-V3, GraniteMoE, PhiMoE, Qwen3-Next; Zaya, whose logits
have one class more, "no expert", read as expert 0 with weight 0), ``(dense scores, logits)`` (Llama 4, whose chosen
experts are the top-k of its logits), logits last after the router's bookkeeping (JetMoE: the chosen experts are the
top-k of the logits, their weights its softmax) and a product-key MoE's ``(output, logits [2, tokens, keys])`` (Doge:
:func:`.trace_ops.product_keys` ranks the experts by their two keys' summed scores).
:func:`with_router` adds the routing sites to a family:

* ``blocks.{L}.mlp.hook_router_logits``: the logits [batch, pos, n_experts];
* ``blocks.{L}.mlp.hook_expert_ids``: the chosen experts [batch, pos, top_k];
* ``blocks.{L}.mlp.hook_expert_weights``: their weights in the block's sum [batch, pos, top_k];
* ``blocks.{L}.mlp.hook_expert_out``: every expert's output [batch, pos, n_experts * d_model], where the experts
  module gives them apart (Llama 4 runs every expert on its score-scaled tokens and stacks the outputs).

All are read-only and exist only at the layers that have a router (DeepSeek-V3's first layers are dense): the
family's ``layer_kinds`` lists them in those blocks alone, as it lists each block's other kinds.
The other types' experts modules (transformers 5 fuses a block's experts into stacked weights) take the chosen
experts and return their weighted sum, so no per-expert output exists there as a module output to read.

Example
-------
>>> model = ilab.load_model(mixtral)
>>> acts = model.collect(["The cat sat."], ["router_logits", "expert_ids"])
>>> acts["blocks.0.mlp.hook_expert_ids"].shape   # [batch, pos, top_k]
torch.Size([1, 5, 2])
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import re
from collections.abc import Sequence
from typing import Any

import torch

from .derive import Skeleton
from .sites import KINDS, MIXER_KINDS, ROUTING_KINDS, Family, resolve, site_name

logger = logging.getLogger(__name__)

#: The MoE model types whose routing sites the tests check against ``output_router_logits``.
MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "gpt_oss", "deepseek_v3", "granitemoe", "phimoe",
             "qwen3_next", "llama4_text")  # fmt: skip
#: The name ending of a family that maps only the residual stream and the router (a type without a site table).
STREAM_FAMILY = "+routing"


def router_class(module: torch.nn.Module) -> tuple[type | None, int]:
    """The router class Hugging Face records ``router_logits`` from and the logits' index in its output tuple
    (``(None, 0)`` when the model records none)."""
    for sub in module.modules():
        recorders = getattr(sub, "_can_record_outputs", None)
        recorder = recorders.get("router_logits") if isinstance(recorders, dict) else None
        target = getattr(recorder, "target_class", None)
        if isinstance(target, type):
            return target, int(getattr(recorder, "index", 0) or 0)
    return None, 0


def _router_in(block: torch.nn.Module, cls: type | None) -> tuple[str, torch.nn.Module] | None:
    for name, sub in block.named_modules():
        if name and (isinstance(sub, cls) if cls is not None else type(sub).__name__.endswith("Router")):
            return name, sub
    return None


def find_routers(module: torch.nn.Module, layers: str) -> tuple[str, tuple[int, ...], torch.nn.Module, int] | None:
    """(the router's path inside a block, the layers whose blocks have one there, the first router, the logits'
    index in its output), or None for a model without routers."""
    cls, logits_index = router_class(module)
    found: list[tuple[int, str, torch.nn.Module]] = []
    for i, block in enumerate(resolve(module, layers)):
        hit = _router_in(block, cls)
        if hit is not None:
            found.append((i, *hit))
    if not found:
        return None
    _, path, first = found[0]
    return path, tuple(i for i, p, _ in found if p == path), first, logits_index


#: What each routing kind reads of a router's output, per layout (``{i}`` the logits' index, ``{k}`` the top k).
READS = {
    "triple": ("element.0", "element.2", "element.1"),  # (logits, weights, indices, ...)
    "scores": ("element.{i}", "topk.{i}.{k}.indices", "topk.0.{k}.values"),  # (dense scores, logits): Llama 4
    "gating": ("element.{i}", "topk.{i}.{k}.indices", "topk.{i}.{k}.softmax"),  # (..., logits): JetMoE
    "keys": ("keys.{i}.{k}.logits", "keys.{i}.{k}.indices", "keys.{i}.{k}.weights"),  # product keys: Doge
}


def routing_reads(block: torch.nn.Module, path: str, layout: str, logits_index: int, top_k: int,
                  widths: tuple[int, int], width: int) -> tuple[tuple[str, str, str, int], ...]:  # fmt: skip
    """``(kind, module path, io, width)`` of each routing kind for a router at ``path`` in ``block`` whose output has
    ``layout`` (a key of :data:`READS`) with its logits at element ``logits_index``; ``widths`` are the logits' width
    and the expert count. An ``experts`` module beside the router that takes only the tokens (one row block per
    expert, Llama 4) gives each expert's output."""
    reads = [io.format(i=logits_index, k=top_k) for io in READS[layout]]
    n_logits, n_experts = widths
    sizes = (n_logits, top_k, top_k)
    out = [(kind, path, io, size) for kind, io, size in zip(ROUTING_KINDS[:3], reads, sizes, strict=True)]
    experts = f"{path.rsplit('.', 1)[0]}.experts" if "." in path else "experts"
    # the class's forward: nnsight wraps the instance's; (self, hidden_states) takes the tokens alone
    if _resolves(block, experts) and len(inspect.signature(type(resolve(block, experts)).forward).parameters) == 2:
        out.append(("expert_out", experts, f"experts.{n_experts}", n_experts * width))
    return tuple(out)


def _router_output(module: torch.nn.Module, router: torch.nn.Module) -> Any:
    """The router's output on one token of the whole model (a forward hook: routers take other arguments too),
    or None on the meta device, where nothing runs."""
    weight = next(router.parameters(), None)
    if weight is None or weight.device.type == "meta":
        return None
    seen: list[Any] = []
    hook = router.register_forward_hook(lambda _m, _i, out: seen.append(out))
    try:
        with torch.no_grad():
            module(input_ids=torch.zeros(1, 1, dtype=torch.long, device=weight.device))
    finally:
        hook.remove()
    return seen[0] if seen else None


def router_layout(out: Any, logits_index: int, top_k: int, n_experts: int) -> tuple[str, int, str]:
    """(layout, the logits' width, why none fits) of a router's output on one token: ``"triple"`` (logits, weights,
    indices, ...: the logits may have one class more than the experts, Zaya's "no expert"), ``"scores"`` (dense
    scores, logits), ``"gating"`` (logits last after the router's own bookkeeping, JetMoE), ``"keys"`` (a product-key
    MoE's (output, logits [2, tokens, keys]), Doge). No output (the meta device): the layout its logits' index says."""
    if out is None:
        return ("triple" if logits_index == 0 else "scores"), n_experts, ""
    shapes = [tuple(o.shape) if isinstance(o, torch.Tensor) else type(o).__name__ for o in (
        out if isinstance(out, tuple) else (out,))]  # fmt: skip
    logits = out[logits_index] if isinstance(out, tuple) and len(out) > logits_index else None
    if not isinstance(logits, torch.Tensor):
        return "", 0, f"its router returns {shapes}, with no logits at element {logits_index}"
    ids = out[2] if logits_index == 0 and len(out) >= 3 else None
    chose = isinstance(ids, torch.Tensor) and not ids.dtype.is_floating_point and tuple(ids.shape) == (1, top_k)
    if chose and logits.dim() == 2 and logits.shape[-1] in (n_experts, n_experts + 1):
        return "triple", int(logits.shape[-1]), ""
    if tuple(logits.shape) == (1, n_experts) and logits_index > 0:
        return ("scores" if len(out) == 2 else "gating"), n_experts, ""
    if logits.dim() == 3 and logits.shape[0] == 2 and int(logits.shape[-1]) ** 2 <= n_experts:
        return "keys", 2 * int(logits.shape[-1]), ""
    return "", 0, f"its router's output {shapes} has none of the layouts of {', '.join(READS)} (see routing.py)"


def stream_family(model_type: str, skeleton: Skeleton) -> Family:
    """A family mapping only the residual stream around each block (for a MoE type without a site table), named
    with :data:`STREAM_FAMILY`, so the logit lens still checks the readout found (:mod:`.derive`). No ``hook_embed``:
    some types scale the embedding before the first block (GraniteMoE's ``embedding_multiplier``), so the
    embedding's output is not known to be the stream; block 0's ``hook_resid_pre`` is."""
    assert skeleton.layers is not None
    kinds = ("resid_pre", "resid_post")
    return Family(
        f"{model_type}{STREAM_FAMILY}", skeleton.layers, "", "", "", skeleton.final_norm or "",
        embed=skeleton.embed or "", attn="", mlp_norm="", down_proj="", unembed=skeleton.unembed or "lm_head",
        kinds=kinds, why_missing=f"interplab maps only the residual stream and the router of model_type "
        f"{model_type!r}; read its other modules through model.nn",
    )  # fmt: skip


def with_router(family: Family | None, module: Any, skeleton: Skeleton | None, config: Any) -> Family | None:
    """``family`` with its routing sites when the model's blocks hold a router (unchanged otherwise); a MoE type
    without a family gets :func:`stream_family` with them."""
    if not isinstance(module, torch.nn.Module) or skeleton is None or skeleton.layers is None:
        return family
    found = find_routers(module, family.layers if family is not None else skeleton.layers)
    if found is None:
        return family
    path, moe_layers, router, logits_index = found
    model_type = str(getattr(config, "model_type", "?"))
    top_k = _first_int(router, config, "top_k", "num_experts_per_tok", "moe_topk")
    weight = getattr(router, "weight", None)
    n_experts = _first_int(router, config, "num_experts", "num_local_experts", "n_routed_experts") or (
        int(weight.shape[0]) if weight is not None else 0
    )
    width = int(weight.shape[-1]) if weight is not None else int(getattr(config, "hidden_size", 0) or 0)
    layout, n_logits, problem = (
        ("", 0, f"no top_k or expert count on {type(router).__name__}") if not (top_k and n_experts and width)
        else router_layout(_router_output(module, router), logits_index, top_k, n_experts))  # fmt: skip
    if problem:
        logger.warning("model_type %r has a router at %s but no routing sites: %s.", model_type, path, problem)
        return family
    base = family if family is not None else stream_family(model_type, skeleton)
    kinds = tuple(base.kinds if base.kinds is not None else KINDS)
    block = resolve(module, f"{base.layers}.{moe_layers[0]}")
    if base.down_proj and not _resolves(block, base.down_proj):
        kinds = tuple(k for k in kinds if k != "mlp_post")  # the experts are fused: no one down projection
    reads = routing_reads(block, path, layout, logits_index, top_k, (n_logits, n_experts), width)
    routed = tuple(kind for kind, *_ in reads)
    blocks = range(len(resolve(module, base.layers)))
    own = base.layer_kinds or tuple(tuple(k for k in KINDS[1:] if k in kinds) for _ in blocks)
    per_layer = tuple(kinds_ + (routed if layer in moe_layers else ()) for layer, kinds_ in zip(blocks, own))
    return dataclasses.replace(base, kinds=kinds + routed, router=path, routing=reads, layer_kinds=per_layer)


def _first_int(router: torch.nn.Module, config: Any, *names: str) -> int:
    """The first positive integer among ``names`` on the router, then on the config (0 when none is)."""
    for source in (router, config):
        for name in names:
            value = getattr(source, name, None)
            if isinstance(value, int) and value > 0:
                return value
    return 0


def _resolves(root: Any, path: str) -> bool:
    try:
        resolve(root, path)
        return True
    except (AttributeError, IndexError, TypeError):
        return False


def stream_only(family: Family | None) -> bool:
    """Whether ``family`` is a :func:`stream_family` (its readout is the one :mod:`.derive` found and checks)."""
    return family is not None and family.name.endswith(STREAM_FAMILY)


_SUFFIX = {site_name(0, k).split(".", 2)[2]: k for k in (*MIXER_KINDS, *ROUTING_KINDS)}


def check_kinds_asked(spec: str | Sequence[str], kinds: Sequence[str], model_type: str) -> None:
    """Refuse a routing or mixer site asked of a model without that kind, naming its type and where they exist."""
    for item in [spec] if isinstance(spec, str) else list(spec):
        if not isinstance(item, str):
            continue
        kind = item if item in _SUFFIX.values() else _SUFFIX.get(re.sub(r"^blocks\.\d+\.", "", item))
        if kind is None or kind in kinds:
            continue
        if kind in ROUTING_KINDS:
            raise ValueError(
                f"{item!r}: model_type {model_type!r} has no mixture-of-experts router, so it has no routing sites "
                f"(router_logits, expert_ids, expert_weights, expert_out); they exist on MoE models such as "
                f"{', '.join(MOE_TYPES)}."
            )
        raise ValueError(
            f"{item!r}: model_type {model_type!r} has no state-space mixer, so it has no hook_mixer_in or "
            "hook_mixer_out; they exist on Mamba and Mamba-2."
        )


def per_position(value: torch.Tensor, io: str, shape: Sequence[int]) -> torch.Tensor:
    """A routing site's value [tokens, ...] (routers see tokens flattened) as [batch, pos, ...] for an input of
    ``shape`` [batch, pos]; any other site's value as it is."""
    if io.startswith(("element.", "topk.", "experts.", "keys.")) and value.dim() == 2:
        return value.reshape(int(shape[0]), int(shape[1]), -1)
    return value
