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

#: Site kinds in the order they run inside one block.
KINDS = ("resid_pre", "hook_z", "attn_out", "mlp_out", "resid_post")
_HOOK_SUFFIX = {
    "resid_pre": "hook_resid_pre",
    "hook_z": "attn.hook_z",
    "attn_out": "hook_attn_out",
    "mlp_out": "hook_mlp_out",
    "resid_post": "hook_resid_post",
}
_SITE_RE = re.compile(r"^blocks\.(\d+)\.(hook_resid_pre|hook_resid_post|hook_mlp_out|hook_attn_out|attn\.hook_z)$")


@dataclass(frozen=True)
class Family:
    """Where each site lives in one architecture family's module tree.

    Paths are relative to the block (``layers``) except ``layers``, ``final_norm``
    and ``unembed``, which are relative to the model root.
    """

    name: str
    layers: str
    attn_out: str  # module whose output (first element if a tuple) is added to the residual
    mlp_out: str
    o_proj: str  # the attention output projection; its input is hook_z
    final_norm: str
    unembed: str = "lm_head"


FAMILIES: dict[str, Family] = {
    "gpt2": Family("gpt2", "transformer.h", "attn", "mlp", "attn.c_proj", "transformer.ln_f"),
    "gemma": Family(
        "gemma",
        "model.layers",
        "post_attention_layernorm",
        "post_feedforward_layernorm",
        "self_attn.o_proj",
        "model.norm",
    ),
    "llama": Family("llama", "model.layers", "self_attn", "mlp", "self_attn.o_proj", "model.norm"),
    "neox": Family("neox", "gpt_neox.layers", "attention", "mlp", "attention.dense", "gpt_neox.final_layer_norm"),
}

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


@dataclass(frozen=True, order=True)
class Site:
    """One parsed site. Sorting gives the order sites run in the forward pass."""

    layer: int
    rank: int
    kind: str
    name: str


def site_name(layer: int, kind: str) -> str:
    """The name of the site of ``kind`` (one of :data:`KINDS`) at block ``layer``.

    >>> site_name(3, "hook_z")
    'blocks.3.attn.hook_z'
    """
    if kind not in _HOOK_SUFFIX:
        raise ValueError(f"Unknown site kind {kind!r}; kinds are {KINDS}.")
    return f"blocks.{layer}.{_HOOK_SUFFIX[kind]}"


def site_names(n_layers: int) -> list[str]:
    """All site names of a model with ``n_layers`` blocks, in forward order."""
    return [site_name(layer, k) for layer in range(n_layers) for k in KINDS]


def parse_site(name: str, n_layers: int) -> Site:
    """Parse and validate a site name; the error lists the closest valid names."""
    if not isinstance(name, str):
        raise TypeError(f"A site is a string like 'blocks.0.hook_resid_post', got {type(name).__name__}: {name!r}")
    match = _SITE_RE.match(name)
    if match is None or int(match.group(1)) >= n_layers:
        valid = site_names(n_layers)
        close = difflib.get_close_matches(name, valid, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"Unknown site {name!r}.{hint} Valid sites are blocks.{{0..{n_layers - 1}}}."
            "{hook_resid_pre, attn.hook_z, hook_attn_out, hook_mlp_out, hook_resid_post}; "
            f"for example {valid[:5]}."
        )
    layer = int(match.group(1))
    kind = next(k for k, suffix in _HOOK_SUFFIX.items() if suffix == match.group(2))
    return Site(layer=layer, rank=KINDS.index(kind), kind=kind, name=name)


def parse_sites(names: str | list[str] | tuple[str, ...], n_layers: int) -> list[Site]:
    """Parse one or many site names, dropping repeats, sorted in forward order."""
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, (list, tuple)) or not names:
        raise ValueError(f"Give at least one site name, got {names!r}.")
    return sorted({parse_site(n, n_layers) for n in names})


def resolve(root: object, path: str) -> object:
    """Walk a dotted module path (``model.layers.3.mlp``) from an nnsight envoy."""
    node = root
    for part in path.split("."):
        node = node[int(part)] if part.isdigit() else getattr(node, part)
    return node


def site_module_path(family: Family, site: Site) -> tuple[str, str]:
    """The module path for a site and whether its value is that module's input or output."""
    block = f"{family.layers}.{site.layer}"
    if site.kind == "resid_pre":
        return block, "input"
    if site.kind == "resid_post":
        return block, "output"
    if site.kind == "hook_z":
        return f"{block}.{family.o_proj}", "input"
    sub = family.attn_out if site.kind == "attn_out" else family.mlp_out
    return f"{block}.{sub}", "output"
