"""Who explains and scores: a loaded chat model (:class:`ModelChat`) or an OpenAI-compatible server
(:class:`EndpointChat`, standard-library HTTP: vLLM, llama.cpp's server, Ollama, ``transformers serve``).

Both answer the same three questions: ``complete`` (a short answer per conversation), ``yes_probability``
(P(Yes) / (P(Yes) + P(No)) of the first answer token) and, for a local model only, ``digit_expectations``
(the expected digit 0-9 at each of many places in one forward pass: the simulation scorer). Any object with
``name``, ``complete`` and ``yes_probability`` can stand in for them.

Example
-------
>>> from interplab.core.autointerp.clients import chat_client
>>> client = chat_client(None)                          # the embedded SmolLM2-135M-Instruct
>>> client = chat_client("http://127.0.0.1:8080/v1")   # a server; it must answer within seconds
"""

from __future__ import annotations

import functools
import json
import math
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import torch

from ..model.chat import check_chat_template
from ..model.model import Model
from ..model.trace_ops import log_normaliser, token_probs
from .prefix import PrefixRunner, takes_prefix_cache

Messages = list[dict[str, str]]
YES, NO = ("Yes", " Yes", "yes", " yes", "YES"), ("No", " No", "no", " no", "NO")
DIGITS = tuple(str(d) for d in range(10))
#: The prefix runner's Yes/No passes take this many times ``batch_size`` prompts each (one logit row kept per prompt:
#: on 2 cores, batches of 32 scored in about 0.8 of the time of batches of 8).
YES_BATCH = 4
#: Seconds an endpoint has to answer its first request (the model list) before it counts as down.
CONNECT_TIMEOUT = 3.0


class ChatClient(Protocol):
    """What an explainer or scorer model answers."""

    name: str

    def complete(self, conversations: Sequence[Messages], max_new_tokens: int) -> list[str]: ...

    def yes_probability(self, conversations: Sequence[Messages]) -> np.ndarray: ...


def _single_ids(tokenizer: Any, words: Sequence[str]) -> list[int]:
    ids = {tuple(tokenizer(w, add_special_tokens=False)["input_ids"]) for w in words}
    return sorted({i[0] for i in ids if len(i) == 1})


