"""One forward pass in which every downstream input of the edge graph reads its own copy of the residual stream.

Torch hooks on the model's modules record each upstream node's output (:mod:`.edge_graph`) and give each
downstream input ``v`` the stream ``x + d_v``: a head's query, key or value is recomputed from
``norm(x + d_v)`` through its columns of the projection, an MLP reads ``x + d_mlp`` through its norm, the
final norm ``x + d_logits``. ``d_v`` is a leaf that needs grad (its gradient is dM/d input), plus, when
patching, ``sum_u mask[u, v] (corrupt_u - current_u)``: the edges in ``mask`` read the corrupted run's
output of their upstream node. With ``mask`` all ones every input reads the corrupted stream. The hooks
run the model's own modules (locally; an edge run is not a trace body).

Example
-------
>>> run = EdgeForward(model, EdgeGraph.of(model))
>>> out = run(ids, grad=True)        # out.logits [N, vocab], out.upstream [U, N, P, D], out.grads [V, N, P, D]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..memory.frozen import frozen_weights
from ..model.sites import Family, resolve
from .edge_graph import EdgeGraph

if TYPE_CHECKING:
    from ..model.model import Model

#: Families whose attention the edge runner can split into heads: (input norm, q, k, v projections or one qkv).
ATTENTION_PARTS = {
    "llama": ("input_layernorm", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
    "gemma": ("input_layernorm", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
    "gpt2": ("ln_1", ("attn.c_attn",)),
}


def check_family(model: Model) -> Family:
    """The model's site table; a clear error for a model whose attention the edge runner cannot split into heads."""
    family = model.check_mapped()
    name = family.name
    if name not in ATTENTION_PARTS:
        raise ValueError(f"Edge-level circuits split attention into heads for the families {sorted(ATTENTION_PARTS)}; "
                         f"model family {name!r} is not one of them.")  # fmt: skip
    return family


@dataclass
class EdgeRun:
    """What one edge run gives: last-position logits, upstream outputs and (with grad) each input's gradient."""

    logits: torch.Tensor  # [N, vocab]
    upstream: torch.Tensor  # [U, N, P, D] float32
    grads: torch.Tensor | None  # [V, N, P, D] float32


def _columns(proj: Any, x: torch.Tensor, cols: slice) -> torch.Tensor:
    """``proj(x)[..., cols]`` from those columns' weights only (nn.Linear, or transformers' Conv1D [in, out])."""
    weight, bias = proj.weight, proj.bias
    if isinstance(proj, nn.Linear):
        return nn.functional.linear(x, weight[cols], None if bias is None else bias[cols])
    out = x @ weight[:, cols]
    return out if bias is None else out + bias[cols]


