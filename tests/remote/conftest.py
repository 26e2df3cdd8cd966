"""A real self-hosted NDIF on 127.0.0.1 for the tests marked ``ndif`` (started once per run).

The server runs from its own environment (``.ndif-venv``, built by ``make ndif-env``; it has no
interplab) and serves the embedded model from a link to its prepared folder, so it knows it by
another name than the client does. It also holds the model in its Hugging Face cache as
``google/gemma-3-270m`` (listed, not deployed), as NDIF lists Hub models.

``ILAB_NDIF_REUSE=path.json`` (``{"host", "api_key", "model_name", "model_key"}`` of a server
started with ``python ndif-local/serve.py``) reuses a running server while developing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
HUB_ALIAS = "google/gemma-3-270m"


def load_serve():
    spec = importlib.util.spec_from_file_location("ilab_ndif_serve", REPO / "ndif-local" / "serve.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def embedded():
    """The embedded model in float32 for the remote tests, and the server loads it in float32 too.

    In bfloat16 (the default) two processes give results one bfloat16 step apart wherever their
    matrix products split sums over threads differently: logits 0.125 apart, and greedy generations
    that part at a near-tie. Compared in float32, a remote result equals the local one to 1e-3.
    """
    import torch

    import interplab as ilab

    return ilab.load_model(dtype=torch.float32)


@pytest.fixture(scope="session")
def ndif_server(embedded):
    """The running server: ``host``, ``api_key``, ``model_name`` (its name for the model), ``timings``.

    It loads the model in the dtype ``load_model()`` gives here, so results can be compared.
    """
    reuse = os.environ.get("ILAB_NDIF_REUSE")
    if reuse:
        yield SimpleNamespace(**{"timings": {}, "start_api": None, **json.loads(Path(reuse).read_text())})
        return
    from interplab.core.loading.embedded import prepare_embedded_model

    serve = load_serve()
    t0 = time.monotonic()
    dtype = str(embedded.dtype).removeprefix("torch.")
    server = None
    for attempt in range(2):  # a busy machine once kept the Ray head from answering: try once more, afresh
        try:
            server = serve.start(prepare_embedded_model(), hub_alias=HUB_ALIAS, dtype=dtype)
            break
        except RuntimeError as err:
            if attempt == 1:
                raise
            warnings.warn(f"NDIF did not start, trying once more: {str(err)[:2000]}", stacklevel=1)
    server.timings["fixture_s"] = round(time.monotonic() - t0, 1)
    try:
        yield server
    finally:
        server.stop()
        leftovers = serve.marked_pids(server.run_id)
        assert not leftovers, f"NDIF processes left running: {leftovers}"


@pytest.fixture
def ndif(ndif_server, monkeypatch):
    """The server, with this process's API key set to its key (and no other NDIF settings)."""
    monkeypatch.setenv("NDIF_API_KEY", ndif_server.api_key)
    monkeypatch.delenv("NDIF_HOST", raising=False)
    return ndif_server