class ModelChat:
    """A loaded interplab model with a chat template, asked through its own generation and logits."""

    def __init__(self, model: Model, batch_size: int = 8, prefix_cache: bool = False) -> None:
        check_chat_template(model.tokenizer, model.name)
        self.model, self.name, self.batch_size = model, model.name, batch_size
        #: The shared-prefix runner (:mod:`.prefix`) when asked for and the model takes it; None: one plain pass
        #: per batch through :meth:`Model.logits` / :meth:`Model.generate`.
        self.runner = PrefixRunner(model, batch_size) if prefix_cache and takes_prefix_cache(model) else None
        self.yes_ids, self.no_ids = _single_ids(model.tokenizer, YES), _single_ids(model.tokenizer, NO)
        self.digit_ids = [_single_ids(model.tokenizer, [d]) for d in DIGITS]
        if not self.yes_ids or not self.no_ids:
            raise ValueError(f"{model.name!r}'s tokenizer has no single token for 'Yes' or 'No': it cannot score.")

    def prompt(self, messages: Messages) -> str:
        """The conversation as the model's prompt text, ready for its answer."""
        return self.model.chat_prompt(messages)

    def complete(self, conversations: Sequence[Messages], max_new_tokens: int) -> list[str]:
        """Each conversation's greedy answer."""
        return self.complete_until(conversations, max_new_tokens, None)

    def complete_until(
        self, conversations: Sequence[Messages], max_new_tokens: int, ended: Callable[[str], bool] | None
    ) -> list[str]:
        """Each conversation's greedy answer, cut short (with the prefix runner) once ``ended(answer so far)``."""
        texts = [self.prompt(m) for m in conversations]
        runner = self._runner_for(texts)
        if runner is not None:
            decode = functools.partial(self.model.tokenizer.decode, skip_special_tokens=True)
            finished = None if ended is None else lambda ids: ended(decode(ids))
            ids = runner.greedy(self._ids(texts), max_new_tokens, self._stop_ids(), finished)
            return [t.strip() for t in self.model.tokenizer.batch_decode(ids, skip_special_tokens=True)]
        out: list[str] = []
        for first in range(0, len(texts), self.batch_size):
            out += self.model.generate(texts[first : first + self.batch_size], max_new_tokens=max_new_tokens)
        return [t.strip() for t in out]

    def yes_probability(self, conversations: Sequence[Messages]) -> np.ndarray:
        """[N] P(Yes) / (P(Yes) + P(No)) of each answer's first token."""
        texts = [self.prompt(m) for m in conversations]
        runner = self._runner_for(texts)
        if runner is not None:
            return self._yes_share(runner.last_logits(self._ids(texts), YES_BATCH * self.batch_size))
        chunks = [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]
        return self._yes_share(torch.cat([self.model.logits(c, batch_size=self.batch_size)[:, 0] for c in chunks]))

    def _yes_share(self, logits_NV: torch.Tensor) -> np.ndarray:
        yes_N = log_normaliser(logits_NV[:, self.yes_ids])
        no_N = log_normaliser(logits_NV[:, self.no_ids])
        return torch.sigmoid(yes_N - no_N).numpy()

    def _runner_for(self, texts: Sequence[str]) -> PrefixRunner | None:
        """The prefix runner when it takes ``texts``: several prompts share a prefix worth computing once (a single
        prompt takes the plain pass, whose numbers it then matches exactly); None for the plain pass."""
        return self.runner if len(texts) > 1 else None

    def _ids(self, texts: Sequence[str]) -> list[list[int]]:
        return [list(self.model.tokenizer(t)["input_ids"]) for t in texts]  # the ids Model.logits reads

    def _stop_ids(self) -> list[int]:
        found = getattr(getattr(self.model.module, "generation_config", None), "eos_token_id", None)
        stops = [found] if isinstance(found, int) else list(found or [])
        eos = self.model.tokenizer.eos_token_id
        return [int(i) for i in stops + ([eos] if eos is not None else [])]

    def digit_expectations(self, messages: Messages, lines: Sequence[str]) -> np.ndarray:
        """[len(lines)] the expected digit after each ``line + tab`` of an answer written line by line (one pass)."""
        return self.digit_expectations_batch([(messages, lines)])[0]

    def digit_expectations_batch(self, items: Sequence[tuple[Messages, Sequence[str]]]) -> list[np.ndarray]:
        """:meth:`digit_expectations` of each ``(messages, lines)``, batched (with the shared prefix computed once)."""
        texts, positions = [], []
        for messages, lines in items:
            text, ends = self.prompt(messages), []
            for line in lines:
                text += line + "\t"
                ends.append(len(text))
                text += "0\n"
            stops = [span[1] for span in self.model.tokenizer(text, return_offsets_mapping=True)["offset_mapping"]]
            texts.append(text)
            positions.append([stops.index(e) if e in stops else int(np.searchsorted(stops, e)) for e in ends])
        runner = self._runner_for(texts)
        if runner is not None:
            found = runner.logits_at(self._ids(texts), positions)
        else:
            found = [self.model.logits(t, positions=p)[0] for t, p in zip(texts, positions)]
        return [self._expected_digit(logits_PV) for logits_PV in found]

    def _expected_digit(self, logits_PV: torch.Tensor) -> np.ndarray:
        probs_PD = token_probs(torch.stack([log_normaliser(logits_PV[:, ids]) for ids in self.digit_ids], 1))
        return (probs_PD @ torch.arange(10.0)).numpy()


