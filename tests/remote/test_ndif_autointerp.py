"""Explanations by the chat model served on a real self-hosted NDIF, equal to the ones made here.

The session's server (``conftest.ndif_server``) serves the embedded Gemma; SmolLM2-135M-Instruct is deployed on it as
a second model, and ``explain`` runs with the remote model as its explainer through the same engine (generation and
the Yes/No log-probabilities as traces on the server).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.autointerp.clients import ModelChat
from interplab.core.loading.embedded import SMOLLM2_NAME, prepare_embedded_model

import interplab as ilab
from tests.autointerp.planted import WORDS, planted_data
from tests.remote.conftest import load_serve

pytestmark = [pytest.mark.ndif, pytest.mark.embedded]


@pytest.fixture(scope="module")
def chat_models(ndif_server, monkeypatch_module):
    """SmolLM2 on the server (deployed beside the embedded model) and here, both in float32."""
    name = load_serve().deploy(ndif_server, prepare_embedded_model(name=SMOLLM2_NAME))
    monkeypatch_module.setenv("NDIF_API_KEY", ndif_server.api_key)
    monkeypatch_module.delenv("NDIF_HOST", raising=False)
    remote = ilab.load_model(name, remote=ndif_server.host, dtype=torch.float32)
    return remote, ilab.load_model(SMOLLM2_NAME, dtype=torch.float32)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_explanations_by_the_ndif_model_equal_the_local_ones(chat_models):
    remote, local = chat_models
    data = planted_data(local.tokenizer)
    there = ilab.autointerp.explain(data, [0, 1], explainer=ModelChat(remote, batch_size=1))
    here = ilab.autointerp.explain(data, [0, 1], explainer=ModelChat(local, batch_size=1))
    assert there.texts == here.texts and there.prompts == here.prompts
    assert WORDS[0].strip() in there.texts[0]


def test_yes_probability_on_ndif_equals_the_local_one(chat_models):
    remote, local = chat_models
    asked = [[{"role": "user", "content": f"Is {w.strip()} a city? Answer Yes or No."}] for w in WORDS]
    np.testing.assert_allclose(ModelChat(remote).yes_probability(asked), ModelChat(local).yes_probability(asked),
                               atol=1e-3)  # fmt: skip
