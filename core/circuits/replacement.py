"""The local replacement model: one forward pass of the real model, made linear for attribution.

Every MLP's output is cut from its input and held as a leaf tensor (so gradients stop there and
report what reaches each MLP's output); attention patterns are frozen (the query and key projections
are detached, so the pattern is a constant and only the value path carries gradients); every norm's
scale is frozen (its output is ``x * scale`` with the scale a constant). Values are those of the real
model: only gradients change. The linear paths run in the model's dtype (each norm's scale computed in
float32 and rounded once), so a bfloat16 model's gradients cross the norms without conversions. A
transcoder's affine skip stays in the linear path (its output is ``x @ W_skip``, a function of the MLP
input, in the model's dtype). The batch holds the prompt ``B`` times, so ``B`` targets get their
gradients from one backward pass (one per row). The MLPs themselves run on one copy of the prompt: their
outputs are cut and their inputs read from the frozen norm, so the other copies would be thrown away.

What stays in the trace body is remote-safe: envoys, tensors and torch operations only.

Example
-------
>>> run = replacement_pass(model, ids_1P, skips, batch=32)
>>> run.mlp_in[6]   # [B, P, D] the MLP input of layer 6, attached to the linear graph
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import nnsight
import torch

from ..model.model import Model
from ..model.sites import resolve


@dataclass(frozen=True)
class Linearise:
    """Where a family's blocks keep what the replacement model freezes (paths relative to a block)."""

    norms_before_mlp: tuple[str, ...]  # norms run (in order) before the MLP's own norm: scales frozen
    qk: tuple[str, str]  # the query and key projections: detached, so patterns are constants
    unit_offset: bool  # Gemma's RMSNorm multiplies by (1 + weight), Llama's by weight


LINEARISE = {
    "gemma": Linearise(("input_layernorm", "post_attention_layernorm"), ("self_attn.q_proj", "self_attn.k_proj"),
                       unit_offset=True),
    "llama": Linearise(("input_layernorm",), ("self_attn.q_proj", "self_attn.k_proj"), unit_offset=False),
}  # fmt: skip


def check_family(model: Model) -> Linearise:
    """The freezing table for ``model``'s family; a clear error for the families attribution does not support."""
    family = model.check_mapped()
    if family.name not in LINEARISE:
        raise ValueError(
            f"Attribution graphs need RMSNorm blocks whose norms and attention can be frozen; {model.name!r} is a "
            f"{family.name!r} model. Supported families: {sorted(LINEARISE)} (Gemma 2/3, Llama, Mistral, Qwen)."
        )
    return LINEARISE[family.name]


@dataclass
class ReplacementPass:
    """The saved tensors of one linearised forward pass (``B`` copies of one prompt)."""

    embed_leaf: torch.Tensor  # [B, P, D] the token embeddings as added to the residual stream (a leaf)
    mlp_out_leaf: list[torch.Tensor]  # per layer [B, P, D]: each MLP's output (a leaf, the real values)
    mlp_in: list[torch.Tensor]  # per layer [B, P, D]: each MLP's input, attached to the linear graph
    final: torch.Tensor  # [B, P, D] the final norm's output, attached to the linear graph
    attn_in: list[torch.Tensor] = field(default_factory=list)  # per layer [B, P, D]: each attention's input

    @property
    def leaves(self) -> list[torch.Tensor]:
        """The sources' write points: the embedding, then each layer's MLP output."""
        return [self.embed_leaf, *self.mlp_out_leaf]


def _norm_params(module: torch.nn.Module, unit_offset: bool) -> tuple[torch.Tensor, float]:
    eps = getattr(module, "eps", getattr(module, "variance_epsilon", 1e-6))
    weight = module.weight
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"The norm {type(module).__name__} has no weight tensor.")
    weight = weight.detach().float()
    return (1.0 + weight if unit_offset else weight), float(eps)


def replacement_pass(
    model: Model, ids_1P: torch.Tensor, skips: list[torch.Tensor | None], batch: int
) -> ReplacementPass:
    """Run the linearised forward pass of ``ids_1P`` repeated ``batch`` times (see the module doc).

    ``skips`` holds each layer's transcoder skip matrix [d_in, d_out] (None without one).
    """
    family = model.check_mapped()
    lin = check_family(model)
    mod = model.module
    n = model.n_layers
    blocks = [model.block(layer) for layer in range(n)]
    torch_blocks = [resolve(mod, f"{family.layers}.{layer}") for layer in range(n)]
    names = [*lin.norms_before_mlp, family.mlp_norm]
    norms = [[(resolve(b, p), *_norm_params(resolve(tb, p), lin.unit_offset)) for p in names]
             for b, tb in zip(blocks, torch_blocks, strict=True)]  # fmt: skip
    qks = [[resolve(b, p) for p in lin.qk] for b in blocks]
    mlp_outs = [resolve(b, family.mlp_out) for b in blocks]
    embed = resolve(model.nn, family.embed)
    final_norm = resolve(model.nn, family.final_norm)
    final_gain, final_eps = _norm_params(resolve(mod, family.final_norm), lin.unit_offset)
    ids = ids_1P.expand(batch, -1).to(model.device)
    dtype = model.dtype  # the linear paths run in the model's dtype, the skips too (cast once)
    skips = [None if w is None else w.detach().to(model.device, dtype) for w in skips]
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    with torch.enable_grad(), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
        e = embed.output
        embed_leaf = e.detach().clone().requires_grad_(True)
        embed.output = embed_leaf
        leaves, mlp_ins, attn_ins = [], [], []
        for layer in range(n):
            for j, (envoy, gain, eps) in enumerate(norms[layer]):
                if j == 1:  # the attention runs between the first norm and the next: its pattern a constant
                    for proj in qks[layer]:
                        proj.output = proj.output.detach()
                x = envoy.input
                xf = x.detach().float()
                scale = (torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * gain).to(x.dtype)
                out = envoy.output
                frozen = out.detach() + ((x - x.detach()) * scale).to(out.dtype)
                if j == len(norms[layer]) - 1:  # feeds the MLP alone, whose output is cut: one copy is enough
                    envoy.output = out.detach()[:1]
                    mlp_ins.append(frozen)
                else:
                    envoy.output = frozen
                if j == 0:
                    attn_ins.append(frozen)
            out = mlp_outs[layer].output
            leaf = out.detach().expand(batch, -1, -1).clone().requires_grad_(True)
            skip = skips[layer]
            if skip is not None:
                through = mlp_ins[-1] @ skip
                mlp_outs[layer].output = leaf + (through - through.detach())
            else:
                mlp_outs[layer].output = leaf
            leaves.append(leaf)
        x = final_norm.input
        xf = x.detach().float()
        scale = (torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + final_eps) * final_gain).to(x.dtype)
        final = final_norm.output.detach() + (x - x.detach()) * scale
        saved: Any = nnsight.save([embed_leaf, leaves, mlp_ins, final, attn_ins])
        tracer.stop()
    embed_leaf, leaves, mlp_ins, final, attn_ins = saved
    return ReplacementPass(embed_leaf, list(leaves), list(mlp_ins), final, list(attn_ins))
