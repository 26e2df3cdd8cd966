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
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import nnsight
import torch
from tqdm.auto import tqdm

from ..checks import check_int, check_positive_int, check_texts
from ..memory.budget import Estimate
from . import limits
from .chat import chat_prompt
from .derive import Skeleton, check_readout, find_skeleton, place_family
from .routing import check_kinds_asked, listed, on_moe_layers, stream_only
from .runlock import run_lock
from .sites import (
    MODEL_TYPES,
    Family,
    Site,
    family_for,
    parse_sites,
    resolve,
    site_module_path,
    site_names,
)
from .trace_ops import identity

logger = logging.getLogger(__name__)


class ModelParts:
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
        """The site table (None for unmapped types, with a warning saying what still works) and the parts found
        around the blocks (:mod:`.derive`; None for a model without a torch module or a config)."""
        module = getattr(self.nn, "_module", None)
        model_type = getattr(config, "model_type", None)
        skeleton = find_skeleton(module, config) if isinstance(module, torch.nn.Module) and model_type else None
        if not model_type:
            return None, skeleton
        try:
            family = family_for(model_type)
        except ValueError as err:
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

    def _outer(self, *parts: str) -> Family | Skeleton:
        """Where the blocks, final norm and unembedding are: the site table, or the parts found (:mod:`.derive`);
        an error naming the part not found."""
        if self.family is not None and not stream_only(self.family):
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
        return self.skeleton

    # ----------------------------------------------------------------- names
    @property
    def lock(self) -> threading.RLock:
        """Held while a trace or generation of this model runs (see the module doc): ``with model.lock: ...``."""
        return run_lock(self.nn)

    @property
    def sites(self) -> list[str]:
        """Every site name, in forward order (empty for unsupported architectures)."""
        return listed(self.family, site_names(self.n_layers, self.kinds)) if self.family else []

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
        why = family.why_missing or (
            "its blocks run attention and the MLP in parallel on the same input (use_parallel_residual), so no "
            "residual stream lies between them; hook_resid_pre plus hook_attn_out is what attention adds"
        )
        spec = sites if isinstance(sites, str) else list(sites)
        check_kinds_asked(spec, self.kinds, str(getattr(self.config, "model_type", "?")))
        return on_moe_layers(family, spec, parse_sites(spec, self.n_layers, self.kinds, why))

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

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the weights."""
        return next(self.module.parameters()).dtype

    @property
    def module(self) -> torch.nn.Module:
        """The underlying torch model (the module nnsight wraps): for weights and plain torch hooks."""
        return self.nn._module

    def __repr__(self) -> str:
        remote = f", remote={self.remote!r}" if self.remote else ""
        return f"Model({self.name!r}, {self.n_layers} layers, d_model={self.d_model}{remote})"

    # -------------------------------------------------------------- tokens
    def to_tokens(self, texts: str | Sequence[str], padding_side: str = "right") -> dict[str, torch.Tensor]:
        """Tokenise texts into padded ``input_ids`` and ``attention_mask`` (right padding)."""
        texts = check_texts(texts)
        if self.tokenizer is None:
            raise ValueError(f"{self.name!r} has no tokenizer; pass tokenizer= to load_model.")
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, padding_side=padding_side)
        self.check_lengths(enc["attention_mask"].sum(1).tolist())
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}

    def to_str_tokens(self, text: str | Sequence[int] | torch.Tensor) -> list[str]:
        """String tokens of one text (with the tokenizer's special tokens) or of token ids."""
        ids = self.to_tokens(text)["input_ids"][0].tolist() if isinstance(text, str) else self.check_token_ids(text)
        return [self.tokenizer.decode([i]) for i in ids]

    def chat_prompt(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The prompt text of chat ``messages`` through the model's chat template (an error if it has none).

        >>> chat = ilab.load_model("smollm2-135m-instruct")
        >>> chat.generate(chat.chat_prompt([{"role": "user", "content": "What is the capital of France?"}]))
        ['The capital of France is Paris.']
        """
        return chat_prompt(self.tokenizer, messages, name=self.name, add_generation_prompt=add_generation_prompt)

    def check_token_ids(self, ids: Sequence[int] | torch.Tensor) -> list[int]:
        """Token ids as a flat list of ints inside the vocabulary; a clear error naming a bad one."""
        try:
            arr = torch.as_tensor(ids)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"Token ids must be integers, got {type(ids).__name__}: {ids!r:.80}.") from None
        if arr.dtype.is_floating_point or arr.dtype == torch.bool or arr.dtype.is_complex:
            raise TypeError(f"Token ids must be integers, got dtype {arr.dtype}.")
        flat = arr.flatten().tolist()
        vocab = len(self.tokenizer)
        bad = [i for i in flat if not 0 <= i < vocab]
        if bad:
            raise ValueError(f"Token id {bad[0]} is outside the vocabulary (0..{vocab - 1}).")
        return flat

    def batches(self, texts: list[str], batch_size: int, desc: str) -> Iterator[list[str]]:
        """``texts`` in chunks of ``batch_size``, with a progress bar when there is more than one."""
        check_positive_int("batch_size", batch_size)
        starts = range(0, len(texts), batch_size)
        for start in tqdm(starts, desc=desc, disable=len(starts) <= 1, leave=False):
            yield texts[start : start + batch_size]

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

    # -------------------------------------------------------------- guards
    @property
    def max_positions(self) -> int | None:
        """The longest input the model takes (``max_position_embeddings``), or None when it has no limit."""
        return limits.max_positions(self.config)

    def check_lengths(self, lengths: Sequence[int], what: str = "text") -> None:
        """Refuse inputs longer than the model's context (``max_positions``) before any forward pass."""
        limits.check_lengths(lengths, self.max_positions, self.name, what)

    def forward_bytes(self, batch: int, length: int, n_logits: int | None = 1, eager: bool | None = None) -> int:
        """A generous estimate of one forward pass's memory (logits at ``n_logits`` positions; None: all)."""
        return limits.forward_bytes(self.config, self.d_model, self.n_heads, self.dtype.itemsize, batch, length,
                                    n_logits, eager)  # fmt: skip

    def fit_batch(
        self,
        batch_size: int,
        length: int,
        what: str,
        n_logits: int | None = 1,
        split: bool = True,
        *,
        rows: int | None = None,
        output: int = 0,
        per_row: int = 0,
        eager: bool | None = None,
        hint: str = "",
        copies: int = 2,
    ) -> int:
        """The batch size, up to ``batch_size``, for a request over ``rows`` texts (default ``batch_size``) of up
        to ``length`` tokens that returns ``output`` bytes (held ``copies`` times: pieces and the assembled result)
        and holds ``per_row`` bytes more per text in a batch:
        whose estimate fits the memory budget; refused when none does (:func:`interplab.core.model.limits.fit_batch`).

        >>> model.fit_batch(8, 128, "logits", n_logits=None, rows=100, output=100 * 128 * 262144 * 4)
        3
        """
        per_row += self.forward_bytes(1, length, n_logits, eager)
        estimate = Estimate(what, output=output, per_row=per_row, rows=rows or batch_size, copies=copies)
        return limits.fit_batch(estimate, length, n_logits is None, split, hint, most=batch_size)

    def fingerprint(self) -> str:
        """A stable id of the weights (16 hex digits); long jobs record it so a resume with other weights is refused."""
        return limits.module_fingerprint(self.name, self.module)
