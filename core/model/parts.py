"""The structure half of :class:`~interplab.core.model.model.Model`: its parts found at load, site names and
their modules, tokens, limits and the readout (final norm, unembedding, softcap).

:class:`ModelParts` is the base class the :class:`~interplab.core.model.model.Model` runs on; it holds no
forward pass of its own except the one-token check of the readout (:func:`.derive.check_readout`).

Example
-------
>>> model = ilab.load_model()
>>> model.parse_site("blocks.6.hook_resid_post").layer, model.envoy("blocks.6.hook_resid_post")[1]
(6, 'output')
"""

from __future__ import annotations

import logging
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import nnsight
import torch

from ..checks import check_int
from .blocks import derive_family
from .derive import SEE_ALSO, DerivationError, Skeleton, check_readout, find_skeleton, place_family
from .inputs import ModelInputs
from .routing import check_kinds_asked, stream_only
from .runlock import run_lock
from .sites import (
    KINDS,
    MODEL_TYPES,
    ROUTING_KINDS,
    Family,
    Site,
    family_for,
    parse_sites,
    resolve,
    site_module_path,
    site_names,
)
from .trace_ops import identity
from .validate import check_sites

logger = logging.getLogger(__name__)
#: The result of the check at load of each torch module (a model loaded again is not checked again).
_CHECKED: weakref.WeakKeyDictionary[torch.nn.Module, tuple[Any, tuple[Family, list[str]]]] = weakref.WeakKeyDictionary()


