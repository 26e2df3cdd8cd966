"""The endpoint path against a real third-party OpenAI-compatible server: ``transformers serve`` (transformers' own
FastAPI server, its ``serving`` extra: fastapi, uvicorn, openai) serving the prepared SmolLM2-135M-Instruct folder
on 127.0.0.1, offline, greedy in float32 on the CPU. One server per run (about 15 s to start).

What it answers: ``/v1/models``, ``/v1/chat/completions`` (``temperature`` 0 is greedy) and ``/health``. It ignores
``logprobs`` and ``top_logprobs``, so a detection score over it comes from the answer words (1 or 0, with a warning),
not from P(Yes); the simulation scorer needs a local model.

llama.cpp's server from PyPI (``llama-cpp-python[server]``) ships as a source distribution only; its build did not
finish within 30 minutes on this project's 2 shared cores."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from interplab.core.autointerp.clients import EndpointChat, ModelChat
from interplab.core.loading.embedded import SMOLLM2_NAME, embedded_model_dir

import interplab as ilab
from tests.autointerp.planted import WORDS, planted_data

pytestmark = pytest.mark.embedded

#: Seconds the server has to load the model and answer /health (it takes about 15 on a loaded 2-core machine).
READY_WITHIN = 120.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1.0) as response:
            return json.loads(response.read()).get("status") == "ok"
    except (OSError, ValueError):
        return False


def _wait_until_ready(server: subprocess.Popen, url: str, log: Path) -> None:
    """Returns once the server answers /health; a failure with the end of its log when it exits or stays silent."""
    deadline = time.monotonic() + READY_WITHIN
    while not _healthy(url):
        if server.poll() is not None:
            pytest.fail(f"transformers serve exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(
                f"transformers serve did not answer {url}/health in {READY_WITHIN:g} s:\n{log.read_text()[-2000:]}"
            )
        time.sleep(0.25)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(URL, model id) of ``transformers serve`` on a free port of 127.0.0.1, serving the prepared SmolLM2 folder."""
    folder = embedded_model_dir(SMOLLM2_NAME)
    assert (folder / "config.json").is_file(), f"{folder} is not prepared: run `python -m interplab prepare`"
    port, log = _free_port(), tmp_path_factory.mktemp("serve") / "serve.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(folder), "--host", "127.0.0.1",
               "--port", str(port), "--device", "cpu", "--dtype", "float32"]  # fmt: skip
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_ready(server, url, log)
        yield url, str(folder)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def planted(smollm2):
    return planted_data(smollm2.tokenizer)


@pytest.fixture(scope="module")
def explained_here(smollm2, planted):
    """Latents 0 and 1 explained by the local SmolLM2, unpadded as the server runs it."""
    return ilab.autointerp.explain(planted, [0, 1], explainer=ModelChat(smollm2, batch_size=1), max_new_tokens=12)


class Recorder:
    """A client that passes each Yes/No question to ``inner`` and keeps the conversations and answers."""

    def __init__(self, inner: EndpointChat) -> None:
        self.inner, self.name = inner, inner.name
        self.asked: list = []
        self.answered: list[float] = []

    def complete(self, conversations, max_new_tokens: int) -> list[str]:
        return self.inner.complete(conversations, max_new_tokens)

    def yes_probability(self, conversations) -> np.ndarray:
        found = self.inner.yes_probability(conversations)
        self.asked += list(conversations)
        self.answered += found.tolist()
        return found


def test_transformers_serve_explains_as_the_local_model_does(served, planted, explained_here):
    url, model_id = served
    remote = ilab.autointerp.explain(planted, [0, 1], explainer=url + "/v1", max_new_tokens=12)
    local = explained_here
    assert remote.explainer == f"{model_id} at {url}/v1"
    assert remote.texts == local.texts and remote.prompts == local.prompts
    assert WORDS[0].strip() in remote.texts[0] and WORDS[1].strip() in remote.texts[1]


def test_detection_over_transformers_serve_scores_from_its_answer_words(smollm2, served, planted, explained_here):
    """The server sends no log-probabilities: each detection answer is 1 exactly when the local model's greedy
    first answer token is a Yes, and the table still holds both baselines."""
    url, _ = served
    judge = Recorder(EndpointChat(url))
    with pytest.warns(UserWarning, match="without log-probabilities"):
        table = ilab.autointerp.score(planted, explained_here, "detection", judge, n_examples=1).table
    assert judge.inner.answered_without_logprobs
    assert len(judge.asked) == 2 * 3 * 2  # latents x (own, shuffled, constant) x (1 activating + 1 not)
    local = [smollm2.generate(smollm2.chat_prompt(m), max_new_tokens=1)[0] for m in judge.asked]
    assert judge.answered == [float(word.strip().lower().startswith("yes")) for word in local]
    assert set(table["metric"]) == {"auroc", "balanced_accuracy"} and len(table) == 4
    assert table[["explanation", "shuffled", "constant"]].notna().all().all()
