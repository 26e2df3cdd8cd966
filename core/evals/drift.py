"""Attention drift: how much attention moves toward chosen tokens between two states of the model.

The *before* state is the model as it is; the *after* state adds a steering vector at a site
(``steer=(site, vector)`` or a :class:`~interplab.steering.SteeringVector`, times ``scale``) and/or a
weight edit (``edit={parameter name: delta}``, e.g. :func:`rank_one` for a rank-one edit, applied for
the one forward pass and restored exactly). For each layer and head, the attention *mass* on the
target tokens is the mean, over the queries that can see the first target, of the probability summed
over target keys; the drift is after minus before. Both patterns are kept, for the ``AttentionPattern``
widget (``ilab.widgets.AttentionPattern.compare(result)``).

Example
-------
>>> d = attention_drift(model, "The Eiffel Tower is in the city of", targets=[" Tower"], steer=(site, vec), scale=8)
>>> d.table.sort_values("drift").tail()      # layer, head, mass_before, mass_after, drift
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nnsight
import numpy as np
import pandas as pd
import torch

from ..checks import check_int, check_number, check_texts
from ..model.model import free_trace_memory
from ..model.trace_ops import read_site, write_site
from ..views.attention_pattern import AttentionData
from ..views.charts import offline
from .tidy import tidy

if TYPE_CHECKING:
    from ..model.model import Model


def rank_one(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The rank-one update ``u v^T`` (a weight of shape ``[len(u), len(v)]``), for ``edit=``.

    >>> edit = {"model.layers.4.mlp.down_proj.weight": rank_one(u_640, v_2048)}
    """
    if not isinstance(u, (torch.Tensor, list, tuple)) or not isinstance(v, (torch.Tensor, list, tuple)):
        raise TypeError(f"u and v must be vectors (tensors or lists), got {type(u).__name__} and {type(v).__name__}.")
    u_, v_ = torch.as_tensor(u, dtype=torch.float32), torch.as_tensor(v, dtype=torch.float32)
    return torch.outer(u_.flatten(), v_.flatten())


def target_positions(tokens: list[str], targets: Sequence[str | int]) -> list[int]:
    """Positions of ``targets`` (token strings or positions) in ``tokens``; a ValueError naming a missing one."""
    if isinstance(targets, (str, int)):
        targets = [targets]
    out: list[int] = []
    for t in targets:
        if isinstance(t, str):
            hits = [i for i, s in enumerate(tokens) if s == t]
            if not hits:
                raise ValueError(f"Target token {t!r} is not in the text; its tokens are {tokens}.")
            out.extend(hits)
        else:
            out.append(check_int("target position", t, 0, len(tokens) - 1))
    if not out:
        raise ValueError("targets is empty: give token strings or positions to measure attention to.")
    return sorted(set(out))


@contextlib.contextmanager
def edited_weights(model: Model, edit: Mapping[str, torch.Tensor] | None) -> Iterator[None]:
    """Add each delta to its parameter for the duration (holding the model's lock); restored exactly after."""
    if not edit:
        yield
        return
    params = dict(model.module.named_parameters())
    for name, delta in edit.items():
        if name not in params:
            near = [n for n in params if n.split(".")[-1] == name.split(".")[-1]][:4]
            raise ValueError(f"edit: {name!r} is not a parameter of the model; e.g. {near}.")
        if tuple(delta.shape) != tuple(params[name].shape):
            raise ValueError(f"edit: {name!r} has shape {tuple(params[name].shape)}, the delta {tuple(delta.shape)}.")
    with model.lock:
        saved = {n: params[n].detach().clone() for n in edit}
        try:
            with torch.no_grad():
                for n, delta in edit.items():
                    params[n].add_(delta.to(params[n].device, params[n].dtype))
            yield
        finally:
            with torch.no_grad():
                for n, value in saved.items():
                    params[n].copy_(value)


def patterns(model: Model, enc: dict[str, torch.Tensor], layers: list[int],
             steer: tuple[str, torch.Tensor] | None) -> np.ndarray:  # fmt: skip
    """Attention patterns ``[layers, heads, q, k]`` of one text, with a vector added at a site (remote-safe body)."""
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in layers]
    order = model.parse_sites(names + ([steer[0]] if steer else []))
    plan = [(s.name, *model.envoy(s)) for s in order]
    add = steer[1].to(model.device, model.dtype) if steer else None
    steer_name = steer[0] if steer else None
    inputs = {k: v.to(model.device) for k, v in enc.items()}
    with model.eager_attention(), torch.no_grad(), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
        saved = []
        for name, envoy, io in plan:
            if name == steer_name:
                write_site(envoy, io, read_site(envoy, io) + add)
            else:
                saved.append(read_site(envoy, io))
        saved = nnsight.save(saved)
        tracer.stop()
    free_trace_memory()
    return np.stack([s[0].detach().float().cpu().numpy() for s in saved])


