"""The inputs half of a :class:`~interplab.core.model.model.Model`: texts to tokens, batches, and the guards that refuse
an input longer than the model's context or a request over the memory budget before any forward pass.

Example
-------
>>> model.to_tokens(["The cat sat."])["input_ids"].shape
torch.Size([1, 5])
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import nnsight
import torch
from tqdm.auto import tqdm

from ..checks import check_positive_int, check_texts
from ..memory.budget import Estimate
from . import limits
from .chat import chat_prompt


class ModelInputs:
    """Tokens, batches and the limits of a model (see the module doc)."""

    nn: nnsight.NNsight
    tokenizer: Any
    name: str
    config: Any
    d_model: int
    n_heads: int

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the weights."""
        return next(self.module.parameters()).dtype

    @property
    def module(self) -> torch.nn.Module:
        """The underlying torch model (the module nnsight wraps): for weights and plain torch hooks."""
        return self.nn._module

    # -------------------------------------------------------------- tokens
    def check_inputs(self, texts: Any) -> Any:
        """The model's inputs, checked: texts as a list of strings (an image model takes an image batch)."""
        return check_texts(texts)

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
