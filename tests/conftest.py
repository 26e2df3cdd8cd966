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
