"""A progress bar that records what a long call reports to it (``progress=RecordingBar()``): totals and steps."""

from __future__ import annotations


class RecordingBar:
    """What ``core/storage/progress.py`` asks of a bar (``reset``, ``update``), keeping the total and the steps."""

    def __init__(self) -> None:
        self.total: int | None = None
        self.n = 0
        self.resets = 0

    def reset(self, total: int | None = None) -> None:
        self.total, self.n = total, 0
        self.resets += 1

    def update(self, n: int = 1) -> None:
        self.n += n
