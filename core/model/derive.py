"""The parts of a causal LM found from its module tree: the text decoder, its layer list, the embedding,
the final norm and the unembedding.

Where each site lives inside a block is a hand-written :class:`~interplab.core.model.sites.Family` or one
derived from the blocks (:mod:`.blocks`); what lies around the blocks is found here for any Hugging Face
causal LM, mapped or not: the text decoder is the model's ``get_decoder()`` (the language model inside a
``*ForConditionalGeneration``), the layers are its module list of ``num_hidden_layers`` blocks, the final
norm is its norm child outside the blocks, the embedding and unembedding are the model's input and output
embeddings. :func:`place_family` moves a
family's paths under the decoder found (Gemma 3's multimodal checkpoint keeps its text model at
``model.language_model``); :func:`check_readout` checks on a one-token forward that the final norm and the
unembedding found give the model's own logits.

Example
-------
>>> skeleton = find_skeleton(hf_model, hf_model.config.get_text_config())
>>> skeleton.layers, skeleton.final_norm, skeleton.unembed
('model.decoder.layers', 'model.decoder.final_layer_norm', 'lm_head')
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from .sites import Family, resolve

#: Where an error about a part not found sends the user.
SEE_ALSO = (
    "Read its modules through model.nn (print(model.nn) lists them; e.g. model.nn.<module>.output inside a "
    "trace), or name the sites by module path with load_model(module, sites={...})"
)


class DerivationError(ValueError):
    """A part of the model (the layer list, the final norm, the unembedding) was not found in its module tree."""


@dataclass(frozen=True)
class Skeleton:
    """Module paths (from the model root) of what lies around the blocks; ``None`` where nothing was found.

    ``missing`` says, for each part not found, what was searched (for the error naming it).
    """

    decoder: str
    layers: str | None
    n_layers: int
    embed: str | None
    final_norm: str | None
    unembed: str | None
    missing: tuple[str, ...] = ()

    def require(self, *parts: str, model_type: str = "?") -> None:
        """Raise :class:`DerivationError` naming the first of ``parts`` (``"layers"``, ``"unembed"``) not found."""
        for part in parts:
            if getattr(self, part) is None:
                why = next((m for m in self.missing if m.startswith(part)), part)
                raise DerivationError(f"model_type {model_type!r}: {why.split(': ', 1)[-1]}. {SEE_ALSO}.")


def text_config(config: Any) -> Any:
    """The text model's config: ``config.text_config`` of a multimodal checkpoint, else ``config`` itself."""
    getter = getattr(config, "get_text_config", None)
    try:
        return getter() if callable(getter) else config
    except (TypeError, ValueError, AttributeError):
        return config


def config_int(config: Any, *names: str) -> int:
    """The first of ``names`` the config holds as a number (0 if none); per-layer attributes that a config refuses
    to read globally (Gemma 4's ``head_dim``) count as absent."""
    for name in names:
        try:
            value = getattr(config, name, None)
        except Exception:  # transformers raises its own errors for per-layer attributes
            value = None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value:
            return int(value)
    return 0


def _path_of(root: torch.nn.Module, target: torch.nn.Module | None) -> str | None:
    if target is None:
        return None
    if target is root:
        return ""
    return next((name for name, mod in root.named_modules() if mod is target), None)


#: Names of the final norm in Hugging Face models (preferred when a decoder has several norms).
_FINAL_NORMS = ("norm", "ln_f", "norm_f", "final_layer_norm", "final_layernorm", "final_norm")


def _is_norm(module: torch.nn.Module) -> bool:
    return "norm" in type(module).__name__.lower()


def _width(norm: torch.nn.Module) -> int | None:
    weight = getattr(norm, "weight", None)
    return int(weight.shape[-1]) if isinstance(weight, torch.Tensor) and weight.dim() else None