def _per_head(proj: Any, z: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[H, N, P, D]: each head's share of the output projection of ``z`` [N, P, H * d_head] (no bias)."""
    n, p, width = z.shape
    z_NPHd = z.reshape(n, p, n_heads, width // n_heads)
    weight = proj.weight
    if isinstance(proj, nn.Linear):  # [D, H * d_head]
        return torch.einsum("nphd,ehd->hnpe", z_NPHd, weight.reshape(weight.shape[0], n_heads, -1))
    return torch.einsum("nphd,hde->hnpe", z_NPHd, weight.reshape(n_heads, -1, weight.shape[1]))


class EdgeForward:
    """Runs the model with each downstream input on its own stream (see the module docstring)."""

    def __init__(self, model: Model, graph: EdgeGraph) -> None:
        family = check_family(model)
        self.model, self.graph = model, graph
        root = model.module
        self.blocks = resolve(root, family.layers)
        norm_name, proj_names = ATTENTION_PARTS[family.name]
        self.norms = [resolve(b, norm_name) for b in self.blocks]
        self.projs = [[resolve(b, name) for name in proj_names] for b in self.blocks]
        self.o_projs = [resolve(b, family.o_proj) for b in self.blocks]
        self.post_norms = [resolve(b, family.attn_out) for b in self.blocks] if family.attn_out != family.attn else None
        self.gains: list[torch.Tensor] = []  # each post-attention norm's gain: norm(o) = s * gain * o, s per token
        with torch.no_grad():
            for norm in self.post_norms or []:
                ones = torch.ones(1, 1, model.d_model, dtype=model.dtype, device=model.device)
                self.gains.append(norm(ones).float()[0, 0])
        self.mlp_norms = [resolve(b, family.mlp_norm) for b in self.blocks]
        self.mlp_outs = [resolve(b, family.mlp_out) for b in self.blocks]
        self.final_norm = resolve(root, family.final_norm)
        config = model.config
        self.d_head = int(getattr(config, "head_dim", None) or model.d_model // model.n_heads)

    def slots(self, layer: int) -> list[list[tuple[slice, int]]]:
        """Per projection module of a layer: (its output columns, the downstream input they belong to)."""
        g, h, dh = self.graph, self.graph.n_heads, self.d_head
        first = g.layer_inputs(layer).start
        q = [(slice(i * dh, (i + 1) * dh), first + i) for i in range(h)]
        k = [(slice(i * dh, (i + 1) * dh), first + h + i) for i in range(g.n_kv_heads)]
        v = [(slice(i * dh, (i + 1) * dh), first + h + g.n_kv_heads + i) for i in range(g.n_kv_heads)]
        if len(self.projs[layer]) == 3:
            return [q, k, v]
        shift = lambda items, by: [(slice(c.start + by, c.stop + by), i) for c, i in items]  # noqa: E731
        width = h * dh
        return [q + shift(k, width) + shift(v, 2 * width)]  # one fused qkv projection

    def __call__(
        self, ids: torch.Tensor, *, metric: Callable[[torch.Tensor], torch.Tensor] | None = None,
        patch: tuple[torch.Tensor, torch.Tensor] | None = None, embeds: torch.Tensor | None = None,
    ) -> EdgeRun:  # fmt: skip
        """Run ``ids`` [N, P] (no padding); with ``metric`` (last-position logits -> a scalar) each input's gradient
        of it too. ``patch=(corrupt_upstream [U, N, P, D], mask [U, V])``; ``embeds`` replaces the embeddings."""
        grad = metric is not None
        state = _RunState(self, ids, grad, patch, embeds)
        model = self.model
        with model.lock, state.hooks(), frozen_weights(model.module), torch.set_grad_enabled(grad):
            out = model.module(
                input_ids=ids.to(model.device), attention_mask=torch.ones_like(ids).to(model.device), logits_to_keep=1
            )  # only the last position's logits are kept for the metric
            logits = out.logits[:, -1].float()
            grads = None
            if metric is not None:
                found = torch.autograd.grad(metric(logits), state.leaves, allow_unused=True)
                grads = torch.stack([torch.zeros_like(leaf) if g is None else g for g, leaf in
                                     zip(found, state.leaves, strict=True)]).float().cpu()  # fmt: skip
        return EdgeRun(logits.detach().cpu(), torch.stack(state.outputs).float().cpu(), grads)


class _RunState:
    """The hooks of one edge run and what they record."""

    def __init__(
        self, run: EdgeForward, ids: torch.Tensor, grad: bool, patch: tuple[torch.Tensor, torch.Tensor] | None,
        embeds: torch.Tensor | None,
    ) -> None:  # fmt: skip
        self.run, self.embeds = run, embeds
        self.pending = torch.zeros(0)  # the current layer's heads, until its post-attention norm scales them
        model = run.model
        n, p = ids.shape
        self.outputs: list[torch.Tensor] = []  # upstream outputs in forward order, detached
        self.leaves = [torch.zeros(n, p, model.d_model, dtype=model.dtype, device=model.device, requires_grad=grad)
                       for _ in run.graph.downstream]  # fmt: skip
        self.patch = None if patch is None else (patch[0].to(model.device), patch[1].to(model.device))
        self.stream: dict[int, torch.Tensor] = {}  # the input norm's input by layer
        self.inside = False

    def delta(self, v: int, like: torch.Tensor) -> torch.Tensor:
        """What input ``v`` adds to the stream it reads: its leaf plus the corrupted share of its patched edges."""
        d = self.leaves[v]
        if self.patch is not None:
            corrupt, mask = self.patch
            done = len(self.outputs)
            weights = mask[:done, v].to(torch.float32)
            if bool(weights.any()):
                current = torch.stack(self.outputs).to(torch.float32)
                shift = torch.einsum("u,unpd->npd", weights, corrupt[:done].to(torch.float32) - current)
                d = d + shift.to(like.dtype)
        return d.to(like.dtype)

    @contextlib.contextmanager
    def hooks(self) -> Iterator[None]:
        run, handles = self.run, []
        try:
            handles.append(run.blocks[0].register_forward_pre_hook(self._embed, with_kwargs=True))
            for layer in range(len(run.blocks)):
                handles.append(run.norms[layer].register_forward_pre_hook(self._keep_stream(layer)))
                for proj, slots in zip(run.projs[layer], run.slots(layer), strict=True):
                    handles.append(proj.register_forward_hook(self._split(layer, slots)))
                handles.append(run.o_projs[layer].register_forward_pre_hook(self._heads(layer)))
                if run.post_norms is not None:
                    handles.append(run.post_norms[layer].register_forward_hook(self._post_norm(layer)))
                handles.append(run.mlp_norms[layer].register_forward_pre_hook(self._mlp_in(layer)))
                handles.append(run.mlp_outs[layer].register_forward_hook(self._mlp_out))
            handles.append(run.final_norm.register_forward_pre_hook(self._final))
            yield
        finally:
            for handle in handles:
                handle.remove()

    def _embed(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        x = args[0] if args else kwargs["hidden_states"]
        if self.embeds is not None:
            x = self.embeds.to(x.device, x.dtype)
            if args:
                args = (x, *args[1:])
            else:
                kwargs = {**kwargs, "hidden_states": x}
        self.outputs.append(x.detach())
        return args, kwargs

    def _keep_stream(self, layer: int) -> Any:
        def hook(module: Any, args: tuple[Any, ...]) -> None:
            if not self.inside:
                self.stream[layer] = args[0]

        return hook

    def _split(self, layer: int, slots: list[tuple[slice, int]]) -> Any:
        norm = self.run.norms[layer]

        def hook(module: Any, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor:
            x = self.stream[layer]
            pieces, last = [], 0
            self.inside = True
            try:
                for cols, v in slots:
                    pieces += [output[..., last : cols.start], _columns(module, norm(x + self.delta(v, x)), cols)]
                    last = cols.stop
            finally:
                self.inside = False
            return torch.cat([*pieces, output[..., last:]], -1)

        return hook

    def _heads(self, layer: int) -> Any:
        def hook(module: Any, args: tuple[Any, ...]) -> None:
            heads = _per_head(module, args[0].detach(), self.run.graph.n_heads)
            if self.run.post_norms is None:
                self.outputs.extend(heads.unbind(0))
            else:
                self.pending = heads  # scaled by the post-attention norm of the same run

        return hook

    def _post_norm(self, layer: int) -> Any:
        gain = self.run.gains[layer]

        def hook(module: Any, args: tuple[Any, ...], output: torch.Tensor) -> None:
            o, y = args[0].detach().float(), output.detach().float()
            scaled = gain * o  # y = s * scaled, s one number per token (the norm's 1 / rms)
            s = (y * scaled).sum(-1, keepdim=True) / (scaled * scaled).sum(-1, keepdim=True).clamp_min(1e-30)
            self.outputs.extend((s * gain * self.pending.float()).to(output.dtype).unbind(0))

        return hook

    def _mlp_in(self, layer: int) -> Any:
        v = self.run.graph.layer_inputs(layer).stop - 1

        def hook(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
            x = args[0]
            return (x + self.delta(v, x), *args[1:])

        return hook

    def _mlp_out(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        self.outputs.append((output[0] if isinstance(output, tuple) else output).detach())

    def _final(self, module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        x = args[0]
        return (x + self.delta(len(self.leaves) - 1, x), *args[1:])
