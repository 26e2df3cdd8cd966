"""One progress-bar convention for every long call: ``progress=True`` shows a tqdm bar, ``False`` shows none, and
a bar (anything with ``reset`` and ``update``: a background job's, or a test's recorder) is reset and updated in
place. ``TQDM_DISABLE`` set in the environment (``1``, ``true``) silences every bar, read at each bar (tqdm itself reads
it once, at import, and not for a bar given ``disable=`` explicitly).

Example
-------
>>> with progress_bar(n_layers, desc="patching resid_pre", show=progress, unit="layer") as bar:
...     for layer in range(n_layers):
...         ...
...         bar.update(1)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from tqdm.auto import tqdm


def check_progress(show: Any) -> Any:
    """``show`` as given when it is True, False or a bar with ``update``; a clear TypeError otherwise."""
    if isinstance(show, bool) or (hasattr(show, "update") and hasattr(show, "reset")):
        return show
    raise TypeError(f"progress must be True, False or a progress bar (a tqdm bar), got {type(show).__name__}: "
                    f"{show!r:.80}.")  # fmt: skip


def silenced() -> bool:
    """Whether ``TQDM_DISABLE`` in the environment asks for no bars."""
    return os.environ.get("TQDM_DISABLE", "").strip().lower() in ("1", "true", "yes", "on")


@contextlib.contextmanager
def progress_bar(total: int | None, initial: int = 0, desc: str = "", show: Any = True, **style: Any) -> Iterator[Any]:
    """A tqdm bar from ``initial`` (the work already done) to ``total`` steps, closed at the end.

    ``show``: True, False (no bar), or a bar to reuse (reset to ``total`` here and left open). ``style``: tqdm's
    ``unit``, ``unit_scale``, ``leave``.
    """
    show = check_progress(show)
    if not isinstance(show, bool):
        show.reset(total=total)
        show.update(initial)
        yield show
        return
    bar = tqdm(total=total, initial=initial, desc=desc, disable=not show or silenced(), **style)
    try:
        yield bar
    finally:
        bar.close()
