"""Altair charts that render offline: in JupyterLab, in exported HTML, with no CDN.

Altair's default renderer loads vega from a CDN, and JupyterLab's built-in renderer does
not read Vega-Lite 6. Charts made by interplab switch altair to its ``svg`` renderer
(vl-convert, bundled in a wheel) unless the user already chose a renderer, so every
chart becomes a plain ``image/svg+xml`` output that any viewer shows.

Example
-------
>>> chart = offline(alt.Chart(df).mark_bar().encode(x="scale", y="metric"))
>>> chart        # shown as SVG
"""

from __future__ import annotations

from typing import Any


def offline(chart: Any) -> Any:
    """Return ``chart`` after making sure altair renders it as SVG (when the renderer is still the default)."""
    import altair as alt

    if alt.renderers.active == "default":
        try:
            import vl_convert  # noqa: F401
        except ImportError:  # pragma: no cover - vl-convert-python is a dependency
            return chart
        alt.renderers.enable("svg")
    return chart
