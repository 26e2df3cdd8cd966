"""Remote failures say what to do, within 10 seconds, with no weights loaded and nothing run here.

Against the real self-hosted NDIF (tests/remote/conftest.py) or a closed port. ``no_local_weights``
makes any local weight load fail the test, and each case is timed.
"""

from __future__ import annotations

import socket
import time

import nnsight
import pytest
import transformers
from interplab.core.model.remote import RemoteModelError, check_versions, compatible

import interplab as ilab
from tests.remote.conftest import HUB_ALIAS

pytestmark = pytest.mark.ndif
FAST_S = 10.0


@pytest.fixture(autouse=True)
def no_local_weights(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("weights were loaded locally")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    monkeypatch.setattr(nnsight.CONFIG.API, "APIKEY", None)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is


def fails_fast(match: str, call, *args, **kwargs) -> str:
    start = time.monotonic()
    with pytest.raises(RemoteModelError, match=match) as info:
        call(*args, **kwargs)
    assert time.monotonic() - start < FAST_S
    return str(info.value)


def test_unreachable_host(monkeypatch):
    host = f"http://127.0.0.1:{closed_port()}"
    text = fails_fast("Cannot reach the NDIF server", ilab.load_model, remote=host)
    assert host in text and "make ndif" in text
    monkeypatch.setenv("NDIF_HOST", host)  # remote=True reads the host from $NDIF_HOST
    fails_fast(f"Cannot reach the NDIF server at {host}", ilab.load_model, "org/model", remote=True)


def test_missing_and_rejected_api_keys(ndif_server, monkeypatch):
    monkeypatch.delenv("NDIF_API_KEY", raising=False)
    fails_fast("needs an API key and no key is set.*NDIF_API_KEY", ilab.load_model, remote=ndif_server.host)
    monkeypatch.setenv("NDIF_API_KEY", "11111111-2222-3333-4444-555555555555")
    fails_fast("rejected the API key .*Invalid API key", ilab.load_model, remote=ndif_server.host)
    monkeypatch.setenv("NDIF_API_KEY", "my-key")
    fails_fast("rejected the API key .*format", ilab.load_model, remote=ndif_server.host)


def test_model_not_hosted(ndif):
    text = fails_fast("'org/not-here' is not hosted", ilab.load_model, "org/not-here", remote=ndif.host)
    assert repr(ndif.model_name) in text  # the name the server knows its model by


def test_no_network_to_read_a_hosted_models_config(ndif, monkeypatch, tmp_path):
    """The server lists the model by its Hub id without a config (downloaded, not deployed), and the Hub
    cannot be reached from here (its address is a closed port)."""
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    text = fails_fast(f"hosts '{HUB_ALIAS}', but its config .* cannot be reached", ilab.load_model, HUB_ALIAS,
                      remote=ndif.host)  # fmt: skip
    assert "tokenizer=" in text


def test_the_embedded_model_with_remote_true(ndif, monkeypatch):
    monkeypatch.setenv("NDIF_HOST", ndif.host)
    model = ilab.load_model(remote=True)  # the server's name for it is found, and accepted
    assert model.nn.to_model_key() == ndif.model_key
    assert next(model.module.parameters()).device.type == "meta"


def test_a_server_that_needs_a_newer_nnsight(ndif):
    if ndif.start_api is None:
        pytest.skip("a reused server cannot start a second API")
    gated = ndif.start_api({"NDIF_MIN_NNSIGHT_VERSION": "0.9.0"})
    model = ilab.load_model(remote=gated)  # the server runs 0.8.0 and says so: compatible with 0.8.1
    start = time.monotonic()
    with pytest.raises(RemoteModelError, match=r"needs nnsight >= 0.9.0 .*nnsight 0.8.1.*pip install 'nnsight>=0.9.0'"):
        model.logits("Hello")
    assert time.monotonic() - start < FAST_S


def test_versions_that_do_not_fit_are_named_with_the_fix():
    assert compatible("0.8.1", "0.8.0") and not compatible("0.8.1", "0.7.0") and not compatible("0.9.0", "0.8.1")
    with pytest.raises(RemoteModelError, match=r"runs nnsight 0.7.0; this Python has nnsight 0.8.1 .*"
                                               r"pip install 'nnsight==0.7.0'"):  # fmt: skip
        check_versions("0.7.0", "http://ndif.example")
    check_versions("0.8.0", "http://ndif.example")  # fits: no error
