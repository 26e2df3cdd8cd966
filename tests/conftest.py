from __future__ import annotations

import pytest

from tests.tiny import FAMILIES, tiny_model


@pytest.fixture(params=FAMILIES)
def family(request) -> str:
    return request.param


@pytest.fixture
def model(family):
    """A tiny random interplab Model of each family in turn."""
    return tiny_model(family)


@pytest.fixture(scope="session")
def embedded():
    """The real embedded Gemma 3 270M (loaded once per run)."""
    import interplab as ilab

    return ilab.load_model()


@pytest.fixture(autouse=True)
def _one_thread_for_tiny_models(request):
    """Tiny models gain nothing from threads, and oversubscribing 2 cores slows them several-fold."""
    import torch

    if request.node.get_closest_marker("embedded") or "embedded" in request.fixturenames:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def gpt2():
    """A tiny random GPT-2 Model, shared by a module's tests."""
    return tiny_model("gpt2")


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    """A test's own interplab cache folder, no progress bars, and the default memory budget afterwards."""
    from interplab.core.memory.budget import set_memory_budget

    monkeypatch.setenv("INTERPLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    yield
    set_memory_budget(None)


@pytest.fixture(scope="session")
def smollm2():
    """The real embedded SmolLM2-135M-Instruct, the chat model (loaded once per run)."""
    import interplab as ilab

    return ilab.load_model("smollm2-135m-instruct")
