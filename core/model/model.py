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
import dataclasses
import inspect
import logging
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import nnsight
import torch

from ..checks import check_names, check_options, check_positive_int, check_texts
from ..data.store import ActivationStore, cache_activations
from ..memory.freeing import release
from .activations import Activations, pad_and_stack, pad_patterns
from .derive import config_int, text_config
from .eager_attention import check_patterns, eager_attention
from .parts import ModelParts
from .positions import as_positions, position_columns
from .routing import per_position, with_router
from .runlock import run_lock
from .sites import KINDS, ROUTING_KINDS, SITE_ORDER, Family, Site, parallel_blocks
from .trace_ops import read_site

logger = logging.getLogger(__name__)

Remote = bool | str
#: ``edit(inputs, step)``: run inside a trace body before the readout; ``step`` is 0 for the prompt and
#: counts generated tokens in :meth:`Model.generate`. It must use only envoys, tensors and torch operations.
Edit = Callable[[dict[str, torch.Tensor], int], None]

__all__ = ["Edit", "Model", "Remote", "as_positions", "check_generate_options", "free_trace_memory", "position_columns"]


def free_trace_memory() -> None:
    """Free what a finished nnsight trace leaves behind; call it right after the ``with`` block.

    A trace ends in reference cycles (its frames, tracebacks and scopes) that keep every value it
    saved and its intermediate tensors (a [batch, pos, vocab] logits tensor, the KV cache) alive
    until Python's cycle collector next runs, which can be hundreds of MB later. Right after the
    trace they are all in the youngest generation, so collecting only that one (about 0.3 ms) frees them.
    Then, when glibc holds much freed memory, it is given back to the OS (:mod:`.heap`).
    """
    release(collect=True)


class Model(ModelParts):
    """A language model traced by nnsight, with TransformerLens-style site names.

    Build one with :func:`interplab.load_model`. ``model.nn`` is the nnsight model
    for anything custom; ``model.sites`` lists every named site.
    """

    def __init__(
        self, nn: nnsight.NNsight, tokenizer: Any, *, name: str, remote: Remote = False, server: Any = None,
        family: Family | None = None,
    ):  # fmt: skip
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
        # a module's own site table (:mod:`.custom`), else the one found for its model_type
        self.family, self.skeleton = (family, None) if family is not None else self._find_parts(config)
        self.n_layers = config_int(config, "num_hidden_layers", "n_layer")
        self.d_model = config_int(config, "hidden_size", "n_embd")
        self.n_heads = config_int(config, "num_attention_heads", "n_head")
        # a head's share of attn.hook_z: multi-head latent attention's values (v_head_dim) differ from its queries'
        per_head = self.d_model // self.n_heads if self.n_heads else 0
        self.d_head = config_int(config, "v_head_dim", "head_dim") or per_head
        self.d_mlp = config_int(config, "intermediate_size", "n_inner") or 4 * self.d_model
        #: Site kinds this model has (blocks that run attention and MLP in parallel have no resid_mid).
        own = self.family.kinds if self.family is not None and self.family.kinds is not None else KINDS
        if self.family is not None and parallel_blocks(config):  # GPT-NeoX's use_parallel_residual
            self.family = dataclasses.replace(self.family, parallel=True)
        parallel = self.family is not None and self.family.parallel
        self.kinds = tuple(k for k in SITE_ORDER if (k != "resid_mid" or not parallel) and k in own)
        self.family, self.kinds = self._checked()
        if family is None:  # MoE routers: read-only sites beside the checked ones (:mod:`.routing`)
            routed = with_router(self.family, getattr(nn, "_module", None), self.skeleton, config)
            if routed is not None and routed is not self.family:
                mine = routed.kinds or KINDS
                self.family = routed
                self.kinds = tuple(k for k in SITE_ORDER if (k in self.kinds or k in ROUTING_KINDS) and k in mine)

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
        shape = inputs["input_ids"].shape
        return [per_position(s.detach().to("cpu"), io, shape) for s, (_, io) in zip(saved, targets, strict=True)]

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

    # ------------------------------------------------------------- collect
    def collect(self, texts: str | Sequence[str], sites: str | Sequence[str], batch_size: int = 8) -> Activations:
        """Run texts through the model and keep the activations at the given sites (full names, or short forms
        such as ``"resid_post"``: that site at every layer).

        The forward pass stops after the last layer needed. Returns
        :class:`Activations` with one float32 [batch, pos, d] tensor per site, whatever the
        weights' dtype (a bfloat16 model's values are widened exactly).
        """
        texts = cast("list[str]", self.check_inputs(texts))  # an image model's batch is a tensor
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
        by_readout = self.logits_by_readout()
        if not by_readout:
            self.check_causal_lm()
        pos_list, longest, n_pos = self.position_plan(texts, positions)
        vocab = int(getattr(self.config, "vocab_size", 0) or 0)
        n_logits = None if pos_list is None or not by_readout else n_pos
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
        if not self.logits_by_readout():
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
