"""Interventions from a graph: turn transcoder features off or scale them, rerun, and compare the answer.

A feature (layer, position, latent) is changed in the real model, not the linearised one: at its layer
the transcoder reads the MLP input as it now is, and the MLP output gets ``(new - a) * W_dec[latent]``
added, where ``a`` is the feature's activation and ``new = factor * a`` (``factor=0`` turns it off).
A cross-layer transcoder's feature writes to its own layer's MLP output and every later one's, so each of
those outputs gets ``(new - a)`` times its decoder row for that layer. Later layers, attention and norms
respond as they would. Position ``None`` changes the feature at every position (and every generated token).

Example
-------
>>> r = intervene(model, transcoders, prompt, {(12, 9, 301): 0.0})   # turn one feature off
>>> r.before[:3], r.after[:3], r.generated_after
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..checks import check_int, check_latent, check_number, check_texts
from ..model.model import Model
from ..model.trace_ops import read_site, sae_encode, token_probs, write_site
from .replacers import CrossLayer, Replacer, replacer


@dataclass
class InterventionResult:
    """The next-token distribution (and optionally a continuation) before and after the change."""

    prompt: str
    changes: list[tuple[int, int | None, int, float]]  # layer, position (None: all), latent, factor
    before: list[tuple[str, float]]  # top next tokens and probabilities, unchanged model
    after: list[tuple[str, float]]
    logits_before: torch.Tensor  # [V] float32
    logits_after: torch.Tensor
    generated_before: str = ""
    generated_after: str = ""
    probs_of: dict[str, tuple[float, float]] = field(default_factory=dict)  # token -> (before, after)

    def prob_change(self, token_id: int) -> tuple[float, float]:
        """The probability of ``token_id`` before and after."""
        p0, p1 = token_probs(self.logits_before), token_probs(self.logits_after)
        return float(p0[token_id]), float(p1[token_id])

    def to_dict(self) -> dict[str, Any]:
        """Plain data (no tensors), e.g. for a widget."""
        return {"prompt": self.prompt, "changes": [list(c) for c in self.changes], "before": self.before,
                "after": self.after, "generated_before": self.generated_before,
                "generated_after": self.generated_after}  # fmt: skip


def _d_sae(rep: Replacer, layer: int) -> int:
    return rep.clt.d_sae if isinstance(rep, CrossLayer) else rep.tcs[layer].d_sae


def check_changes(changes: Any, rep: Replacer, n_pos: int) -> list[tuple[int, int | None, int, float]]:
    """``{(layer, pos, latent): factor}`` or a list of ``(layer, pos, latent, factor)``, checked."""
    items: Any = list(changes.items()) if isinstance(changes, Mapping) else changes
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence) or not items:
        raise ValueError("changes must be a non-empty {(layer, pos, latent): factor} dict or list of "
                         f"(layer, pos, latent, factor), got {changes!r:.80}.")  # fmt: skip
    out = []
    for item in items:
        key, factor = (item[0], item[1]) if isinstance(changes, Mapping) else (tuple(item[:3]), item[3])
        if len(key) != 3:
            raise ValueError(f"A change names (layer, pos, latent), got {key!r}.")
        layer = check_int("layer", key[0], 0, rep.n_layers - 1)
        pos = None if key[1] is None else check_int("pos", key[1], -n_pos, n_pos - 1) % n_pos
        latent = check_latent(key[2], _d_sae(rep, layer))
        out.append((layer, pos, latent, check_number(factor, "factor")))
    return out


def _encoder(rep: Replacer, layer: int, latents: list[int]) -> tuple[dict[str, Any], list[int]]:
    """The trace parameters that encode ``latents`` of ``layer`` (:func:`sae_encode`) and each latent's column."""
    if not isinstance(rep, CrossLayer):
        tc = rep.tcs[layer]
        return tc.trace_params(latents if tc.per_latent else None), [
            latents.index(x) if tc.per_latent else x for x in latents
        ]
    clt = rep.clt
    W_enc, b_enc = clt.W_enc[layer].detach(), clt.b_enc[layer].detach()
    params: dict[str, Any] = {"b_in": torch.zeros_like(W_enc[:, 0])}
    if clt.activation == "topk":  # the k largest of the whole layer: every column
        return {**params, "W_enc": W_enc.clone(), "b_enc": b_enc.clone(), "k": int(clt.k or 1)}, list(latents)
    params.update(W_enc=W_enc[:, latents].clone(), b_enc=b_enc[latents].clone())
    if clt.activation == "jumprelu":
        params["threshold"] = clt.log_threshold[layer].detach()[latents].exp()
    return params, list(range(len(latents)))


