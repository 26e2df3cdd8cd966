"""Tiny randomly initialised models of each supported family, built in-process (milliseconds)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPTNeoXConfig,
    LlamaConfig,
    PreTrainedTokenizerFast,
)

import interplab as ilab

WORDS = (
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "on",
    "mat",
    "and",
    "ran",
    "to",
    "house",
    "Mary",
    "John",
    "gave",
    "drink",
    "store",
    "when",
    "went",
    "bird",
    "tree",
    "red",
    "blue",
    "green",
    "big",
    "small",
    "happy",
    "sad",
    "quick",
    "slow",
    "fox",
    "jumps",
    "over",
    "lazy",
    "day",
    "night",
)
VOCAB_SIZE = 64
FAMILIES = ("gpt2", "gemma3", "llama", "neox")


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer over WORDS with BOS 1, EOS 2, PAD 0 that adds BOS."""
    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3}
    for w in WORDS:
        vocab[w] = len(vocab)
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    from tokenizers.processors import TemplateProcessing

    tk.post_processor = TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )


def tiny_config(family: str):
    common = dict(vocab_size=VOCAB_SIZE, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if family == "gpt2":
        return GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=128, **common)
    if family == "gemma3":
        return Gemma3TextConfig(
            num_hidden_layers=2,
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=16,
            max_position_embeddings=128,
            sliding_window=8,
            **common,
        )
    if family == "llama":
        return LlamaConfig(
            num_hidden_layers=2,
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=128,
            **common,
        )
    if family == "neox":
        return GPTNeoXConfig(
            num_hidden_layers=2,
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=4,
            max_position_embeddings=128,
            **common,
        )
    raise ValueError(family)


def tiny_hf_model(family: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(tiny_config(family)).eval()


def tiny_model(family: str, seed: int = 0, remote: bool | str = False) -> ilab.Model:
    """An interplab Model around a tiny random model of the given family."""
    return ilab.load_model(tiny_hf_model(family, seed), tokenizer=tiny_tokenizer(), remote=remote)


TEXTS = [
    "the cat sat on the mat",
    "Mary and John went to the store and John gave a drink to Mary",
    "the quick red fox jumps over the lazy dog",
]


@contextlib.contextmanager
def no_forward(model: ilab.Model) -> Iterator[None]:
    """Inside the block any forward pass of ``model`` fails the test: a refusal must come before the work."""

    def refuse(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("a forward pass ran before the bad input was refused")

    before = model.module.forward
    model.module.forward = refuse
    try:
        yield
    finally:
        model.module.forward = before