def find_skeleton(module: torch.nn.Module, config: Any) -> Skeleton:
    """The decoder, layer list, embedding, final norm and unembedding of ``module`` (see the module doc)."""
    n_layers = config_int(text_config(config), "num_hidden_layers", "n_layer", "num_layers")
    decoder = _call(module, "get_decoder")
    if not isinstance(decoder, torch.nn.Module) or decoder is module:
        decoder = getattr(module, "base_model", module)
    if decoder is module and n_layers:  # no decoder named: the first module holding a list of n_layers blocks
        decoder = next((m for _, m in module.named_modules() if any(
            isinstance(c, torch.nn.ModuleList) and len(c) == n_layers for c in m.children())), module)  # fmt: skip
    decoder_path = _path_of(module, decoder) or ""
    where = decoder_path or "the model root"
    missing = []
    lists = [(name, child) for name, child in decoder.named_children() if isinstance(child, torch.nn.ModuleList)]
    fitting = [(name, child) for name, child in lists if len(child) == n_layers] or (
        [max(lists, key=lambda nc: len(nc[1]))] if lists and not n_layers else [])  # fmt: skip
    layers = f"{decoder_path}.{fitting[0][0]}".lstrip(".") if fitting else None
    if layers is None:
        found = ", ".join(f"{n} ({len(c)})" for n, c in lists) or "none"
        missing.append(f"layers: no decoder-layer list of {n_layers} blocks under {where} (module lists: {found})")
    width = config_int(text_config(config), "hidden_size", "n_embd", "d_model")
    norms = [name for name, child in decoder.named_children() if _is_norm(child) and _width(child) in (None, width)]
    norms.sort(key=lambda name: name in _FINAL_NORMS)  # a usual final norm's name wins, else the last one registered
    final_norm = f"{decoder_path}.{norms[-1]}".lstrip(".") if norms else None
    if final_norm is None:
        missing.append(f"final_norm: no final norm (a child whose class name holds 'Norm') under {where}")
    embed = _path_of(module, _call(module, "get_input_embeddings"))
    if embed is None:
        missing.append("embed: no input embedding (get_input_embeddings() gave none)")
    unembed = _path_of(module, _call(module, "get_output_embeddings"))
    if unembed is None:
        missing.append("unembed: no unembedding (get_output_embeddings() gave none)")
    return Skeleton(decoder_path, layers, n_layers if layers else 0, embed, final_norm, unembed, tuple(missing))


def _call(module: Any, name: str) -> Any:
    getter = getattr(module, name, None)
    try:
        return getter() if callable(getter) else None
    except (NotImplementedError, AttributeError):
        return None


def place_family(family: Family, module: torch.nn.Module, skeleton: Skeleton) -> Family:
    """``family`` with its root paths under the text decoder found, when its own paths are not in ``module``
    (``model.layers`` -> ``model.language_model.layers`` in Gemma 3's multimodal checkpoint)."""
    try:
        resolve(module, family.layers)
        return family
    except (AttributeError, IndexError, TypeError):
        pass
    own_root = family.layers.rsplit(".", 1)[0]
    if skeleton.layers is None or not skeleton.decoder:
        raise DerivationError(
            f"no decoder-layer list at {family.layers} (the {family.name} family's place for it) nor elsewhere: "
            f"{'; '.join(skeleton.missing)}. Read its modules through model.nn (print(model.nn) lists them)."
        )

    def moved(path: str) -> str:
        return skeleton.decoder + path[len(own_root) :] if path.startswith(own_root + ".") else path

    return dataclasses.replace(family, layers=moved(family.layers), final_norm=moved(family.final_norm),
                               embed=moved(family.embed))  # fmt: skip


def check_readout(module: torch.nn.Module, skeleton: Skeleton, softcap: float | None, token_id: int) -> None:
    """Check on a one-token forward that final norm -> unembedding (-> softcap) of the last block's output gives
    the model's own logits; a :class:`DerivationError` saying by how much they differ otherwise."""
    assert skeleton.layers and skeleton.final_norm and skeleton.unembed
    last = resolve(module, skeleton.layers)[-1]
    norm, unembed = resolve(module, skeleton.final_norm), resolve(module, skeleton.unembed)
    seen: list[torch.Tensor] = []
    hook = last.register_forward_hook(lambda _m, _i, out: seen.append(out[0] if isinstance(out, tuple) else out))
    try:
        with torch.no_grad():
            ids = torch.tensor([[token_id]], device=next(module.parameters()).device)
            want = module(input_ids=ids).logits.float()
            got = unembed(norm(seen[-1])).float()
    except RuntimeError as err:
        raise DerivationError(
            f"the final norm {skeleton.final_norm} and the unembedding {skeleton.unembed} found do "
            f"not take the last block's output ({str(err)[:120]})"
        ) from None
    finally:
        hook.remove()
    if softcap:
        got = torch.tanh(got / softcap) * softcap
    tolerance = 1e-3 if next(module.parameters()).dtype == torch.float32 else 5e-2
    diff = float((got - want).abs().max())
    if not diff <= tolerance * max(1.0, float(want.abs().max())):
        raise DerivationError(
            f"the final norm {skeleton.final_norm} and the unembedding {skeleton.unembed} found do not give the "
            f"model's logits from the last block's output (largest difference {diff:.3g}): the model does more "
            "between them, so no logit lens is read from this model"
        )
