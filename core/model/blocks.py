"""The sites inside a block, found from the module tree and one short forward: a derived
:class:`~interplab.core.model.sites.Family` for any decoder whose blocks have an attention module and an MLP.

Names find the modules (the attention module: a child named ``self_attn``, ``attn``, ``attention``, ... or a
class named ``*Attention``; its output projection ``o_proj``, ``out_proj``, ``c_proj``, ``dense``, ...; the MLP:
``mlp``, ``feed_forward``, ``block_sparse_moe``, ... or a class named ``*MLP`` / ``*MoE``, and its down projection;
``fc1``/``fc2`` where a block holds its MLP's layers itself, as OPT does). Names cannot say which norm does what
(Llama's ``post_attention_layernorm`` is the norm before the MLP, Gemma 2's normalises the attention output), so
one forward of three tokens says it: a norm whose input is the attention output is a post-norm and its output
is ``hook_attn_out``; the module whose input is ``resid_pre + attn_out`` is where ``hook_resid_mid`` is read;
a block whose output is ``resid_pre + attn_out + mlp_out`` with no such module runs them in parallel.
Softcaps and embedding scales need nothing here: the readout reads ``final_logit_softcapping`` from the
config, and ``hook_embed`` is the embedding module's output, scaled there where the model scales it.

Example
-------
>>> family = derive_family(hf_model, skeleton, "olmo2")
>>> family.attn_out, family.mlp_norm, family.parallel
('post_attention_layernorm', 'mlp', False)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from .derive import SEE_ALSO, DerivationError, Skeleton
from .sites import KINDS, Family, resolve

ATTENTION_NAMES = ("self_attn", "attn", "attention", "self_attention", "attn_layer")
OUT_PROJ_NAMES = ("o_proj", "out_proj", "c_proj", "dense", "wo", "o", "proj", "out")
MLP_NAMES = ("mlp", "feed_forward", "block_sparse_moe", "ffn", "moe", "mlp_block")
DOWN_PROJ_NAMES = ("down_proj", "c_proj", "fc2", "dense_4h_to_h", "w2", "fc_out", "wo", "fc_2")


@dataclass(frozen=True)
class BlockMap:
    """Module names inside one block (empty where absent) and what one forward showed of them."""

    attn: str = ""
    o_proj: str = ""
    attn_out: str = ""
    mlp: str = ""
    mlp_in: str = ""  # the module whose input is the MLP's input
    mlp_norm: str = ""  # the module whose input is resid_mid
    mlp_out: str = ""
    down_proj: str = ""
    parallel: bool = False


def _child(module: torch.nn.Module, names: tuple[str, ...], classes: tuple[str, ...] = ()) -> str:
    children = dict(module.named_children())
    named = next((n for n in names if n in children), "")
    if named or not classes:
        return named
    return next((n for n, c in children.items() if any(type(c).__name__.endswith(k) for k in classes)), "")


def find_modules(block: torch.nn.Module) -> BlockMap:
    """The attention module, its output projection, the MLP and its down projection of ``block``, by name."""
    attn = _child(block, ATTENTION_NAMES, ("Attention",))
    o_proj = _child(resolve(block, attn), OUT_PROJ_NAMES) if attn else ""
    mlp = _child(block, MLP_NAMES, ("MLP", "MoE", "Moe", "FeedForward", "MoeBlock"))
    if mlp:
        down = _child(resolve(block, mlp), DOWN_PROJ_NAMES)
        return BlockMap(attn, f"{attn}.{o_proj}" if o_proj else "", mlp=mlp, mlp_in=mlp,
                        down_proj=f"{mlp}.{down}" if down else "")  # fmt: skip
    children = dict(block.named_children())
    if "fc1" in children and "fc2" in children:  # OPT, BioGPT, XGLM: the block holds its MLP's layers
        return BlockMap(attn, f"{attn}.{o_proj}" if o_proj else "", mlp="fc2", mlp_in="fc1", down_proj="fc2")
    return BlockMap(attn, f"{attn}.{o_proj}" if o_proj else "")


def _first(value: Any) -> torch.Tensor | None:
    value = value[0] if isinstance(value, (tuple, list)) and value else value
    return value if isinstance(value, torch.Tensor) else None


def close(got: torch.Tensor | None, want: torch.Tensor | None) -> bool:
    """Whether two activations agree to the rounding of their dtype (relative to the larger's magnitude)."""
    if got is None or want is None or got.shape != want.shape:
        return False
    got, want = got.float(), want.float()
    scale = max(1e-6, float(want.abs().max()), float(got.abs().max()))
    tolerance = 1e-4 if want.dtype == torch.float32 else 3e-2
    return float((got - want).abs().max()) <= tolerance * scale


def _same(got: torch.Tensor | None, want: torch.Tensor) -> bool:
    return got is not None and got.shape == want.shape and bool(torch.equal(got, want))


class _Stop(Exception):
    """Raised by the hook on the last block: what follows it (the unembedding of a large vocabulary) is not needed."""


def capture(
    module: torch.nn.Module, paths: list[str], token_ids: list[int], stop_after: str = "",
    edited: set[str] | None = None,
) -> dict[str, tuple[Any, Any]]:  # fmt: skip
    """(first input, output) of each module at ``paths`` in one no-grad forward of ``token_ids``, which ends once the
    module at ``stop_after`` (the last block) has run.

    An output the model edits in place after the module returns (Falcon's ``mlp_output += attention_output``) is
    given as the module returned it, and its path is added to ``edited``.
    """
    seen: dict[str, tuple[Any, Any]] = {}
    kept: dict[str, tuple[torch.Tensor, int, torch.Tensor]] = {}  # the first output tensor, its version, a copy
    handles = []

    def stop(*_args: Any) -> None:
        raise _Stop

    def hook(path: str) -> Any:
        def record(_m: Any, args: tuple, kwargs: dict, out: Any) -> None:
            given = args[0] if args else kwargs.get("hidden_states", next(iter(kwargs.values()), None))
            if path not in seen and (first := _first(out)) is not None:
                kept[path] = (first, first._version, first.clone())
            seen.setdefault(path, (given, out))

        return record

    for path in dict.fromkeys(paths):
        handles.append(resolve(module, path).register_forward_hook(hook(path), with_kwargs=True))
    if stop_after:
        handles.append(resolve(module, stop_after).register_forward_hook(stop))
    try:
        with torch.no_grad():
            device = next(module.parameters()).device
            module(input_ids=torch.tensor([token_ids], device=device), use_cache=False)
    except _Stop:
        pass
    finally:
        for handle in handles:
            handle.remove()
    for path, (first, version, copy) in kept.items():
        if first._version != version:
            given, out = seen[path]
            seen[path] = (given, (copy, *out[1:]) if isinstance(out, (tuple, list)) else copy)
            if edited is not None:
                edited.add(path)
    return seen


def place_norms(block: torch.nn.Module, found: BlockMap, seen: dict[str, tuple[Any, Any]]) -> BlockMap:
    """``found`` with the post-norms, the module where the residual stream enters the MLP and whether the block is
    parallel, read from one forward (``seen``: input and output by name relative to the block, ``""`` the block)."""
    x, y = _first(seen[""][0]), _first(seen[""][1])
    norms = [n for n, c in block.named_children() if "norm" in type(c).__name__.lower() and n in seen]

    def post_norm(of: str) -> str:
        value = _first(seen[of][1]) if of in seen else None
        return next((n for n in norms if close(_first(seen[n][0]), value)), of)

    attn_out = post_norm(found.attn) if found.attn else ""
    mlp_out = post_norm(found.mlp) if found.mlp else ""
    if attn_out and x is not None and _adds_inside(seen, found.attn, found.o_proj, x):  # BLOOM: attn returns x + out
        attn_out, mlp_out = found.o_proj, found.down_proj if found.down_proj in seen else mlp_out
    if not attn_out and mlp_out and x is not None and found.mlp_in in seen:  # a recurrent mixer, then the MLP
        mlp_input = _first(seen[found.mlp_in][0])
        mixed = [n for n in norms if close(_first(seen[n][1]), mlp_input) and not _same(_first(seen[n][0]), x)]
        return dataclasses.replace(found, mlp_out=mlp_out, mlp_norm=mixed[0] if mixed else "")
    if not (attn_out and mlp_out and x is not None and attn_out in seen and mlp_out in seen):
        return dataclasses.replace(found, attn_out=attn_out, mlp_out=mlp_out)
    added, mlp_added = _first(seen[attn_out][1]), _first(seen[mlp_out][1])
    if added is None or mlp_added is None:
        return dataclasses.replace(found, attn_out=attn_out, mlp_out=mlp_out)
    mid = x + added
    mlp_norm = next((n for n in [*norms, found.mlp_in] if n in seen and close(_first(seen[n][0]), mid)), "")
    mlp_input = _first(seen[found.mlp_in][0]) if found.mlp_in in seen else None
    from_x = close(mlp_input, x) or any(
        close(_first(seen[n][0]), x) and close(_first(seen[n][1]), mlp_input) for n in norms)  # fmt: skip
    parallel = not mlp_norm and from_x and close(y, x + added + mlp_added)
    return dataclasses.replace(found, attn_out=attn_out, mlp_out=mlp_out, mlp_norm=mlp_norm, parallel=parallel)


def _adds_inside(seen: dict[str, tuple[Any, Any]], module: str, projection: str, x: torch.Tensor) -> bool:
    """Whether ``module`` returns the residual stream plus its ``projection``'s output (BLOOM's attention and MLP)."""
    out = _first(seen[module][1]) if module in seen else None
    projected = _first(seen[projection][1]) if projection in seen else None
    return projected is not None and out is not None and not close(out, projected) and close(out, x + projected)


def block_paths(found: BlockMap, block: torch.nn.Module) -> list[str]:
    """The names (relative to the block) a forward must see to place the norms: the block, its norms, its modules."""
    norms = [n for n, c in block.named_children() if "norm" in type(c).__name__.lower()]
    return ["", *norms, *(p for p in (found.attn, found.mlp, found.mlp_in, found.o_proj, found.down_proj) if p)]


def derive_family(module: torch.nn.Module, skeleton: Skeleton, model_type: str, token_ids: list[int]) -> Family:
    """The site table of ``module`` found from its blocks (see the module doc); a :class:`DerivationError` naming
    the part not found when no block has attention or an MLP."""
    skeleton.require("layers", model_type=model_type)
    layers = str(skeleton.layers)
    blocks = list(resolve(module, layers))
    maps = [find_modules(block) for block in blocks]
    paths = [f"{layers}.{i}.{p}".rstrip(".") for i, (b, m) in enumerate(zip(blocks, maps)) for p in block_paths(m, b)]
    seen = capture(module, paths, token_ids, stop_after=f"{layers}.{len(blocks) - 1}")
    maps = [
        place_norms(block, found, {p[len(f"{layers}.{i}") :].lstrip("."): v for p, v in seen.items()
                                   if p == f"{layers}.{i}" or p.startswith(f"{layers}.{i}.")})
        for i, (block, found) in enumerate(zip(blocks, maps))
    ]  # fmt: skip
    base = next((m for m in maps if m.attn and m.mlp), None) or next((m for m in maps if m.attn or m.mlp), None)
    if base is None:
        children = ", ".join(f"{n} ({type(c).__name__})" for n, c in blocks[0].named_children()) or "none"
        raise DerivationError(
            f"model_type {model_type!r}: no attention module (a child named {'/'.join(ATTENTION_NAMES)} or a class "
            f"named *Attention) and no MLP (a child named {'/'.join(MLP_NAMES)}) in the blocks at {layers} (block "
            f"0 holds: {children}). {SEE_ALSO}."
        )
    per_layer = tuple(layer_kinds(m, base) for m in maps)
    kinds = tuple(k for k in KINDS if (k == "embed" and skeleton.embed) or any(k in own for own in per_layer))
    return Family(
        model_type, layers, base.attn_out, base.mlp_out, base.o_proj, skeleton.final_norm or "", skeleton.embed or "",
        attn=base.attn, mlp_norm=base.mlp_norm, down_proj=base.down_proj, unembed=skeleton.unembed or "", kinds=kinds,
        mlp=base.mlp_in, parallel=base.parallel, derived=True,
        layer_kinds=None if all(own == kinds[1:] for own in per_layer) else per_layer,
        why_missing="" if len(set(per_layer)) == 1 else "its layers differ (a hybrid model): see model.layer_sites()",
    )  # fmt: skip


def layer_kinds(found: BlockMap, base: BlockMap) -> tuple[str, ...]:
    """The kinds one block has under the names of ``base`` (a block whose modules differ has only its stream)."""
    have = {"resid_pre", "resid_post"}
    if found.attn and found.attn == base.attn and found.attn_out == base.attn_out:
        have |= {"attn_out", "pattern"} | ({"hook_z"} if found.o_proj and found.o_proj == base.o_proj else set())
    if found.mlp and found.mlp == base.mlp and found.mlp_out == base.mlp_out:
        have |= {"mlp_in", "mlp_out"} | (
            {"mlp_post"} if found.down_proj and found.down_proj == base.down_proj else set()
        )
    if found.mlp_norm and found.mlp_norm == base.mlp_norm and not base.parallel and "mlp_out" in have:
        have.add("resid_mid")
    return tuple(k for k in KINDS[1:] if k in have)