class ModelParts(ModelInputs):
    """Where a model's sites, blocks and readout are, its tokens and its limits (see the module doc)."""

    nn: nnsight.NNsight
    tokenizer: Any
    name: str
    remote: bool | str
    config: Any
    family: Family | None
    skeleton: Skeleton | None
    n_layers: int
    d_model: int
    n_heads: int
    d_head: int
    d_mlp: int
    kinds: tuple[str, ...]
    _readout_checked: bool

    def _find_parts(self, config: Any) -> tuple[Family | None, Skeleton | None]:
        """The site table (hand-written, else derived from the blocks; None where neither is possible, with a warning
        naming the part not found and what still works) and the parts found around the blocks (:mod:`.derive`; None
        for a model without a torch module or a config)."""
        module = getattr(self.nn, "_module", None)
        model_type = getattr(config, "model_type", None)
        if getattr(getattr(self.nn, "config", None), "is_encoder_decoder", False):
            raise ValueError(
                f"model_type {model_type!r} is an encoder-decoder model ({type(module).__name__}); interplab maps "
                "sites of decoder-only causal LMs (those AutoModelForCausalLM builds). Read its modules through "
                "model.nn with nnsight directly."
            )
        skeleton = find_skeleton(module, config) if isinstance(module, torch.nn.Module) and model_type else None
        if not model_type:
            return None, skeleton
        try:
            family = family_for(model_type)
        except ValueError:
            try:
                return self._derive(module, skeleton, model_type), skeleton
            except DerivationError as derivation:
                err = derivation
            parts = skeleton.missing if skeleton is not None else ()
            works = "model.logits works (it reads the model's own output); " + (
                f"logit_lens cannot run: {'; '.join(parts)}" if parts else
                f"logit_lens reads {skeleton.layers} through {skeleton.final_norm} and {skeleton.unembed}"
                if skeleton else "logit_lens needs a transformers model")  # fmt: skip
            logger.warning("%s %s.", err, works)
            return None, skeleton
        if skeleton is None or not isinstance(module, torch.nn.Module):
            return family, skeleton
        return place_family(family, module, skeleton), skeleton

    def _local(self, module: Any) -> bool:
        """Whether ``module``'s weights are here (not a remote model's meta-device skeleton)."""
        if not isinstance(module, torch.nn.Module) or self.remote not in (False, "local"):
            return False
        first = next(module.parameters(), None)
        return first is not None and first.device.type != "meta"

    def _token_id(self) -> int:
        bos = getattr(self.tokenizer, "bos_token_id", None) if self.tokenizer is not None else None
        return int(bos if isinstance(bos, int) else 0)

    def _derive(self, module: Any, skeleton: Skeleton | None, model_type: str) -> Family:
        """The site table found from the blocks (:mod:`.blocks`); a :class:`DerivationError` saying what is missing."""
        if skeleton is None or not self._local(module):
            raise DerivationError(
                f"model_type {model_type!r}: sites are found by a forward of the weights, which are not here. "
                f"{SEE_ALSO}"
            )
        family = derive_family(module, skeleton, model_type, [self._token_id()])
        logger.info("Sites of model_type %r found from its module tree: %s", model_type, family)
        return family

    def _checked(self) -> tuple[Family | None, tuple[str, ...]]:
        """The site table and kinds with the sites that fail the check at load dropped (:mod:`.validate`: one
        warning lists them with what each expected); unchanged where the weights are not here."""
        family, module = self.family, getattr(self.nn, "_module", None)
        only_stream = family is not None and family.kinds is not None and not family.derived  # Mamba: nothing to check
        if family is None or only_stream or not isinstance(module, torch.nn.Module) or not self._local(module):
            return family, self.kinds
        key = (family, self.kinds, self.n_layers)
        if _CHECKED.get(module, (None,))[0] != key:  # one check per module: loading it again costs nothing
            with self.lock:
                _CHECKED[module] = (key, check_sites(module, family, self.kinds, self.n_layers, self._token_id()))
        family, problems = _CHECKED[module][1]
        if problems:
            warnings.warn(
                f"{self.name!r}: {len(problems)} site(s) failed the check at load and are left out: "
                f"{'; '.join(problems[:12])}{' ...' if len(problems) > 12 else ''}. The other sites passed.",
                stacklevel=4,
            )
        return family, tuple(k for k in self.kinds if k in (family.kinds or KINDS))

    def layer_kinds(self, layer: int) -> tuple[str, ...]:
        """The site kinds block ``layer`` has (all of :attr:`kinds` but ``embed``, except in hybrid models, where a
        recurrent block has no attention sites, and where a site failed the check at load)."""
        layer = check_int("layer", layer, 0, self.n_layers - 1)
        own = self.family.layer_kinds if self.family is not None else None
        return tuple(k for k in self.kinds[1:] if k != "embed" and (own is None or k in own[layer]))

    def _outer(self, *parts: str) -> Family | Skeleton:
        """Where the blocks, final norm and unembedding are: the site table, or the parts found (:mod:`.derive`);
        an error naming the part not found."""
        if (
            self.family is not None
            and not stream_only(self.family)
            and (not self.family.derived or self.skeleton is None)
        ):
            return self.family
        if self.skeleton is None:
            return self.check_mapped()
        self.skeleton.require("layers", *parts, model_type=getattr(self.config, "model_type", "?"))
        here = self.remote in (False, "local") and next(self.module.parameters()).device.type != "meta"
        if "unembed" in parts and here and not self._readout_checked:
            with self.lock:
                check_readout(self.module, self.skeleton, self.softcap_value, int(self.tokenizer.bos_token_id or 0)
                              if self.tokenizer is not None else 0)  # fmt: skip
            self._readout_checked = True
        return self.family if self.family is not None else self.skeleton

    def logits_by_readout(self) -> bool:
        """Whether :meth:`logits` reads the last block through :attr:`readout` (a hand-written family, or a derived
        one whose final norm and unembedding give the model's logits) rather than the model's own output."""
        if self.family is None:
            return False
        try:
            self._outer("final_norm", "unembed")
        except DerivationError:
            return False
        return True

    # ----------------------------------------------------------------- names
    @property
    def lock(self) -> threading.RLock:
        """Held while a trace or generation of this model runs (see the module doc): ``with model.lock: ...``."""
        return run_lock(self.nn)

    @property
    def sites(self) -> list[str]:
        """Every site name, in forward order (empty for unsupported architectures)."""
        if self.family is None:
            return []
        names = site_names(self.n_layers, self.kinds)
        if self.family.layer_kinds is None:
            return names
        return [n for n, s in zip(names, parse_sites(names, self.n_layers, self.kinds), strict=True)
                if s.kind == "embed" or s.kind in self.layer_kinds(s.layer)]  # fmt: skip

    def site_dim(self, site: str) -> int:
        """Width of the activations at a site per token.

        ``n_heads * d_head`` for ``attn.hook_z``, ``d_mlp`` for ``mlp.hook_post``, ``d_model`` otherwise;
        attention patterns are [heads, query, key] per text, not a vector per token (a ValueError).
        """
        parsed = self.parse_site(site)
        if parsed.kind == "pattern":
            raise ValueError(
                f"{parsed.name} holds attention probabilities [heads, query, key] for each text, not a vector per "
                "token: read it with model.collect (or ilab.widgets.AttentionPattern); it cannot feed a store, "
                "an SAE or a steering vector."
            )
        widths = {"hook_z": self.n_heads * self.d_head, "mlp_post": self.d_mlp}
        widths.update({kind: width for kind, _, _, width in self.check_mapped().routing})
        return widths.get(parsed.kind, self.d_model)

    def sites_of_width(self, width: int) -> list[str]:
        """Sites holding one vector of ``width`` per token, in forward order: where a steering vector or an SAE
        of that width fits (attention patterns are never among them).

        >>> model.sites_of_width(model.d_model)[:2]
        ['hook_embed', 'blocks.0.hook_resid_pre']
        """
        check_int("width", width, minimum=1)
        return [s for s in self.sites if not s.endswith("attn.hook_pattern") and self.site_dim(s) == width]

    def check_mapped(self) -> Family:
        """This model's site table; a clear error naming the supported model types when it has none."""
        if self.family is None:
            raise ValueError(
                f"Named sites are not mapped for {self.name!r} "
                f"(model_type {getattr(self.config, 'model_type', None)!r}); they are for model types "
                f"{sorted(MODEL_TYPES)}. Use model.nn (the nnsight model) directly; model.logits and "
                "ilab.logit_lens need no sites."
            )
        return self.family

    def parse_sites(self, sites: str | Sequence[str]) -> list[Site]:
        """Parse and check site names (one or many), without repeats, in forward order; a short form
        (``"resid_post"``, ``"mlp_out"``, ... see :func:`~interplab.core.model.sites.resolve_sites`) is every layer's.

        >>> model.parse_sites(["blocks.3.hook_resid_post", "blocks.1.hook_mlp_out"])[0].layer
        1
        >>> len(model.parse_sites("resid_post")) == model.n_layers
        True
        """
        family = self.check_mapped()
        parallel = (
            "its blocks run attention and the MLP in parallel on the same input (use_parallel_residual), so no "
            "residual stream lies between them; hook_resid_pre plus hook_attn_out is what attention adds"
        )
        dropped = "no block has it: the check at load left it out (the warning then named what it expected)"
        why = family.why_missing or (parallel if family.parallel else dropped)
        spec = sites if isinstance(sites, str) else list(sites)
        check_kinds_asked(spec, self.kinds, str(getattr(self.config, "model_type", "?")))
        parsed = parse_sites(spec, self.n_layers, self.kinds, why)
        if family.layer_kinds is None:
            return parsed
        named = {sites} if isinstance(sites, str) else set(sites)
        for site in parsed:
            if site.kind != "embed" and site.kind not in self.layer_kinds(site.layer) and site.name in named:
                if site.kind in ROUTING_KINDS:
                    routed = [n for n in range(self.n_layers) if site.kind in self.layer_kinds(n)]
                    raise ValueError(
                        f"{site.name!r}: block {site.layer} is dense (its MLP has no router), so it has no routing "
                        f"sites; the blocks with a router are {routed}."
                    )
                block = type(self.block(site.layer)._module).__name__
                raise ValueError(
                    f"{site.name!r} does not exist in this model: block {site.layer} ({block}) has only "
                    f"{', '.join(self.layer_kinds(site.layer))} (a short form such as {site.kind!r} takes the blocks "
                    "that have it)."
                )
        kept = [s for s in parsed if s.kind == "embed" or s.kind in self.layer_kinds(s.layer)]
        if not kept:
            raise ValueError(f"No block of this model has {sites!r}; {why}.")
        return kept

    def parse_site(self, site: str) -> Site:
        """Parse and check one site name; a short form (every layer's) is refused, naming one full name to give.

        >>> model.parse_site("blocks.6.hook_resid_post").layer
        6
        """
        parsed = self.parse_sites(site)
        if len(parsed) != 1:
            raise ValueError(
                f"{site!r} names {len(parsed)} sites ({parsed[0].name} ... {parsed[-1].name}); this takes one site, "
                f"e.g. {parsed[len(parsed) // 2].name!r}."
            )
        return parsed[0]

    def envoy(self, site: str | Site) -> tuple[Any, str]:
        """The nnsight module of a site and whether the site is its ``"input"`` or ``"output"``.

        Read or write it inside a trace with :func:`interplab.core.model.trace_ops.read_site` / ``write_site``.
        """
        family = self.check_mapped()
        parsed = self.parse_site(site) if isinstance(site, str) else site
        path, io = site_module_path(family, parsed)
        return resolve(self.nn, path), io

    def block(self, layer: int) -> Any:
        """The nnsight module of block ``layer`` (its input is ``resid_pre``, its output ``resid_post``)."""
        layers = self._outer().layers
        layer = check_int("layer", layer, 0, self.n_layers - 1)
        return resolve(self.nn, f"{layers}.{layer}")

    @property
    def device(self) -> torch.device:
        """Where inputs go: the weights' device (the CPU for a remote model, whose weights are not here)."""
        device = next(self.module.parameters()).device
        return torch.device("cpu") if device.type == "meta" else device

    def __repr__(self) -> str:
        remote = f", remote={self.remote!r}" if self.remote else ""
        return f"Model({self.name!r}, {self.n_layers} layers, d_model={self.d_model}{remote})"

    @property
    def softcap_value(self) -> float | None:
        """Gemma's final logit softcap (``logits = cap * tanh(logits / cap)``), or None."""
        cap = getattr(self.config, "final_logit_softcapping", None)
        return float(cap) if cap else None

    def softcap(self, logits: torch.Tensor) -> torch.Tensor:
        """Apply the final logit softcap (identity for models without one) to logits read without it."""
        cap = self.softcap_value
        return torch.tanh(logits / cap) * cap if cap else logits

    @property
    def readout(self) -> Callable[[Any], Any]:
        """``readout(hidden) -> logits``: the final norm, the unembedding and the softcap.

        ``hidden`` is the residual stream after a block (the final norm's input), any shape [..., d_model].
        The function holds only the two nnsight modules and a number, so it is safe inside a trace
        body, remote included: take it before the trace.

        >>> readout = model.readout
        >>> with model.nn.trace("Hello", **model.trace_kwargs) as tracer:
        ...     logits = nnsight.save(readout(model.nn.model.layers[5].output[:, -1]))
        """
        norm, unembed, cap = self.readout_parts

        def readout(hidden: Any) -> Any:
            logits = unembed(norm(hidden))
            if cap:
                logits = torch.tanh(logits / cap) * cap
            return logits

        return readout

    @property
    def readout_parts(self) -> tuple[Any, Any, float | None]:
        """The final norm's and the unembedding's nnsight modules and the softcap (or None), for traces that need
        more than :attr:`readout` (e.g. the unembedding rows of a few tokens: ``unembed.weight[ids]``).

        Take them before the trace; they are safe inside its body.
        """
        outer = self._outer("final_norm", "unembed")
        norm = resolve(self.nn, str(outer.final_norm)) if outer.final_norm else identity  # a module may have none
        return norm, resolve(self.nn, self._unembed_path(outer)), self.softcap_value

    def readout_modules(self) -> tuple[torch.nn.Module, torch.nn.Module]:
        """The torch modules of the final norm and the unembedding (for their weights)."""
        outer = self._outer("final_norm", "unembed")
        norm = resolve(self.module, str(outer.final_norm)) if outer.final_norm else torch.nn.Identity()
        return norm, resolve(self.module, self._unembed_path(outer))

    def _unembed_path(self, outer: Family | Skeleton) -> str:
        if not outer.unembed:
            raise ValueError(f"{self.name!r} has no unembedding in its site table: give "
                             "load_model(module, sites={..., 'unembed': '<path of the output layer>'}).")  # fmt: skip
        return str(outer.unembed)
