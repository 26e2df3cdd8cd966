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
