"""Sites: named places in a model, spelled the way TransformerLens spells hooks.

A site name such as ``blocks.6.hook_resid_post`` maps, per architecture family,
to the input or output of one nnsight module. SAELens and Gemma Scope SAEs attach
by the ``hook_name`` in their config, so the names match theirs.

Example
-------
>>> family = family_for("gpt2")
>>> spec = parse_site("blocks.1.hook_mlp_out", n_layers=2)
>>> spec.kind, spec.layer
('mlp_out', 1)
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

#: Site kinds in the order they run: the embedding, then inside each block.
KINDS = (
    "embed",
    "resid_pre",
    "hook_z",
    "pattern",
    "attn_out",
    "resid_mid",
    "mlp_in",
    "mlp_post",
    "mlp_out",
    "resid_post",
)
#: Kinds that exist once per block (``embed`` is once per model).
BLOCK_KINDS = KINDS[1:]
#: A state-space block's mixer input and output (Mamba, Mamba-2), in place of attention and the MLP.
MIXER_KINDS = ("mixer_in", "mixer_out")
#: A mixture-of-experts block's router: its logits, the experts chosen per token and their weights, and each expert's
#: output where the experts module gives them apart (read-only).
ROUTING_KINDS = ("router_logits", "expert_ids", "expert_weights", "expert_out")
#: Every kind in the order it runs inside a block (mixer kinds between the stream sites, routing after mlp_in).
SITE_ORDER = KINDS[:2] + MIXER_KINDS + KINDS[2:7] + ROUTING_KINDS + KINDS[7:]
_HOOK_SUFFIX = {
    "embed": "hook_embed",
    "resid_pre": "hook_resid_pre",
    "pattern": "attn.hook_pattern",
    "hook_z": "attn.hook_z",
    "attn_out": "hook_attn_out",
    "resid_mid": "hook_resid_mid",
    "mlp_in": "hook_mlp_in",
    "mlp_post": "mlp.hook_post",
    "mlp_out": "hook_mlp_out",
    "resid_post": "hook_resid_post",
    "mixer_in": "hook_mixer_in",
    "mixer_out": "hook_mixer_out",
    "router_logits": "mlp.hook_router_logits",
    "expert_ids": "mlp.hook_expert_ids",
    "expert_weights": "mlp.hook_expert_weights",
    "expert_out": "mlp.hook_expert_out",
}
_SUFFIX_KIND = {v: k for k, v in _HOOK_SUFFIX.items()}
_SITE_RE = re.compile(r"^(?:blocks\.(\d+)\.([\w.]+)|(hook_embed))$")
#: TransformerLens hook names interplab does not map (read them through ``model.nn``).
_TL_UNMAPPED = re.compile(
    r"^(?:blocks\.\d+\.)?(?:attn\.hook_(?:q|k|v|attn_scores|result|rot_q|rot_k)|mlp\.hook_(?:pre|pre_linear)"
    r"|ln\w*\.hook_(?:scale|normalized)|hook_(?:attn_in|q_input|k_input|v_input)"
    r"|hook_pos_embed|hook_tokens)$"
)
#: What each site holds, for messages and docs.
DESCRIPTIONS = {
    "embed": "the token embedding as the model adds it to the residual stream",
    "resid_pre": "the residual stream entering the block",
    "pattern": "attention probabilities [heads, query, key] (read-only)",
    "hook_z": "per-head attention values before the output projection, heads x head-dim flattened",
    "attn_out": "the attention output added to the residual stream",
    "resid_mid": "the residual stream between attention and the MLP",
    "mlp_in": "the MLP's input: the output of the norm before it (what Gemma Scope 2 transcoders read)",
    "mlp_post": "MLP neurons: the activation entering the down projection",
    "mlp_out": "the MLP output added to the residual stream",
    "resid_post": "the residual stream leaving the block",
    "mixer_in": "a state-space block's mixer input: the output of the norm before it (Mamba, Mamba-2)",
    "mixer_out": "a state-space block's mixer output, added to the residual stream (Mamba, Mamba-2)",
    "router_logits": "a mixture-of-experts router's logits, one per expert (read-only; only MoE layers)",
    "expert_ids": "the experts the router chose per token, top-k indices as the model orders them (read-only)",
    "expert_weights": "the weights the block gives the chosen experts, aligned with expert_ids (read-only)",
    "expert_out": "every expert's output per token, experts x d_model flattened (read-only; where the experts module "
    "gives them apart: Llama 4)",
}


@dataclass(frozen=True)
class Family:
    """Where each site lives in one architecture family's module tree.

    Paths are relative to the block (``layers``) except ``layers``, ``embed``, ``final_norm`` and
    ``unembed``, which are relative to the model root.
    """

    name: str
    layers: str
    attn_out: str  # module whose output (first element if a tuple) is added to the residual
    mlp_out: str
    o_proj: str  # the attention output projection; its input is hook_z
    final_norm: str
    embed: str  # the token embedding; its output is hook_embed
    attn: str  # the attention module; the second element of its output is the pattern (eager attention)
    mlp_norm: str  # the norm before the MLP; its input is the residual stream between attention and MLP
    down_proj: str  # the MLP's down projection; its input is mlp.hook_post
    unembed: str = "lm_head"
    #: The site kinds blocks of this family have (None: all of :data:`KINDS`); Mamba blocks have the stream and mixer.
    kinds: tuple[str, ...] | None = None
    #: Why the other kinds are missing, for the error naming one.
    why_missing: str = ""
    #: The state-space mixer (relative to the block) whose input and output are ``hook_mixer_in``/``hook_mixer_out``.
    mixer: str = ""
    #: The MoE router (relative to the block; :mod:`.routing` finds it) and, per routing kind,
    #: ``(kind, module path relative to the block, io, width)``.
    router: str = ""
    routing: tuple[tuple[str, str, str, int], ...] = ()
    #: ``(kind, path with {L}, io)`` rows that place those kinds anywhere (a module's own map: :mod:`.custom`).
    paths: tuple[tuple[str, str, str], ...] = ()
    #: The MLP module (relative to the block); when set, ``hook_mlp_in`` is its input (blocks without a norm before
    #: the MLP read the stream there). Empty: ``hook_mlp_in`` is the output of ``mlp_norm``.
    mlp: str = ""
    #: Whether attention and the MLP read the same input and both add to it (no ``hook_resid_mid``).
    parallel: bool = False
    #: The kinds each block has, where blocks differ (hybrid models: a recurrent layer has no attention sites;
    #: sites that failed the check at load; routing sites only in blocks with a router). None: every block has
    #: ``kinds``.
    layer_kinds: tuple[tuple[str, ...], ...] | None = None
    #: Found from the module tree at load (:mod:`.blocks`), not written by hand.
    derived: bool = False
    #: Modules (relative to the block) whose output the block edits in place after they return (Falcon's
    #: ``mlp_output += attention_output``); their output sites are read and written as ``"edited"``. Found by the
    #: check at load (:mod:`.validate`).
    edited: tuple[str, ...] = ()


#: Hand-written families. Derivation (:mod:`.blocks`) finds the same modules for gpt2, gemma, llama and neox
#: (``tests/model/test_coverage.py`` checks it); they are kept for what derivation cannot know: a remote model's
#: weights are on the server, so no local forward can place its norms, and Mamba's blocks hold a state-space mixer,
#: neither attention nor an MLP, so there is nothing to derive but the stream.
FAMILIES: dict[str, Family] = {
    "gpt2": Family(
        "gpt2", "transformer.h", "attn", "mlp", "attn.c_proj", "transformer.ln_f",
        embed="transformer.wte", attn="attn", mlp_norm="ln_2", down_proj="mlp.c_proj",
    ),
    "gemma": Family(
        "gemma", "model.layers", "post_attention_layernorm", "post_feedforward_layernorm", "self_attn.o_proj",
        "model.norm", embed="model.embed_tokens", attn="self_attn", mlp_norm="pre_feedforward_layernorm",
        down_proj="mlp.down_proj",
    ),
    "llama": Family(
        "llama", "model.layers", "self_attn", "mlp", "self_attn.o_proj", "model.norm",
        embed="model.embed_tokens", attn="self_attn", mlp_norm="post_attention_layernorm", down_proj="mlp.down_proj",
    ),
    "neox": Family(
        "neox", "gpt_neox.layers", "attention", "mlp", "attention.dense", "gpt_neox.final_layer_norm",
        embed="gpt_neox.embed_in", attn="attention", mlp_norm="post_attention_layernorm",
        down_proj="mlp.dense_4h_to_h",
    ),
    # Mamba / Mamba-2: a block is residual + mixer(norm(residual)); no attention, no MLP, only the stream
    "mamba": Family(
        "mamba", "backbone.layers", "", "", "", "backbone.norm_f", embed="backbone.embeddings", attn="",
        mlp_norm="", down_proj="", kinds=("embed", "resid_pre", "mixer_in", "mixer_out", "resid_post"),
        why_missing="Mamba blocks have a state-space mixer instead of attention and an MLP, so only hook_embed, "
        "hook_resid_pre, hook_mixer_in, hook_mixer_out and hook_resid_post exist", mixer="mixer",
    ),
}  # fmt: skip

#: Hugging Face ``config.model_type`` -> family name.
MODEL_TYPES: dict[str, str] = {
    "gpt2": "gpt2",
    "gemma2": "gemma",
    "gemma3": "gemma",
    "gemma3_text": "gemma",
    "gemma": "llama",  # Gemma 1 has no post-norms: Llama-shaped blocks
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "llama",
    "qwen3": "llama",
    "gpt_neox": "neox",
    "mamba": "mamba",
    "mamba2": "mamba",
}


def family_for(model_type: str) -> Family:
    """The site table for a Hugging Face ``model_type``; a clear error if unsupported."""
    try:
        return FAMILIES[MODEL_TYPES[model_type]]
    except KeyError:
        raise ValueError(
            f"Unsupported model_type {model_type!r}: interplab maps sites for "
            f"{sorted(MODEL_TYPES)}. Use model.nn (the nnsight model) for other architectures."
        ) from None


def parallel_blocks(config: Any) -> bool:
    """Whether blocks run attention and the MLP in parallel on one input (GPT-NeoX ``use_parallel_residual``).

    Such blocks have no residual stream between attention and the MLP, so no ``hook_resid_mid``.
    """
    return bool(getattr(config, "use_parallel_residual", False))


@dataclass(frozen=True, order=True)
class Site:
    """One parsed site. Sorting gives the order sites run in the forward pass."""

    layer: int
    rank: int
    kind: str
    name: str


def site_name(layer: int, kind: str) -> str:
    """The name of the site of ``kind`` (one of :data:`KINDS`) at block ``layer`` (ignored for ``embed``).

    >>> site_name(3, "hook_z")
    'blocks.3.attn.hook_z'
    """
    if kind not in _HOOK_SUFFIX:
        raise ValueError(f"Unknown site kind {kind!r}; kinds are {SITE_ORDER}.")
    return _HOOK_SUFFIX[kind] if kind == "embed" else f"blocks.{layer}.{_HOOK_SUFFIX[kind]}"


def site_names(n_layers: int, kinds: tuple[str, ...] = KINDS) -> list[str]:
    """All site names of a model with ``n_layers`` blocks, in forward order (only the ``kinds`` given)."""
    head = [site_name(0, "embed")] if "embed" in kinds else []
    return head + [site_name(layer, k) for layer in range(n_layers) for k in SITE_ORDER[1:] if k in kinds]


def parse_site(name: str, n_layers: int, kinds: tuple[str, ...] = KINDS, why_missing: str = "") -> Site:
    """Parse and validate a site name; the error lists the closest valid names.

    ``kinds`` are the kinds this model has; ``why_missing`` explains a kind it lacks.
    """
    if not isinstance(name, str):
        raise TypeError(f"A site is a string like 'blocks.0.hook_resid_post', got {type(name).__name__}: {name!r}")
    match = _SITE_RE.match(name)
    kind = "embed" if match and match.group(3) else _SUFFIX_KIND.get(match.group(2)) if match else None
    layer = int(match.group(1)) if match and match.group(1) else 0
    if kind is not None and kind not in kinds:
        raise ValueError(f"{name!r} does not exist in this model: {why_missing or 'it has no ' + kind + ' site'}.")
    if kind is None or layer >= n_layers:
        valid = site_names(n_layers, kinds)
        shape = (
            f"Valid sites are hook_embed and blocks.{{0..{n_layers - 1}}}."
            f"{{{', '.join(_HOOK_SUFFIX[k] for k in SITE_ORDER[1:] if k in kinds)}}}"
        )
        if _TL_UNMAPPED.match(name):
            raise ValueError(
                f"{name!r} is a TransformerLens hook that interplab does not map. Read it through model.nn, the "
                f"nnsight model (print(model.nn) lists its modules; e.g. model.nn.<module>.output inside a trace). "
                f"{shape}."
            )
        close = difflib.get_close_matches(name, valid, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"Unknown site {name!r}.{hint} {shape}; for example {valid[1:6]}.")
    return Site(layer=layer, rank=SITE_ORDER.index(kind), kind=kind, name=name)


def short_forms(kinds: tuple[str, ...] = KINDS) -> list[str]:
    """The short site names a model with ``kinds`` takes wherever it takes sites (each means every layer's)."""
    return [k for k in SITE_ORDER if k in kinds] + [alias for alias, k in SHORT_ALIASES.items() if k in kinds]


#: Short names that are not kind names: ``heads`` (what ``patching.grid(site="heads")`` patches) is ``hook_z``.
SHORT_ALIASES = {"heads": "hook_z"}


def resolve_sites(
    spec: str | list[str] | tuple[str, ...], n_layers: int, kinds: tuple[str, ...] = KINDS, why_missing: str = ""
) -> list[str]:
    """Full site names of a site spec, in forward order without repeats: the one spelling every entry point takes.

    Each item is a full name (``blocks.6.hook_resid_post``, ``hook_embed``) or a short form (a kind of
    :data:`KINDS`, or ``heads``), which means that kind at every layer (``embed`` is the one ``hook_embed``).
    An unknown short form is refused naming the valid ones.

    >>> resolve_sites(["resid_post", "hook_embed"], n_layers=2)
    ['hook_embed', 'blocks.0.hook_resid_post', 'blocks.1.hook_resid_post']
    """
    if isinstance(spec, str):
        spec = [spec]
    if not isinstance(spec, (list, tuple)) or not spec:
        raise ValueError(f"Give at least one site name, got {spec!r}.")
    names: list[str] = []
    for item in spec:
        if isinstance(item, str) and "." not in item and not _SITE_RE.match(item) and not _TL_UNMAPPED.match(item):
            names += _expand_short(item, n_layers, kinds, why_missing)
        else:
            names.append(item)
    return [s.name for s in sorted({parse_site(n, n_layers, kinds, why_missing) for n in names})]


def kind_of(short: str, kinds: tuple[str, ...] = KINDS, why_missing: str = "", suffixes: bool = False) -> str:
    """The kind (one of :data:`KINDS`) of a short form (``"resid_post"``, ``"heads"``), and with ``suffixes`` of a
    hook name without its layer (``"hook_resid_post"``, ``"attn.hook_z"``); a clear error naming the short forms
    for anything else.

    >>> kind_of("heads"), kind_of("hook_mlp_out", suffixes=True)
    ('hook_z', 'mlp_out')
    """
    by_suffix = _SUFFIX_KIND.get(short) if suffixes and isinstance(short, str) else None
    kind = by_suffix or SHORT_ALIASES.get(short, short)
    valid = short_forms(kinds)
    if kind in SITE_ORDER and kind not in kinds:
        raise ValueError(f"{short!r} does not exist in this model: {why_missing or 'it has no ' + kind + ' site'}.")
    if kind not in SITE_ORDER:
        close = difflib.get_close_matches(str(short), valid, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"Unknown site {short!r}.{hint} A site is a full name such as 'blocks.0.hook_resid_post' or a short form "
            f"meaning every layer: {', '.join(valid)}."
        )
    return kind


def _expand_short(short: str, n_layers: int, kinds: tuple[str, ...], why_missing: str) -> list[str]:
    """Every layer's site of one short form; a clear error for a short form that is not one."""
    kind = kind_of(short, kinds, why_missing)
    return [site_name(0, kind)] if kind == "embed" else [site_name(layer, kind) for layer in range(n_layers)]


def parse_sites(
    names: str | list[str] | tuple[str, ...], n_layers: int, kinds: tuple[str, ...] = KINDS, why_missing: str = ""
) -> list[Site]:
    """Parse a site spec (see :func:`resolve_sites`: full names and short forms), without repeats, in forward order.

    >>> [s.name for s in parse_sites("mlp_out", n_layers=2)]
    ['blocks.0.hook_mlp_out', 'blocks.1.hook_mlp_out']
    """
    return [parse_site(n, n_layers, kinds, why_missing) for n in resolve_sites(names, n_layers, kinds, why_missing)]


def resolve(root: Any, path: str) -> Any:
    """Walk a dotted module path (``model.layers.3.mlp``) from an nnsight envoy or a torch module."""
    node = root
    for part in path.split("."):
        node = node[int(part)] if part.isdigit() else getattr(node, part)
    return node


def site_module_path(family: Family, site: Site) -> tuple[str, str]:
    """The module path for a site and how its value is read there.

    ``"input"`` / ``"output"``: the module's input or output (first element of a tuple);
    ``"edited"``: the output of a module the block then edits in place (:attr:`Family.edited`), read and written
    as a copy; ``"weights"``: the second element of the attention module's output (the pattern; read-only);
    ``"stream"``: the module's input, which the block also keeps as its residual stream, so it is
    written in place (``hook_resid_mid`` at the norm before the MLP).

    >>> site_module_path(FAMILIES["llama"], parse_site("blocks.1.hook_mlp_out", n_layers=2))
    ('model.layers.1.mlp', 'output')
    """
    path, io = _module_path(family, site)
    block = f"{family.layers}.{site.layer}."
    if io == "output" and path.startswith(block) and path[len(block) :] in family.edited:
        return path, "edited"
    return path, io


def _module_path(family: Family, site: Site) -> tuple[str, str]:
    for kind, template, io in family.paths:
        if kind == site.kind:
            return template.replace("{L}", str(site.layer)), io
    if site.kind == "embed":
        return family.embed, "output"
    block = f"{family.layers}.{site.layer}"
    if site.kind == "resid_pre":
        return block, "input"
    if site.kind == "resid_post":
        return block, "output"
    if site.kind in MIXER_KINDS:
        return f"{block}.{family.mixer}", "input" if site.kind == "mixer_in" else "output"
    if site.kind in ROUTING_KINDS:
        path, io = next((path, io) for kind, path, io, _ in family.routing if kind == site.kind)
        return f"{block}.{path}", io
    if site.kind == "hook_z":
        return f"{block}.{family.o_proj}", "input"
    if site.kind == "pattern":
        return f"{block}.{family.attn}", "weights"
    if site.kind == "resid_mid":
        return f"{block}.{family.mlp_norm}", "stream"
    if site.kind == "mlp_in":
        return (f"{block}.{family.mlp}", "input") if family.mlp else (f"{block}.{family.mlp_norm}", "output")
    if site.kind == "mlp_post":
        return f"{block}.{family.down_proj}", "input"
    sub = family.attn_out if site.kind == "attn_out" else family.mlp_out
    return f"{block}.{sub}", "output"
