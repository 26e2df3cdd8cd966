"""``tests/gpu/`` needs CUDA: where ``torch.cuda.is_available()`` is false its tests are deselected (not skipped),
and every test here carries the ``gpu`` marker (``-m gpu`` selects them on a machine with one)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent


def _here(item: pytest.Item) -> bool:
    return HERE in Path(str(item.path)).parents


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if _here(item)]
    for item in ours:
        item.add_marker(pytest.mark.gpu)
    if ours and not torch.cuda.is_available():
        items[:] = [item for item in items if not _here(item)]
        config.hook.pytest_deselected(items=ours)