@dataclass(repr=False)
class DriftResult:
    """Attention before and after, the target positions, and mass per layer and head."""

    before: AttentionData
    after: AttentionData
    targets: list[int]
    table: pd.DataFrame  # layer, head, mass_before, mass_after, drift

    @property
    def tidy(self) -> pd.DataFrame:
        return pd.concat([tidy("attention_drift", f"blocks.{int(r.layer)}.attn", {"mass_before": r.mass_before,
                          "mass_after": r.mass_after, "drift": r.drift}, group=f"head {int(r.head)}")
                          for r in self.table.itertuples()], ignore_index=True)  # fmt: skip

    def chart(self) -> Any:
        """Drift per layer (rows) and head (columns) as a diverging heat map."""
        import altair as alt

        m = float(max(1e-6, self.table.drift.abs().max()))
        return offline(alt.Chart(self.table).mark_rect().encode(x="head:O", y="layer:O", color=alt.Color(
            "drift:Q", scale=alt.Scale(scheme="redblue", domain=[-m, m], reverse=True)),
            tooltip=["layer", "head", "mass_before", "mass_after", "drift"]).properties(
            title="Attention drift toward the targets (after - before)", width=160, height=220))  # fmt: skip

    def __repr__(self) -> str:
        top = self.table.iloc[self.table.drift.abs().argmax()]
        return (
            f"DriftResult({len(self.table)} heads, targets {self.targets}; largest drift {top.drift:+.3f} at "
            f"layer {int(top.layer)} head {int(top.head)})"
        )


def attention_mass(p: np.ndarray, targets: list[int]) -> np.ndarray:
    """Mean over queries at or after the first target of the attention summed over target keys: ``[layers, heads]``."""
    return p[..., targets[0] :, :][..., targets].sum(-1).mean(-1)


def attention_drift(
    model: Model, text: str, targets: Sequence[str | int], steer: Any = None, scale: float = 1.0,
    edit: Mapping[str, torch.Tensor] | None = None, layers: int | Sequence[int] | None = None,
) -> DriftResult:  # fmt: skip
    """Attention mass on ``targets`` per layer and head, before and after a steering vector and/or weight edit."""
    (text,) = check_texts(text)
    scale = check_number(scale, "scale")
    if steer is None and not edit:
        raise ValueError("Give steer=(site, vector) or a SteeringVector, and/or edit={parameter: delta}: "
                         "the after state must differ from the before state.")  # fmt: skip
    if steer is not None:
        site, vec = (steer.site, steer.vector) if hasattr(steer, "vector") else steer
        parsed = model.parse_site(site)
        vec = torch.as_tensor(vec).float().flatten()
        if vec.shape[0] != model.site_dim(parsed.name):
            raise ValueError(f"The steering vector has {vec.shape[0]} values; {parsed.name} has width "
                             f"{model.site_dim(parsed.name)}.")  # fmt: skip
        steer = (parsed.name, vec * scale)
    if layers is None:
        layers = list(range(model.n_layers))
    layers = sorted({check_int("layer", x, 0, model.n_layers - 1) for x in ([layers] if isinstance(layers, int)
                     else layers)})  # fmt: skip
    enc = model.to_tokens(text)
    tokens = model.to_str_tokens(enc["input_ids"][0])
    where = target_positions(tokens, targets)
    with edited_weights(model, edit):  # checks the edit before any forward pass
        after = patterns(model, enc, layers, steer)
    before = patterns(model, enc, layers, None)
    mb, ma = attention_mass(before, where), attention_mass(after, where)
    rows = [{"layer": layer, "head": h, "mass_before": float(mb[i, h]), "mass_after": float(ma[i, h]),
             "drift": float(ma[i, h] - mb[i, h])}
            for i, layer in enumerate(layers) for h in range(mb.shape[1])]  # fmt: skip
    return DriftResult(before=AttentionData(tokens, layers, before), after=AttentionData(tokens, layers, after),
                       targets=where, table=pd.DataFrame(rows))  # fmt: skip
