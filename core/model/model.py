"""Model: an nnsight-traced language model with named sites, and the engine interface every capability uses.

Besides the user-facing calls (``collect``, ``logits``, ``generate``, ``cache``), a Model gives
the rest of interplab what it needs to write its own traces, publicly:

* :meth:`Model.parse_sites` and :meth:`Model.envoy`: site names to parsed sites and to the nnsight
  module (and whether the site is its input or output);
* :meth:`Model.run_sites`: one forward pass that stops after the last site needed;
* :attr:`Model.trace_kwargs`: the keyword arguments every trace takes (remote or not);
* :attr:`Model.readout`: hidden states to logits (final norm, unembedding, Gemma's softcap), as a
  function that holds only nnsight modules and a number, so it can be called inside a trace body;
* ``edit=`` on :meth:`Model.logits` and :meth:`Model.generate`: a function run inside the trace
  (steering uses it) instead of a copy of these traces.

Remote safety: a trace body must not hold a Model (a server has no interplab). Take what the
body needs from the Model before the ``with`` (envoys, ``readout``, tensors) and use only those.

Threads: nnsight runs a trace by switching between greenlets of the thread that opened it, so a
forward of the same modules from another thread while it runs fails ("parent cannot be on a
different thread"), in whichever trace is current. :attr:`Model.lock` (a re-entrant lock) is held
by every nnsight trace and generation of the model, whoever writes it (:mod:`.runlock`: the tracer's
exit, where every trace body runs, takes it), and by the torch-hook generations of steering (the
SteeringPanel's worker thread): they take turns instead of colliding. Anything else that runs
``model.module`` from another thread should hold it too.

Example
-------
>>> import interplab as ilab
>>> model = ilab.load_model()                     # the embedded Gemma 3 270M
>>> acts = model.collect(["The cat sat."], sites=["blocks.6.hook_resid_post"])
>>> model.logits(["The capital of France is"]).shape   # last position only
torch.Size([1, 1, 262144])
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import operator
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import nnsight
import torch
from tqdm.auto import tqdm

from ..checks import check_int, check_names, check_options, check_positive_int, check_texts
from ..data.store import ActivationStore, cache_activations
from ..memory.budget import Estimate
from ..memory.freeing import release
from . import limits
from .activations import Activations, pad_and_stack, pad_patterns
from .chat import chat_prompt
from .derive import Skeleton, check_readout, config_int, find_skeleton, place_family, text_config
from .eager_attention import check_patterns, eager_attention
from .runlock import run_lock
from .sites import (
    KINDS,
    MODEL_TYPES,
    Family,
    Site,
    family_for,
    parallel_blocks,
    parse_sites,
    resolve,
    site_module_path,
    site_names,
)
from .trace_ops import read_site

logger = logging.getLogger(__name__)

Remote = bool | str
#: ``edit(inputs, step)``: run inside a trace body before the readout; ``step`` is 0 for the prompt and
#: counts generated tokens in :meth:`Model.generate`. It must use only envoys, tensors and torch operations.
Edit = Callable[[dict[str, torch.Tensor], int], None]


def position_columns(lengths: torch.Tensor, positions: Sequence[int]) -> torch.Tensor:
    """Column index of each position in each right-padded row ([batch, n_pos]; -1 is a row's last token)."""
    cols = []
    for p in positions:
        col = lengths + p if p < 0 else torch.full_like(lengths, p)
        if (col < 0).any() or (col >= lengths).any():
            raise ValueError(f"Position {p} is outside a text of {int(lengths.min())} tokens.")
        cols.append(col)
    return torch.stack(cols, 1)


def as_positions(positions: int | Sequence[int] | None) -> list[int] | None:
    """``positions`` as a list of ints (``None`` stays None: every position); a clear error for anything else."""
    if positions is None:
        return None
    items = [positions] if not isinstance(positions, (Sequence, torch.Tensor)) or isinstance(positions, str) else (
        list(positions.tolist() if isinstance(positions, torch.Tensor) else positions))  # fmt: skip
    if not items:
        raise ValueError("positions is empty: give a token index (-1 is each text's last), a list of them, or None.")
    out = []
    for p in items:
        try:
            if isinstance(p, bool):
                raise TypeError
            out.append(operator.index(p))
        except TypeError:
            raise TypeError(
                f"positions must be token indices (int, -1 is each text's last) or None, got {p!r} in {positions!r}."
            ) from None
    return out


def free_trace_memory() -> None:
    """Free what a finished nnsight trace leaves behind; call it right after the ``with`` block.

    A trace ends in reference cycles (its frames, tracebacks and scopes) that keep every value it
    saved and its intermediate tensors (a [batch, pos, vocab] logits tensor, the KV cache) alive
    until Python's cycle collector next runs, which can be hundreds of MB later. Right after the
    trace they are all in the youngest generation, so collecting only that one (about 0.3 ms) frees them.
    Then, when glibc holds much freed memory, it is given back to the OS (:mod:`.heap`).
    """
    release(collect=True)


class Model:
    """A language model traced by nnsight, with TransformerLens-style site names.

    Build one with :func:`interplab.load_model`. ``model.nn`` is the nnsight model
    for anything custom; ``model.sites`` lists every named site.
    """

    def __init__(self, nn: nnsight.NNsight, tokenizer: Any, *, name: str, remote: Remote = False, server: Any = None):
        self.nn = nn
        run_lock(nn)  # registered by torch module: a Model holds no lock (it pickles and copies)
        self.tokenizer = tokenizer
        self.name = name
        self.remote = remote
        #: What :func:`interplab.core.model.remote.connect` learnt about the NDIF server (remote models only).
        self.server = server
        self._model_key: str | None = None
        #: The text model's config (a multimodal checkpoint's ``text_config``).
        config = text_config(getattr(nn, "config", None))
        self.config = config
        self._readout_checked = False
        self.family, self.skeleton = self._find_parts(config)
        self.n_layers = config_int(config, "num_hidden_layers", "n_layer")
        self.d_model = config_int(config, "hidden_size", "n_embd")
        self.n_heads = config_int(config, "num_attention_heads", "n_head")
        self.d_head = config_int(config, "head_dim") or (self.d_model // self.n_heads if self.n_heads else 0)
        self.d_mlp = config_int(config, "intermediate_size", "n_inner") or 4 * self.d_model
        #: Site kinds this model has (blocks that run attention and MLP in parallel have no resid_mid).
        own = self.family.kinds if self.family is not None and self.family.kinds is not None else KINDS
        self.kinds = tuple(k for k in KINDS if (k != "resid_mid" or not parallel_blocks(config)) and k in own)

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
        if self.family is not None:
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
        return site_names(self.n_layers, self.kinds) if self.family else []

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
        return {"hook_z": self.n_heads * self.d_head, "mlp_post": self.d_mlp}.get(parsed.kind, self.d_model)

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
        return parse_sites(sites if isinstance(sites, str) else list(sites), self.n_layers, self.kinds, why)

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

    # ------------------------------------------------------- engine interface
    @property
    def trace_kwargs(self) -> dict[str, Any]:
        """Keyword arguments every trace of this model takes (an NDIF backend when it runs remotely)."""
        if not self.remote:
            return {}
        if self.remote == "local" or self.server is None:
            return {"remote": self.remote}
        return {"backend": self.remote_backend()}

    def remote_backend(self, **kwargs: Any) -> Any:
        """A fresh :class:`interplab.core.model.remote.Backend` for one request to this model's server
        (``blocking=False`` submits a job; ``job_id=`` polls one)."""
        from .remote import Backend

        if self._model_key is None:
            self._model_key = self.nn.to_model_key()
        return Backend(self._model_key, self.server.host, self.server.nnsight_version, **kwargs)

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
        return resolve(self.nn, str(outer.final_norm)), resolve(self.nn, str(outer.unembed)), self.softcap_value

    def readout_modules(self) -> tuple[torch.nn.Module, torch.nn.Module]:
        """The torch modules of the final norm and the unembedding (for their weights)."""
        outer = self._outer("final_norm", "unembed")
        return resolve(self.module, str(outer.final_norm)), resolve(self.module, str(outer.unembed))

    def run_sites(
        self, enc: dict[str, torch.Tensor], sites: str | Sequence[str] | Sequence[Site]
    ) -> list[torch.Tensor]:
        """One no-grad forward pass saving each site's tensor (CPU); it stops after the last site.

        ``enc`` holds ``input_ids`` and ``attention_mask``; the tensors come back in the order of
        :meth:`parse_sites` (forward order).
        """
        if isinstance(sites, str) or (sites and isinstance(next(iter(sites)), str)):
            sites = self.parse_sites(sites)  # type: ignore[arg-type]
        targets = [self.envoy(site) for site in sites]
        inputs = {k: v.to(self.device) for k, v in enc.items()}
        patterns = any(io == "weights" for _, io in targets)
        with self.eager_attention(patterns), torch.no_grad(), self.nn.trace(inputs, **self.trace_kwargs) as tracer:
            saved = []
            for envoy, io in targets:
                saved.append(read_site(envoy, io))
            saved = nnsight.save(saved)
            tracer.stop()
        if patterns:
            check_patterns(saved, self.config)
        free_trace_memory()
        return [s.detach().to("cpu") for s in saved]

    @contextlib.contextmanager
    def eager_attention(self, needed: bool = True) -> Iterator[None]:
        """Run attention eagerly inside the block, so that patterns exist (:mod:`interplab.core.model.eager_attention`).

        The switch holds :attr:`lock`: another thread's run (a SteeringPanel generating) never sees it.

        >>> with model.eager_attention():
        ...     ...   # traces reading attn.hook_pattern
        """
        if not isinstance(needed, bool):
            raise TypeError(f"needed must be True or False, got {type(needed).__name__}: {needed!r}.")
        here = self.remote in (False, "local")  # the weights are in this process; a server keeps its own
        with self.lock if needed and here else contextlib.nullcontext(), eager_attention(self.module, needed and here):
            yield

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

    # ------------------------------------------------------------- collect
    def collect(self, texts: str | Sequence[str], sites: str | Sequence[str], batch_size: int = 8) -> Activations:
        """Run texts through the model and keep the activations at the given sites (full names, or short forms
        such as ``"resid_post"``: that site at every layer).

        The forward pass stops after the last layer needed. Returns
        :class:`Activations` with one float32 [batch, pos, d] tensor per site, whatever the
        weights' dtype (a bfloat16 model's values are widened exactly).
        """
        texts = check_texts(texts)
        parsed = self.parse_sites(check_names("sites", sites, "'blocks.6.hook_resid_post'"))
        check_positive_int("batch_size", batch_size)
        longest = max(self.to_tokens(texts)["attention_mask"].sum(1).tolist())
        width = sum(self.site_dim(s.name) for s in parsed if s.kind != "pattern")
        patterns = sum(1 for s in parsed if s.kind == "pattern") * self.n_heads * longest  # [heads, L, L] per text
        per_text = longest * (width + patterns)  # values returned per text, padded to the longest
        batch_size = self.fit_batch(
            batch_size, longest, "collect", n_logits=0, eager=bool(patterns) or None, rows=len(texts),
            output=4 * len(texts) * per_text, per_row=(self.dtype.itemsize + 4) * per_text,
            hint="Collect fewer texts at a time, or texts of similar lengths (each is padded to the longest), "
            "or stream them to disk with model.cache(...).",
        )  # fmt: skip
        tokens: list[torch.Tensor] = []
        masks: list[torch.Tensor] = []
        per_site: dict[str, list[torch.Tensor]] = {s.name: [] for s in parsed}
        for chunk in self.batches(texts, batch_size, "collect"):
            enc = self.to_tokens(chunk)
            lengths = enc["attention_mask"].sum(1).tolist()
            values = [v.float() for v in self.run_sites(enc, parsed)]
            for row, n in enumerate(lengths):
                tokens.append(enc["input_ids"][row, :n])
                masks.append(torch.ones(n, dtype=torch.bool))
                for site, value in zip(parsed, values, strict=True):
                    # a pattern is [heads, query, key]: keep the real tokens on both token axes
                    per_site[site.name].append(value[row, :, :n, :n] if site.kind == "pattern" else value[row, :n])
        length = max(t.shape[0] for t in tokens)
        pad_id = self.tokenizer.pad_token_id or 0
        kinds = {s.name: s.kind for s in parsed}
        return Activations(
            texts=texts,
            tokens=pad_and_stack(tokens, length, pad_id),
            mask=pad_and_stack(masks, length, False),
            str_tokens=[[self.tokenizer.decode([i]) for i in t.tolist()] for t in tokens],
            values={
                name: pad_patterns(rows, length) if kinds[name] == "pattern" else pad_and_stack(rows, length)
                for name, rows in per_site.items()
            },
            model_name=self.name,
        )

    # -------------------------------------------------------------- logits
    def position_plan(self, texts: list[str], positions: Any) -> tuple[list[int] | None, int, int]:
        """(the positions as a list or None for every position, the longest text's length, positions per text),
        checked against every text's length before any work."""
        pos_list = as_positions(positions)
        lengths = self.to_tokens(texts)["attention_mask"].sum(1)
        if pos_list is not None:
            position_columns(lengths, pos_list)  # every position inside every text
        longest = int(lengths.max())
        return pos_list, longest, longest if pos_list is None else len(pos_list)

    def logits(
        self,
        texts: str | Sequence[str],
        positions: int | Sequence[int] | None = -1,
        batch_size: int = 8,
        edit: Edit | None = None,
    ) -> torch.Tensor:
        """Next-token logits at chosen positions, without the full-vocabulary tensor.

        ``positions`` indexes each text's own tokens (``-1`` is its last token);
        ``None`` means every position (the full [batch, pos, vocab] tensor, padded).
        ``edit(inputs, 0)`` runs inside the trace first (see :data:`Edit`; steering uses it).
        Returns float32 [batch, n_positions, vocab], whatever the weights' dtype (computed in it).
        A model without named sites (any Hugging Face causal LM) gives its own output's logits.
        """
        texts = check_texts(texts)
        check_positive_int("batch_size", batch_size)
        if self.family is None:
            self.check_causal_lm()
        pos_list, longest, n_pos = self.position_plan(texts, positions)
        vocab = int(getattr(self.config, "vocab_size", 0) or 0)
        n_logits = None if pos_list is None or self.family is None else n_pos
        batch_size = self.fit_batch(batch_size, longest, "logits", n_logits=n_logits,
                                    rows=len(texts), output=4 * len(texts) * n_pos * vocab)  # fmt: skip
        out = []
        for chunk in self.batches(texts, batch_size, "logits"):
            out.append(self._logits_batch(self.to_tokens(chunk), pos_list, edit))
        if pos_list is None:
            length = max(o.shape[1] for o in out)
            rows = [r for o in out for r in o]
            return pad_and_stack(rows, length)
        return torch.cat(out)

    def _logits_batch(
        self, enc: dict[str, torch.Tensor], positions: list[int] | None, edit: Edit | None
    ) -> torch.Tensor:
        lengths = enc["attention_mask"].sum(1)
        if positions is None:
            rows = cols = None
        else:
            cols = position_columns(lengths, positions)  # [batch, n_pos]
            rows = torch.arange(len(lengths))[:, None].expand_as(cols)
        if self.family is None:
            return self._output_logits(enc, rows, cols, edit)
        last, readout = self.block(self.n_layers - 1), self.readout
        inputs = {k: v.to(self.device) for k, v in enc.items()}
        with torch.no_grad(), self.nn.trace(inputs, **self.trace_kwargs) as tracer:
            if edit is not None:
                edit(inputs, 0)
            hidden = read_site(last, "output")
            if rows is not None:
                hidden = hidden[rows, cols]
            logits = nnsight.save(readout(hidden))
            tracer.stop()
        free_trace_memory()
        return logits.detach().to("cpu", torch.float32)

    def check_causal_lm(self) -> None:
        """Refuse a model whose output holds no ``logits`` (anything but a Hugging Face causal LM) when it has no
        site table to read logits through."""
        from transformers import PreTrainedModel

        if not isinstance(getattr(self.nn, "_module", None), PreTrainedModel):
            self.check_mapped()

    def _output_logits(self, enc: dict[str, torch.Tensor], rows: torch.Tensor | None, cols: torch.Tensor | None,
                       edit: Edit | None) -> torch.Tensor:  # fmt: skip
        """Logits from the model's own output at ``rows, cols`` (all when None), for models without a site table;
        only the positions from the first one asked for are unembedded where the model takes ``logits_to_keep``."""
        width = int(enc["input_ids"].shape[1])
        keep = width if cols is None else width - int(cols.min())
        takes_keep = "logits_to_keep" in inspect.signature(self.module.forward).parameters
        kwargs = {"logits_to_keep": keep} if takes_keep else {}
        shifted = None if cols is None else cols - (width - keep if takes_keep else 0)
        inputs = {k: v.to(self.device) for k, v in enc.items()}
        root = self.nn
        with torch.no_grad(), root.trace(inputs, **kwargs, **self.trace_kwargs):
            if edit is not None:
                edit(inputs, 0)
            logits = root.output.logits
            if rows is not None:
                logits = logits[rows, shifted]
            logits = nnsight.save(logits)
        free_trace_memory()
        return logits.detach().to("cpu", torch.float32)

    # ------------------------------------------------------------ generate
    def generate(self, texts: str | Sequence[str], max_new_tokens: int = 20, **kwargs: Any) -> list[str]:
        """Continue each text; returns only the new text (greedy by default).

        Keywords are those of :meth:`generate_ids`: ``do_sample``, ``edit(inputs, step)`` (run inside the
        generation trace at every step, 0 being the prompt) and any Hugging Face ``generate`` option.
        """
        ids, width = self.generate_ids(texts, max_new_tokens, **kwargs)
        return self.tokenizer.batch_decode(ids[:, width:], skip_special_tokens=True)

    def generate_ids(
        self,
        texts: str | Sequence[str],
        max_new_tokens: int = 20,
        do_sample: bool = False,
        edit: Edit | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, int]:
        """Like :meth:`generate`, but the token ids [batch, prompt + new] (left-padded) and the prompt width."""
        texts = check_texts(texts)
        check_positive_int("max_new_tokens", max_new_tokens)
        check_generate_options(kwargs)
        enc = self.to_tokens(texts, padding_side="left")
        self.check_lengths([int(enc["input_ids"].shape[1]) + max_new_tokens], "the prompt and max_new_tokens")
        self.fit_batch(len(texts), int(enc["input_ids"].shape[1]) + max_new_tokens, "generate", n_logits=1,
                       split=False)  # fmt: skip
        inputs = {k: v.to(self.device) for k, v in enc.items()}
        with warnings.catch_warnings():
            # An open tracer.all() loop ends at the last step by design; nnsight warns about it.
            warnings.filterwarnings("ignore", message=".*was never reached.*")
            with (
                torch.no_grad(),
                self.nn.generate(
                    max_new_tokens=max_new_tokens, do_sample=do_sample, **kwargs, **self.trace_kwargs
                ) as tracer,
            ):
                with tracer.invoke(inputs):
                    if edit is not None:
                        for step in tracer.all():
                            edit(inputs, step)
                with tracer.invoke():
                    result = nnsight.save(tracer.result)
        free_trace_memory()
        return result.detach().to("cpu"), int(enc["input_ids"].shape[1])

    # --------------------------------------------------------------- cache
    def cache(self, corpus: Any, sites: str | Sequence[str], path: Any, **kwargs: Any) -> ActivationStore:
        """Stream activations to disk; see :func:`interplab.core.data.store.cache_activations`.

        >>> store = model.cache("default", "blocks.6.hook_resid_post", "acts/", n_tokens=200_000)
        """
        return cache_activations(self, corpus, sites, path, **kwargs)


def check_generate_options(options: dict[str, Any]) -> None:
    """Refuse keyword options Hugging Face ``generate`` does not take (a typo such as ``foo_bar=3``), before work."""
    from transformers import GenerationConfig

    known = {k for k in GenerationConfig().to_dict() if not k.startswith("_")} | _GENERATE_EXTRAS
    check_options("generate", options, sorted(known - {"transformers_version"}))


_GENERATE_EXTRAS = {"streamer", "logits_processor", "stopping_criteria", "generation_config", "tokenizer"}
