"""Model: an nnsight-traced language model with named sites.

Example
-------
>>> import interplab as ilab
>>> model = ilab.load_model()                     # the embedded Gemma 3 270M
>>> acts = model.collect(["The cat sat."], sites=["blocks.6.hook_resid_post"])
>>> model.logits(["The capital of France is"]).shape   # last position only
torch.Size([1, 1, 262144])
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import nnsight
import torch
from tqdm.auto import tqdm

from .activations import Activations, pad_and_stack
from .sites import (
    MODEL_TYPES,
    Family,
    Site,
    family_for,
    parse_sites,
    read_site,
    resolve,
    site_module_path,
    site_names,
)

logger = logging.getLogger(__name__)

Remote = bool | str


def check_texts(texts: str | Sequence[str]) -> list[str]:
    """Normalise one text or a list of texts; reject empty and non-string input early."""
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, Sequence) or isinstance(texts, bytes):
        raise TypeError(f"texts must be a string or a list of strings, got {type(texts).__name__}")
    texts = list(texts)
    if not texts:
        raise ValueError("texts is empty: give at least one non-empty string.")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is {type(text).__name__} ({text!r}), not a string.")
        if not text.strip():
            raise ValueError(f"texts[{i}] is empty ({text!r}): every text needs at least one token.")
    return texts


def single_token_id(tokenizer: Any, answer: str | int, what: str = "answer") -> int:
    """The id of a one-token answer string; a clear error showing its tokens otherwise."""
    if isinstance(answer, bool):
        raise TypeError(f"{what} must be a string or a token id, got {answer!r}.")
    if isinstance(answer, int):
        vocab = len(tokenizer)
        if not 0 <= answer < vocab:
            raise ValueError(f"{what} token id {answer} is outside the vocabulary (0..{vocab - 1}).")
        return answer
    if not isinstance(answer, str):
        raise TypeError(f"{what} must be a non-empty string or a token id, got {answer!r}.")
    if not answer:
        raise ValueError(f"{what} is an empty string; give a non-empty string or a token id.")
    ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        pieces = [tokenizer.decode([i]) for i in ids]
        spaced = " " + answer
        hint = "" if answer.startswith(" ") else f" (a word after a space usually needs a leading space: {spaced!r})"
        raise ValueError(f"{what} {answer!r} is {len(ids)} tokens, not one: {pieces}{hint}.")
    if getattr(tokenizer, "unk_token_id", None) is not None and ids[0] == tokenizer.unk_token_id:
        raise ValueError(f"{what} {answer!r} is the unknown token for this tokenizer.")
    return int(ids[0])


def position_columns(lengths: torch.Tensor, positions: Sequence[int]) -> torch.Tensor:
    """Column index of each position in each right-padded row ([batch, n_pos]; -1 is a row's last token)."""
    cols = []
    for p in positions:
        col = lengths + p if p < 0 else torch.full_like(lengths, p)
        if (col < 0).any() or (col >= lengths).any():
            raise ValueError(f"Position {p} is outside a text of {int(lengths.min())} tokens.")
        cols.append(col)
    return torch.stack(cols, 1)


def check_positive_int(name: str, value: Any) -> int:
    """``value`` if it is an integer >= 1 (not a bool), else a ValueError naming ``name`` and the value."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return value


class Model:
    """A language model traced by nnsight, with TransformerLens-style site names.

    Build one with :func:`interplab.load_model`. ``model.nn`` is the nnsight model
    for anything custom; ``model.sites`` lists every named site.
    """

    def __init__(self, nn: nnsight.NNsight, tokenizer: Any, *, name: str, remote: Remote = False):
        self.nn = nn
        self.tokenizer = tokenizer
        self.name = name
        self.remote = remote
        config = getattr(nn, "config", None)
        self.config = config
        self.family: Family | None = None
        if config is not None and getattr(config, "model_type", None):
            try:
                self.family = family_for(config.model_type)
            except ValueError as err:
                logger.warning("%s", err)
        self.n_layers = int(getattr(config, "num_hidden_layers", getattr(config, "n_layer", 0)) or 0)
        self.d_model = int(getattr(config, "hidden_size", getattr(config, "n_embd", 0)) or 0)
        self.n_heads = int(getattr(config, "num_attention_heads", getattr(config, "n_head", 0)) or 0)
        head_dim = getattr(config, "head_dim", None)
        self.d_head = int(head_dim) if head_dim else (self.d_model // self.n_heads if self.n_heads else 0)

    # ----------------------------------------------------------------- names
    @property
    def sites(self) -> list[str]:
        """Every site name, in forward order (empty for unsupported architectures)."""
        return site_names(self.n_layers) if self.family else []

    def site_dim(self, site: str) -> int:
        """Width of the activations at a site (``n_heads * d_head`` for ``attn.hook_z``)."""
        (parsed,) = self._parse(site)
        return self.n_heads * self.d_head if parsed.kind == "hook_z" else self.d_model

    def _parse(self, sites: str | Sequence[str]) -> list[Site]:
        if self.family is None:
            raise ValueError(
                f"Named sites are not mapped for {self.name!r} "
                f"(model_type {getattr(self.config, 'model_type', None)!r}); they are for model types "
                f"{sorted(MODEL_TYPES)}. Use model.nn (the nnsight model) directly."
            )
        return parse_sites(sites if isinstance(sites, str) else list(sites), self.n_layers)

    @property
    def device(self) -> torch.device:
        return next(self.nn._module.parameters()).device

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
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}

    def to_str_tokens(self, text: str | Sequence[int] | torch.Tensor) -> list[str]:
        """String tokens of one text (with the tokenizer's special tokens) or of token ids."""
        if isinstance(text, str):
            ids = self.to_tokens(text)["input_ids"][0].tolist()
        else:
            ids = torch.as_tensor(text).flatten().tolist()
        return [self.tokenizer.decode([i]) for i in ids]

    def _batches(self, texts: list[str], batch_size: int, desc: str) -> Iterator[list[str]]:
        starts = range(0, len(texts), batch_size)
        show = len(starts) > 1
        for start in tqdm(starts, desc=desc, disable=not show, leave=False):
            yield texts[start : start + batch_size]

    def _trace_kwargs(self) -> dict[str, Any]:
        return {"remote": self.remote} if self.remote else {}

    # ------------------------------------------------------------- collect
    def _run_sites(self, enc: dict[str, torch.Tensor], sites: list[Site]) -> list[torch.Tensor]:
        """One forward pass saving each site's tensor; stops after the last site."""
        assert self.family is not None
        targets = []
        for site in sites:
            path, io = site_module_path(self.family, site)
            targets.append((resolve(self.nn, path), io))
        inputs = {k: v.to(self.device) for k, v in enc.items()}
        with torch.no_grad(), self.nn.trace(inputs, **self._trace_kwargs()) as tracer:
            saved = []
            for envoy, io in targets:
                saved.append(read_site(envoy, io))
            saved = nnsight.save(saved)
            tracer.stop()
        return [s.detach().to("cpu") for s in saved]

    def collect(
        self, texts: str | Sequence[str], sites: str | Sequence[str], batch_size: int = 8
    ) -> Activations:
        """Run texts through the model and keep the activations at the given sites.

        The forward pass stops after the last layer needed. Returns
        :class:`Activations` with one [batch, pos, d] tensor per site.
        """
        texts = check_texts(texts)
        parsed = self._parse(sites)
        check_positive_int("batch_size", batch_size)
        tokens, masks, per_site = [], [], {s.name: [] for s in parsed}
        for chunk in self._batches(texts, batch_size, "collect"):
            enc = self.to_tokens(chunk)
            lengths = enc["attention_mask"].sum(1).tolist()
            values = self._run_sites(enc, parsed)
            for row, n in enumerate(lengths):
                tokens.append(enc["input_ids"][row, :n])
                masks.append(torch.ones(n, dtype=torch.bool))
                for site, value in zip(parsed, values, strict=True):
                    per_site[site.name].append(value[row, :n])
        length = max(t.shape[0] for t in tokens)
        pad_id = self.tokenizer.pad_token_id or 0
        return Activations(
            texts=texts,
            tokens=pad_and_stack(tokens, length, pad_id),
            mask=pad_and_stack(masks, length, False),
            str_tokens=[[self.tokenizer.decode([i]) for i in t.tolist()] for t in tokens],
            values={name: pad_and_stack(rows, length) for name, rows in per_site.items()},
            model_name=self.name,
        )

    # -------------------------------------------------------------- logits
    def logits(
        self,
        texts: str | Sequence[str],
        positions: int | Sequence[int] | None = -1,
        batch_size: int = 8,
    ) -> torch.Tensor:
        """Next-token logits at chosen positions, without the full-vocabulary tensor.

        ``positions`` indexes each text's own tokens (``-1`` is its last token);
        ``None`` means every position (the full [batch, pos, vocab] tensor, padded).
        Returns [batch, n_positions, vocab].
        """
        texts = check_texts(texts)
        check_positive_int("batch_size", batch_size)
        if self.family is None:
            self._parse("blocks.0.hook_resid_post")  # raises, naming the supported model types
        pos_list = None if positions is None else ([positions] if isinstance(positions, int) else list(positions))
        out = []
        for chunk in self._batches(texts, batch_size, "logits"):
            out.append(self._logits_batch(self.to_tokens(chunk), pos_list))
        if pos_list is None:
            length = max(o.shape[1] for o in out)
            rows = [r for o in out for r in o]
            return pad_and_stack(rows, length)
        return torch.cat(out)

    def _logits_batch(self, enc: dict[str, torch.Tensor], positions: list[int] | None) -> torch.Tensor:
        assert self.family is not None
        lengths = enc["attention_mask"].sum(1)
        if positions is None:
            rows = cols = None
        else:
            cols = position_columns(lengths, positions)  # [batch, n_pos]
            rows = torch.arange(len(lengths))[:, None].expand_as(cols)
        norm = resolve(self.nn, self.family.final_norm)
        unembed = resolve(self.nn, self.family.unembed)
        inputs = {k: v.to(self.device) for k, v in enc.items()}
        with torch.no_grad(), self.nn.trace(inputs, **self._trace_kwargs()) as tracer:
            hidden = norm.output
            if rows is not None:
                hidden = hidden[rows, cols]
            logits = nnsight.save(unembed(hidden))
            tracer.stop()
        return self._softcap(logits.detach().to("cpu"))

    def _softcap(self, logits: torch.Tensor) -> torch.Tensor:
        cap = getattr(self.config, "final_logit_softcapping", None)
        return torch.tanh(logits / cap) * cap if cap else logits

    # ------------------------------------------------------------ generate
    def generate(
        self,
        texts: str | Sequence[str],
        max_new_tokens: int = 20,
        do_sample: bool = False,
        **kwargs: Any,
    ) -> list[str]:
        """Continue each text; returns only the new text (greedy by default)."""
        texts = check_texts(texts)
        check_positive_int("max_new_tokens", max_new_tokens)
        enc = {k: v.to(self.device) for k, v in self.to_tokens(texts, padding_side="left").items()}
        with self.nn.generate(
            enc, max_new_tokens=max_new_tokens, do_sample=do_sample, **kwargs, **self._trace_kwargs()
        ) as tracer:
            result = nnsight.save(tracer.result)
        new = result[:, enc["input_ids"].shape[1] :]
        return self.tokenizer.batch_decode(new, skip_special_tokens=True)

    # --------------------------------------------------------------- cache
    def cache(self, corpus: Any, sites: str | Sequence[str], path: Any, **kwargs: Any) -> Any:
        """Stream activations to disk; see :func:`interplab.core.store.cache_activations`."""
        from .store import cache_activations

        return cache_activations(self, corpus, sites, path, **kwargs)