class EndpointChat:
    """An OpenAI-compatible chat server by URL; checked to answer within :data:`CONNECT_TIMEOUT` seconds."""

    def __init__(self, url: str, model: str | None = None, timeout: float = 60.0) -> None:
        base = url.rstrip("/")
        self.base = base if base.endswith("/v1") else base + "/v1"
        self.timeout = timeout
        listed = self._request("GET", "/models", None, CONNECT_TIMEOUT)
        names = [m.get("id") for m in listed.get("data", []) if isinstance(m, dict)]
        self.model = model or (names[0] if names else "default")
        self.name = f"{self.model} at {self.base}"
        #: Whether the server answered a Yes/No question without log-probabilities (warned once).
        self.answered_without_logprobs = False

    def _request(self, method: str, path: str, body: dict | None, timeout: float) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                found = json.loads(response.read(10_000_000).decode("utf-8"))
        except (urllib.error.URLError, TimeoutError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise ConnectionError(
                f"The explainer endpoint {self.base + path!r} did not answer within {timeout:g} s ({reason}). "
                "Start the server, or check its URL (an OpenAI-compatible server: vLLM, llama.cpp's server, Ollama)."
            ) from None
        except ValueError as err:
            raise ConnectionError(f"The explainer endpoint {self.base + path!r} answered no JSON ({err}).") from None
        if not isinstance(found, dict):
            raise ConnectionError(f"The explainer endpoint {self.base + path!r} answered {str(found)[:80]!r}.")
        return found

    def _chat(self, messages: Messages, **options: Any) -> dict:
        body = {"model": self.model, "messages": messages, "temperature": 0, **options}
        answer = self._request("POST", "/chat/completions", body, self.timeout)
        choices = answer.get("choices") or [{}]
        return choices[0] if isinstance(choices[0], dict) else {}

    def complete(self, conversations: Sequence[Messages], max_new_tokens: int) -> list[str]:
        """Each conversation's answer (temperature 0)."""
        out = []
        for messages in conversations:
            choice = self._chat(messages, max_tokens=max_new_tokens)
            out.append(str((choice.get("message") or {}).get("content") or "").strip())
        return out

    def yes_probability(self, conversations: Sequence[Messages]) -> np.ndarray:
        """[N] P(Yes) / (P(Yes) + P(No)) from the first token's top log-probabilities; 1 or 0 by the answer's word,
        with a warning, from a server that gives none (``transformers serve``)."""
        out = []
        for messages in conversations:
            choice = self._chat(messages, max_tokens=1, logprobs=True, top_logprobs=10)
            content = ((choice.get("logprobs") or {}).get("content") or [{}])[0] or {}
            tops = content.get("top_logprobs") or []
            yes = sum(math.exp(t["logprob"]) for t in tops if t.get("token", "").strip() in ("Yes", "yes", "YES"))
            no = sum(math.exp(t["logprob"]) for t in tops if t.get("token", "").strip() in ("No", "no", "NO"))
            if yes + no > 0:
                out.append(yes / (yes + no))
            else:
                word = str((choice.get("message") or {}).get("content") or "").strip().lower()
                out.append(1.0 if word.startswith("yes") else 0.0)
                self._warn_without_logprobs()
        return np.asarray(out, dtype=np.float32)

    def _warn_without_logprobs(self) -> None:
        if not self.answered_without_logprobs:
            warnings.warn(
                f"{self.name!r} answers without log-probabilities (it ignores 'logprobs' and 'top_logprobs'): "
                "P(Yes) is its answer word, 1 or 0, so AUROC counts ties and balanced accuracy is the answers' own.",
                stacklevel=3,
            )
        self.answered_without_logprobs = True


def chat_client(explainer: Any, prefix_cache: bool = False) -> Any:
    """The client for ``explainer``: None (the embedded SmolLM2-135M-Instruct), an embedded model's name, a loaded
    :class:`Model` with a chat template, an ``http(s)://`` URL of an OpenAI-compatible server, or a client object;
    an error naming the valid choices otherwise (before any generation). ``prefix_cache``: a local model runs batches
    with their shared prompt prefix computed once (:mod:`.prefix`; the same answers up to the rounding of its
    dtype)."""
    from ..loading.embedded import EMBEDDED, SMOLLM2_NAME
    from ..loading.load import load_model

    if explainer is None:
        explainer = SMOLLM2_NAME
    if isinstance(explainer, Model):
        return ModelChat(explainer, prefix_cache=prefix_cache)
    if isinstance(explainer, str) and explainer.startswith(("http://", "https://")):
        return EndpointChat(explainer)
    if isinstance(explainer, str) and explainer in EMBEDDED:
        return ModelChat(load_model(explainer), prefix_cache=prefix_cache)
    if all(hasattr(explainer, a) for a in ("name", "complete", "yes_probability")) and not isinstance(explainer, str):
        return explainer
    raise ValueError(
        f"explainer={explainer!r:.80} is not an explainer: give None (the embedded {SMOLLM2_NAME!r}), one of "
        f"{sorted(EMBEDDED)}, a loaded chat model (ilab.load_model(...)), or an OpenAI-compatible server's URL "
        "('http://127.0.0.1:8080/v1')."
    )
