"""Fixtures of the SAE tests: planted activations at two sites, stores holding them, a tiny GPT-2."""

from __future__ import annotations

import pytest
import torch
from interplab.core.data.store import ActivationStore

from tests.saes.helpers import D_A, D_B, N_STORE, SITE_A, SITE_B, planted, write_store


@pytest.fixture(scope="module")
def x_a() -> torch.Tensor:
    return planted(N_STORE, D_A, seed=100)


@pytest.fixture(scope="module")
def x_b() -> torch.Tensor:
    return planted(N_STORE, D_B, m=32, active=2, seed=101)


@pytest.fixture(scope="module")
def store(tmp_path_factory, x_a) -> ActivationStore:
    return write_store(tmp_path_factory.mktemp("store") / "acts", {SITE_A: x_a})


@pytest.fixture(scope="module")
def store2(tmp_path_factory, x_a, x_b) -> ActivationStore:
    return write_store(tmp_path_factory.mktemp("store2") / "acts", {SITE_A: x_a, SITE_B: x_b})
