"""Planted latents: feature data built by hand in which latent m fires exactly on one word (activation 1 on that
token, 0 elsewhere), and a judge that answers the scorers' questions by their brute-force definitions."""

from __future__ import annotations

import re

import numpy as np
from interplab.core.features import FeatureData

WORDS = (" Paris", " dogs", " pizza", " Monday")
PREFIXES = ("Yesterday I read about", "She told me about", "We talked for hours about", "Everyone at work knows",
            "He wrote a long note on", "They keep asking about", "My sister dreams about", "The radio mentioned",
            "Nobody here cares about", "I finally learned about", "The teacher asked about",
            "Our neighbours love")  # fmt: skip
SUFFIXES = (" and then went home.", " while it rained outside.", " before lunch.", " with great interest.")


def planted_texts(word: str) -> list[str]:
    return [f"{p}{word}{SUFFIXES[n % len(SUFFIXES)]}" for n, p in enumerate(PREFIXES)]


def planted_data(tokenizer, context: int = 12) -> FeatureData:
    """Feature data of len(WORDS) latents; latent m's top examples are windows of texts holding WORDS[m], its
    activation 1 exactly at that word's token; each window's max sits at ``lead``."""
    d_sae, n_top, lead = len(WORDS), len(PREFIXES), context * 2 // 3
    tokens = -np.ones((d_sae, n_top, context), dtype=np.int32)
    acts = np.zeros((d_sae, n_top, context), dtype=np.float32)
    strings: dict[int, str] = {}
    for m, word in enumerate(WORDS):
        (word_id,) = tokenizer(word, add_special_tokens=False)["input_ids"]
        for k, text in enumerate(planted_texts(word)):
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            at = ids.index(word_id)
            for c in range(context):
                src = at - lead + c
                if 0 <= src < len(ids):
                    tokens[m, k, c] = ids[src]
                    strings[ids[src]] = tokenizer.decode([ids[src]])
            acts[m, k, lead] = 1.0
    zeros = np.zeros((d_sae, 2), dtype=np.float32)
    return FeatureData(
        site="blocks.0.hook_resid_post", d_sae=d_sae, n_tokens=1000, context=context, lead=lead,
        density=np.full(d_sae, 0.01, np.float32), max_act=np.ones(d_sae, np.float32),
        mean_act=np.ones(d_sae, np.float32), hist_edges=np.tile(np.linspace(0, 1, 3, dtype=np.float32), (d_sae, 1)),
        hist_counts=np.zeros((d_sae, 2), np.int64),
        top_tokens=tokens, top_acts=acts, top_max=np.ones((d_sae, n_top), np.float32),
        top_where=np.zeros((d_sae, n_top, 2), np.int64),
        quantile_tokens=tokens[:, :0], quantile_acts=acts[:, :0], quantile_max=np.zeros((d_sae, 0), np.float32),
        quantile_where=np.zeros((d_sae, 0, 2), np.int64),
        logit_top_ids=zeros.astype(np.int32), logit_top_values=zeros, logit_bottom_ids=zeros.astype(np.int32),
        logit_bottom_values=zeros, neighbour_ids=np.array([[(m + 1) % d_sae] for m in range(d_sae)], np.int32),
        neighbour_sims=np.ones((d_sae, 1), np.float32), token_strings=strings, model_name="planted",
    )  # fmt: skip


def explanation_of(word: str) -> str:
    return f'the word "{word.strip()}"'


class WordJudge:
    """Answers detection and fuzzing questions exactly: the explanation names a word in quotes; a text is a Yes when
    it holds the word (detection) or when every marked span is exactly the word (fuzzing). An explanation that names
    no word gets 0.5 for every text. Completions name the word the marked tokens hold."""

    name = "word judge"

    def yes_probability(self, conversations) -> np.ndarray:
        out = []
        for messages in conversations:
            asked = messages[-1]["content"]
            named = re.search(r'fires on: the (?:word|token) "([^"]+)"', asked)
            text = asked.split("Text: ", 1)[-1] if "Text: " in asked else asked.split("<< and >>:\n", 1)[-1]
            if named is None:
                out.append(0.5)
            elif "<<" in text:
                spans = re.findall(r"<<(.*?)>>", text)
                out.append(float(bool(spans) and all(s.strip() == named.group(1) for s in spans)))
            else:
                out.append(float(re.search(rf"\b{re.escape(named.group(1))}\b", text) is not None))
        return np.array(out)

    def complete(self, conversations, max_new_tokens: int) -> list[str]:
        out = []
        for messages in conversations:
            listed = "\n".join(re.findall(r"^\d+\. .*$", messages[-1]["content"], re.M))
            spans = re.findall(r"<<(.*?)>>", listed)
            out.append(explanation_of(spans[0]) if spans else "nothing")
        return out
