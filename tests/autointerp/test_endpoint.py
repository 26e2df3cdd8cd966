"""The endpoint path: EndpointChat over real HTTP on 127.0.0.1 against a minimal OpenAI-compatible server
(``/v1/models`` and ``/v1/chat/completions`` with ``logprobs``/``top_logprobs``) that answers with the embedded
SmolLM2 itself, so the explanations and P(Yes) that come back over HTTP must equal the local ones.

llama.cpp's server from PyPI (``llama-cpp-python[server]``) ships as a source distribution only; its build did not
finish within 30 minutes on this project's 2 shared cores, too long for ``make test``'s set-up."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch
from interplab.core.autointerp.clients import EndpointChat, ModelChat

import interplab as ilab
from tests.autointerp.planted import WORDS, planted_data

pytestmark = pytest.mark.embedded


def _server(model) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _send(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send({"object": "list", "data": [{"id": "smollm2", "object": "model"}]})

        def do_POST(self):
            asked = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            prompt = model.chat_prompt(asked["messages"])
            choice: dict = {"index": 0, "finish_reason": "stop"}
            if asked.get("logprobs"):
                logprobs = torch.log_softmax(model.logits(prompt)[0, 0], dim=0)
                top = torch.topk(logprobs, asked.get("top_logprobs", 5))
                tokens = [model.tokenizer.decode([int(i)]) for i in top.indices]
                entries = [{"token": t, "logprob": float(v)} for t, v in zip(tokens, top.values)]
                choice["logprobs"] = {"content": [{"token": tokens[0], "logprob": entries[0]["logprob"],
                                                   "top_logprobs": entries}]}  # fmt: skip
                text = tokens[0]
            else:
                (text,) = model.generate(prompt, max_new_tokens=asked.get("max_tokens", 16))
            choice["message"] = {"role": "assistant", "content": text}
            self._send({"object": "chat.completion", "model": asked["model"], "choices": [choice]})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def endpoint(smollm2):
    server = _server(smollm2)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_explanations_over_http_equal_the_local_ones(smollm2, endpoint):
    data = planted_data(smollm2.tokenizer)
    remote = ilab.autointerp.explain(data, [0, 1], explainer=endpoint)
    local = ilab.autointerp.explain(data, [0, 1], explainer=ModelChat(smollm2, batch_size=1))  # unpadded, as served
    assert remote.explainer == f"smollm2 at {endpoint}/v1"
    assert remote.texts == local.texts and remote.prompts == local.prompts
    assert WORDS[0].strip() in remote.texts[0]


def test_yes_probability_over_http_equals_the_local_one(smollm2, endpoint):
    asked = [[{"role": "user", "content": f"Is {w.strip()} a city? Answer Yes or No."}] for w in WORDS]
    over_http = EndpointChat(endpoint).yes_probability(asked)
    here = ModelChat(smollm2).yes_probability(asked)
    # the server sends the top 10 tokens only: the Yes and No variants outside them are missing over HTTP
    np.testing.assert_allclose(over_http, here, atol=0.05)
