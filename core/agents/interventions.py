"""Read and edit a loaded planning agent's plan: hidden states per tick, a route written into them.

The agent is a :class:`~interplab.core.agents.drc.DRC` loaded with
``ilab.load_model(agent, sites=agent.sites(), tokenizer=CELLS)``: the block index is the tick.
:func:`tick_states` reads a site at every tick (one position per square); :func:`route_policy` gives a policy
whose hidden state at every tick has ``scale`` times a direction added on some squares and taken away on
others (a probe's "the agent will pass here" direction writes a route; a random direction of the same norm
is the control). The trace body holds only torch operations and ``trace_ops`` (remote-safe).

Example
-------
>>> states = tick_states(model, ids_NS)                       # one [N, S, D] per tick
>>> edited = route_policy(model, w_D, add_NS, remove_NS, scale=3.0)
>>> play(agent, levels, first_move=edited)
"""

from __future__ import annotations

from collections.abc import Callable

import nnsight
import torch

from ..model.model import Model
from ..model.trace_ops import read_site, write_site


def _ticks(model: Model) -> int:
    ticks = getattr(model.module, "ticks", None)
    if not isinstance(ticks, int) or ticks < 1:
        raise ValueError(f"{type(model.module).__name__} has no ticks attribute: load a DRC agent (ilab.agents.DRC) "
                         "with load_model(agent, sites=agent.sites()).")  # fmt: skip
    return ticks


def _enc(ids_NS: torch.Tensor) -> dict[str, torch.Tensor]:
    if not isinstance(ids_NS, torch.Tensor) or ids_NS.ndim != 2 or ids_NS.dtype != torch.long:
        raise ValueError(f"ids_NS must be token ids [N, cells] (torch.long), got {getattr(ids_NS, 'shape', ids_NS)!r}.")
    return {"input_ids": ids_NS, "attention_mask": torch.ones_like(ids_NS)}


def tick_states(model: Model, ids_NS: torch.Tensor, kind: str = "resid_post") -> list[torch.Tensor]:
    """The site ``kind`` (``resid_post``: the top layer; ``resid_mid``: the bottom) after each tick: [N, S, D] each.

    >>> [h.shape for h in tick_states(model, level_ids)]
    """
    if kind not in ("resid_post", "resid_mid"):
        raise ValueError(f"kind={kind!r} is not a DRC site; choose resid_post (top layer) or resid_mid (bottom).")
    sites = [f"blocks.{t}.hook_{kind}" for t in range(_ticks(model))]
    return model.run_sites(_enc(ids_NS), sites)


def route_policy(model: Model, dir_D: torch.Tensor, add_NS: torch.Tensor, remove_NS: torch.Tensor,
                 scale: float) -> Callable[[torch.Tensor], torch.Tensor]:  # fmt: skip
    """A policy (ids [N, S] -> action logits [N, 4]) with the top layer's state edited at every tick.

    On row ``n``, ``scale * dir_D / |dir_D|`` is added on the squares of ``add_NS[n]`` and taken away on those
    of ``remove_NS[n]``. The policy takes exactly the N observations the masks were made for.
    """
    if not isinstance(dir_D, torch.Tensor) or dir_D.ndim != 1 or not bool(dir_D.norm() > 0):
        raise ValueError(f"dir_D must be a non-zero vector [D], got {getattr(dir_D, 'shape', dir_D)!r}.")
    if tuple(add_NS.shape) != tuple(remove_NS.shape) or add_NS.ndim != 2:
        raise ValueError(f"add_NS and remove_NS must be masks [N, S] of one shape, got {tuple(add_NS.shape)} and "
                         f"{tuple(remove_NS.shape)}.")  # fmt: skip
    unit_D = dir_D.float() / dir_D.float().norm()
    delta_NSD = float(scale) * (add_NS.float() - remove_NS.float())[..., None] * unit_D
    targets = [model.envoy(f"blocks.{t}.hook_resid_post") for t in range(_ticks(model))]
    traced, trace_kwargs = model.nn, model.trace_kwargs

    def policy(ids_NS: torch.Tensor) -> torch.Tensor:
        enc = _enc(ids_NS)
        if len(ids_NS) != len(delta_NSD):
            raise ValueError(f"This edit was made for {len(delta_NSD)} observations, got {len(ids_NS)}.")
        with torch.no_grad(), traced.trace(enc, **trace_kwargs):
            for envoy, io in targets:
                h_NSD = read_site(envoy, io)
                write_site(envoy, io, h_NSD + delta_NSD.to(h_NSD.device, h_NSD.dtype))
            logits = nnsight.save(traced.output)
        return logits.detach().cpu()

    return policy
