"""``%load_ext interplab``: interplab results display as widgets; ``%interplab`` sets options.

In a Jupyter kernel, a cell whose value is an interplab result (``Activations`` now;
SAEs, patching and steering results register here as they arrive) shows its widget.
In a terminal IPython the concise text ``repr`` is shown instead.

Example
-------
>>> %load_ext interplab
>>> acts                                  # renders as a FeatureHeatmap
>>> %interplab                            # show display options
>>> %interplab scheme=dark page_tokens=500
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from interplab.core.checks import check_positive_int
from interplab.core.model.activations import Activations
from interplab.widgets._kit import OPTIONS, SCHEMES

logger = logging.getLogger(__name__)

#: type -> function building its widget; other modules add to it with :func:`register_display`.
DISPLAYS: dict[type, Callable[[Any], Any]] = {}


def register_display(cls: type, make_widget: Callable[[Any], Any]) -> None:
    """Show instances of ``cls`` as ``make_widget(obj)`` once the extension is loaded."""
    DISPLAYS[cls] = make_widget
    shell = _shell()
    if shell is not None and getattr(shell, "_interplab_loaded", False):
        _register(shell, cls, make_widget)


def _activations_widget(acts: Activations) -> Any:
    from interplab.widgets.heatmap import FeatureHeatmap

    return FeatureHeatmap(acts, site=acts.sites[0])


def _shell() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return None
    return get_ipython()


def _is_kernel(shell: Any) -> bool:
    return type(shell).__name__ == "ZMQInteractiveShell"


def _register(shell: Any, cls: type, make_widget: Callable[[Any], Any]) -> None:
    if not _is_kernel(shell):
        return  # terminals keep the concise text repr

    def bundle(obj: Any, include: Any = None, exclude: Any = None) -> Any:
        data = make_widget(obj)._repr_mimebundle_()
        if isinstance(data, tuple):
            data = data[0]
        return {**data, "text/plain": repr(obj)}

    shell.display_formatter.mimebundle_formatter.for_type(cls, bundle)


def _parse_value(key: str, raw: str) -> Any:
    if key == "scheme":
        if raw not in SCHEMES:
            raise ValueError(f"scheme={raw!r} is not one of {SCHEMES}.")
        return raw
    value: int | str
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        value = raw
    return check_positive_int(key, value)


def interplab_magic(line: str) -> dict[str, Any]:
    """``%interplab [key=value ...]``: set display options, then show them all."""
    for item in line.split():
        key, sep, raw = item.partition("=")
        if not sep or key not in OPTIONS:
            raise ValueError(f"Unknown option {item!r}; use key=value with keys {sorted(OPTIONS)}.")
        OPTIONS[key] = _parse_value(key, raw)
    return dict(OPTIONS)


def load_ipython_extension(shell: Any) -> None:
    """Called by ``%load_ext interplab``."""
    for cls, make_widget in DISPLAYS.items():
        _register(shell, cls, make_widget)
    shell.register_magic_function(interplab_magic, magic_kind="line", magic_name="interplab")
    shell._interplab_loaded = True


register_display(Activations, _activations_widget)


def unload_ipython_extension(shell: Any) -> None:
    """Called by ``%unload_ext interplab``: results show as text again."""
    if _is_kernel(shell):
        for cls in DISPLAYS:
            shell.display_formatter.mimebundle_formatter.pop(cls, None)
    shell._interplab_loaded = False


def _patching_widget(result: Any) -> Any:
    from interplab.widgets.patching import PatchingGrid

    return PatchingGrid(result)


def _register_patching() -> None:
    from interplab.core.patching.result import PatchingResult

    register_display(PatchingResult, _patching_widget)


_register_patching()