def _edit(model: Model, rep: Replacer, changes: list[tuple[int, int | None, int, float]]) -> Any:
    """The ``edit(inputs, step)`` that applies the changes inside a trace (envoys and tensors only): in layer
    order, each changed layer's MLP input is encoded, then each MLP output its features write to is edited."""
    plan: dict[int, Any] = {}
    for layer in sorted({c[0] for c in changes}):
        mine = [c for c in changes if c[0] == layer]
        latents = sorted({c[2] for c in mine})
        params, cols = _encoder(rep, layer, latents)
        rows_NKD = rep.decoder_rows(layer, torch.tensor([c[2] for c in mine])).detach().clone()
        items = [(cols[latents.index(c[2])], c[1], c[3], rows_NKD[i]) for i, c in enumerate(mine)]
        plan[layer] = (model.envoy(f"blocks.{layer}.hook_mlp_in"), params, items)
    written = sorted({layer + k for layer, (_, _, items) in plan.items() for k in range(items[0][3].shape[0])})
    outs = {m: model.envoy(f"blocks.{m}.hook_mlp_out") for m in written}

    def edit(inputs: dict[str, torch.Tensor], step: int) -> None:
        acts = {}
        for m in range(min(plan), written[-1] + 1):
            if m in plan:
                (in_env, in_io), params, _ = plan[m]
                acts[m] = sae_encode(params, read_site(in_env, in_io))
            if m not in outs:
                continue
            out_env, out_io = outs[m]
            out = read_site(out_env, out_io)
            delta = torch.zeros_like(out)
            for layer, a_layer in acts.items():
                for col, pos, factor, d_KD in plan[layer][2]:
                    if m - layer >= d_KD.shape[0] or (pos is not None and step > 0):
                        continue  # no row to this layer; or a prompt position, which only the prompt's pass has
                    a = a_layer[..., col : col + 1].to(out.dtype)
                    change = (factor - 1.0) * a * d_KD[m - layer].to(out.device, out.dtype)
                    if pos is None:
                        delta = delta + change
                    else:
                        delta[:, pos] = delta[:, pos] + change[:, pos]
            write_site(out_env, out_io, out + delta)

    return edit


def intervene(
    model: Model, transcoders: Any, prompt: str, changes: Any, *, top: int = 5, max_new_tokens: int = 0
) -> InterventionResult:
    """Change features (see the module doc) and compare the next-token distribution (and a greedy continuation
    of ``max_new_tokens`` tokens) with the unchanged model's. ``transcoders`` holds one transcoder per layer
    or is one :class:`~interplab.core.saes.clt.CrossLayerTranscoder`.

    >>> intervene(model, tcs, "The capital of France is", {(10, 5, 77): 0.0}, max_new_tokens=5).after[:3]
    """
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be one string, got {type(prompt).__name__}.")
    prompt = check_texts(prompt)[0]
    rep = replacer(model, transcoders)
    n_pos = int(model.to_tokens(prompt)["input_ids"].shape[1])
    checked = check_changes(changes, rep, n_pos)
    check_int("top", top, 1)
    check_int("max_new_tokens", max_new_tokens, 0)
    edit = _edit(model, rep, checked)
    before = model.logits(prompt)[0, 0]
    after = model.logits(prompt, edit=edit)[0, 0]

    def tops(logits: torch.Tensor) -> list[tuple[str, float]]:
        p = token_probs(logits)
        v, i = torch.topk(p, top)
        return [(model.tokenizer.decode([int(t)]), float(x)) for t, x in zip(i, v, strict=True)]

    result = InterventionResult(prompt, checked, tops(before), tops(after), before, after)
    if max_new_tokens:
        result.generated_before = model.generate(prompt, max_new_tokens)[0]
        result.generated_after = model.generate(prompt, max_new_tokens, edit=edit)[0]
    return result
