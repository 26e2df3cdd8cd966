"""The one progress-bar convention (core/storage/progress.py): True shows a tqdm bar, False none, a bar is reused."""

from __future__ import annotations

import pytest
from interplab.core.storage.progress import check_progress, progress_bar

from tests.bars import RecordingBar


def test_a_given_bar_is_reset_to_the_total_and_left_open():
    bar = RecordingBar()
    with progress_bar(12, initial=3, desc="x", show=bar) as got:
        got.update(2)
    assert got is bar and (bar.total, bar.n, bar.resets) == (12, 5, 1)


@pytest.mark.parametrize("show", [True, False])
def test_true_and_false_give_a_tqdm_bar_shown_or_not(show, monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    with progress_bar(4, desc="x", show=show) as bar:
        assert bar.total == 4 and bar.disable is (not show)
        bar.update(4)


def test_tqdm_disable_in_the_environment_silences_a_shown_bar(monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "1")
    with progress_bar(4, desc="x", show=True) as bar:
        assert bar.disable
    given = RecordingBar()  # a bar handed over is the caller's: still updated
    with progress_bar(4, desc="x", show=given) as bar:
        bar.update(4)
    assert given.n == 4


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_anything_else_is_refused_naming_the_choices(bad):
    with pytest.raises(TypeError, match=r"progress must be True, False or a progress bar"):
        check_progress(bad)
