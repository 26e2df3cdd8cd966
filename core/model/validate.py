"""Sites checked at load on a one-token forward: what each site reads must be what the model adds to its
residual stream.

Per block: ``resid_mid = resid_pre + attn_out`` and ``resid_post = resid_mid + mlp_out`` (parallel blocks:
``resid_post = resid_pre + attn_out + mlp_out``); the output projection of ``hook_z`` gives the attention
module's output; the down projection of ``mlp.hook_post`` gives the MLP's output; ``hook_mlp_in`` is what the
MLP reads; attention pattern rows sum to 1 (attention run eagerly for the check).

Cost: one forward of one token that stops after the last block (:func:`.blocks.capture`), run once per torch module
(``parts.ModelParts._checked`` keeps the result).

A module output that the block edits in place after the module returns (Falcon adds attention into its MLP's
output) is checked as the module returned it and recorded in ``Family.edited``, so that every read of it takes the
value before the edit (:func:`.trace_ops.read_site`).

Policy: the model loads with the sites that pass; each failed site is dropped from that block and one warning
lists them with what was expected, so a partly understood model still gives every site that is right and
never one that is wrong. A site nothing can check (an MLP after a recurrent mixer in a hybrid block, whose
output no site reads) is dropped the same way.

Example
-------
>>> family, problems = check_sites(hf_model, family, KINDS, n_layers=2, token_id=1)
>>> problems
[]
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .blocks import capture, close
from .eager_attention import eager_attention
from .sites import KINDS, Family, Site, site_module_path, site_name

#: The identity each checked kind must satisfy, for the warning naming a failed site.
EXPECTED = {
    "resid_mid": "hook_resid_pre + hook_attn_out",
    "mlp_out": "hook_resid_post - hook_resid_mid",
    "parallel": "hook_resid_post = hook_resid_pre + hook_attn_out + hook_mlp_out",
    "hook_z": "the output projection of attn.hook_z to give the attention module's output",
    "mlp_post": "the down projection of mlp.hook_post to give the MLP's output",
    "mlp_in": "the input the MLP reads",
    "pattern": "attention rows summing to 1",
    "shape": "one vector per token ([batch, pos, width]) like the residual stream",
    "unchecked": "a residual identity to check it against (no hook_resid_mid was found in this block)",
}


def _value(seen: dict[str, tuple[Any, Any]], path: str, io: str) -> torch.Tensor | None:
    if path not in seen:
        return None
    given, out = seen[path]
    if io == "weights":
        out = out[1] if isinstance(out, tuple) and len(out) > 1 else None
        return out if isinstance(out, torch.Tensor) else None
    value = out if io in ("output", "edited") else given
    value = value[0] if isinstance(value, (tuple, list)) and value else value
    return value if isinstance(value, torch.Tensor) else None


def _parent(path: str) -> str:
    """The module holding ``path`` inside the block (the down projection's MLP); ``path`` itself at the top."""
    return path.rsplit(".", 1)[0] if "." in path else path


def _layer_problems(family: Family, layer: int, kinds: tuple[str, ...], read: Any, seen: Any) -> dict[str, str]:
    """The failed kinds of one block and what each expected."""
    pre, post = read("resid_pre"), read("resid_post")
    bad = {k: EXPECTED["shape"] for k in kinds if k != "pattern" and not _per_token(read(k), pre)}
    attn, mlp, mid = (None if k in bad else read(k) for k in ("attn_out", "mlp_out", "resid_mid"))
    if "attn_out" in kinds and "resid_mid" in kinds and not close(mid, _sum(pre, attn)):
        bad.update(resid_mid=EXPECTED["resid_mid"], attn_out=EXPECTED["resid_mid"])
    if "mlp_out" in kinds and "resid_mid" in kinds and not close(post, _sum(mid, mlp)):
        bad.update(mlp_out=EXPECTED["mlp_out"], **({} if "attn_out" in kinds else {"resid_mid": EXPECTED["mlp_out"]}))
    if family.parallel and not close(post, _sum(_sum(pre, attn), mlp)):
        bad.update(attn_out=EXPECTED["parallel"], mlp_out=EXPECTED["parallel"])
    if not family.parallel and "resid_mid" not in kinds:
        unchecked = ("attn_out", "mlp_in", "mlp_post", "mlp_out")
        bad.update({k: EXPECTED["unchecked"] for k in unchecked if k in kinds and k not in bad})
    block = f"{family.layers}.{layer}"
    z_out, attn_module = (_value(seen, f"{block}.{p}", "output") for p in (family.o_proj, family.attn))
    if "hook_z" in kinds and family.o_proj != family.attn_out and not close(z_out, attn_module):
        bad.setdefault("hook_z", EXPECTED["hook_z"])
    mlp_module = _parent(family.down_proj)
    down_out, mlp_module_out = (_value(seen, f"{block}.{p}", "output") for p in (family.down_proj, mlp_module))
    if "mlp_post" in kinds and family.down_proj != family.mlp_out and not close(down_out, mlp_module_out):
        bad.setdefault("mlp_post", EXPECTED["mlp_post"])
    mlp_input = _value(seen, f"{block}.{mlp_module}", "input") if "." in family.down_proj else read("mlp_in")
    if "mlp_in" in kinds and not close(read("mlp_in"), mlp_input):
        bad.setdefault("mlp_in", EXPECTED["mlp_in"])
    pattern = read("pattern")
    if "pattern" in kinds and (pattern is None or not close(pattern.float().sum(-1), torch.ones_like(pattern.sum(-1)))):
        bad.setdefault("pattern", EXPECTED["pattern"])
    return bad


def _with_edited(family: Family, paths: set[str], n_layers: int) -> Family:
    """``family`` with the modules (relative to the block) whose output a block edits in place after they return."""
    blocks = [f"{family.layers}.{layer}." for layer in range(n_layers)]
    inside = {path[len(b) :] for path in paths for b in blocks if path.startswith(b)}
    return dataclasses.replace(family, edited=tuple(sorted(inside))) if inside else family


def _sum(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    return None if a is None or b is None or a.shape != b.shape else a + b


def _per_token(value: torch.Tensor | None, pre: torch.Tensor | None) -> bool:
    """Whether ``value`` is one vector per token of the batch ([batch, pos, width]), as the residual stream is."""
    return value is not None and pre is not None and value.dim() == pre.dim() and value.shape[:-1] == pre.shape[:-1]


def check_sites(
    module: torch.nn.Module, family: Family, kinds: tuple[str, ...], n_layers: int, token_id: int
) -> tuple[Family, list[str]]:
    """``family`` with each block's failed sites dropped (``kinds``: what every block has unless the family says
    per block), and one line per failed site saying what it expected."""
    per_layer = family.layer_kinds or tuple(tuple(k for k in KINDS[1:] if k in kinds) for _ in range(n_layers))
    paths: dict[tuple[int, str], tuple[str, str]] = {}
    for layer, kinds in enumerate(per_layer):
        for kind in kinds:
            paths[layer, kind] = site_module_path(family, Site(layer, KINDS.index(kind), kind, site_name(layer, kind)))
    extra = [f"{family.layers}.{layer}.{p}" for layer, kinds in enumerate(per_layer) for p in (
        *((family.o_proj, family.attn) if "hook_z" in kinds else ()),
        *((family.down_proj, _parent(family.down_proj)) if "mlp_post" in kinds else ()))]  # fmt: skip
    edited: set[str] = set()
    with eager_attention(module, any("pattern" in kinds for kinds in per_layer)):
        seen = capture(
            module, [path for path, _ in paths.values()] + extra, [token_id], f"{family.layers}.{n_layers - 1}", edited
        )
    family = _with_edited(family, edited, n_layers)
    kept, problems = [], []
    for layer, kinds in enumerate(per_layer):

        def read(kind: str, layer: int = layer) -> torch.Tensor | None:
            return _value(seen, *paths[layer, kind]) if (layer, kind) in paths else None

        bad = _layer_problems(family, layer, kinds, read, seen)
        problems += [f"{site_name(layer, kind)}: expected {why}" for kind, why in bad.items()]
        kept.append(tuple(k for k in kinds if k not in bad))
    if not problems:
        return family, []
    union = tuple(k for k in KINDS if k == "embed" or any(k in kinds for kinds in kept))
    return dataclasses.replace(family, kinds=union, layer_kinds=tuple(kept)), problems
