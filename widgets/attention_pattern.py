"""AttentionPattern: where each token of a text attends, head by head, layer by layer.

Example
-------
>>> w = ilab.widgets.AttentionPattern(model, "When Mary and John went to the store, John gave a drink to")
>>> w.layer, w.head = 10, 2        # show layer 10, head 2 (or click a thumbnail)
>>> w.selected_token               # the query token last clicked (-1 for none)
>>> w.pattern                      # the shown head's [query, key] probabilities
>>> w.hide_bos = True              # hide the BOS column; rows renormalised over the other keys
>>> w.renormalize = False          # ... or shown as computed (a row sums to 1 - its BOS attention)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import traitlets
from interplab.core.checks import check_int
from interplab.core.views.attention_pattern import AttentionData, attention_data, without_first_key
from interplab.core.views.colors import ColorScale

from ._kit import OPTIONS, Widget, array_payload, css, esm
from .lens import probability_scale


class AttentionPattern(Widget):
    """Heads x query x key attention probabilities of one text: a matrix for the chosen head, thumbnails of every
    head of the layer, and the tokens coloured by where the hovered token attends from and to.

    Parameters
    ----------
    source
        A model (with ``text``) or an :class:`~interplab.core.views.AttentionData`.
    text
        The text to read (with a model).
    layers
        Which layers to hold (all by default; one int for one layer).
    layer, head
        What to show first (default: the first layer held, head 0).
    scale, vmin, vmax, center
        The colour scale of the probabilities (default: sequential from 0 to 1; ``vmax=0.3`` brings out
        weak attention); see :meth:`set_scale`.
    hide_bos, renormalize
        Hide the first key's column (BOS, where most heads park attention) and, with ``renormalize`` (the
        default), divide each row by what it gives the other keys so it sums to 1 again; the panel says which.
    """

    _esm = esm("attention")
    _css = css("attention")

    tokens = traitlets.List(traitlets.Unicode()).tag(sync=True)
    layers = traitlets.List(traitlets.Int()).tag(sync=True)
    patterns = traitlets.Dict().tag(sync=True)  # float32 [n_layers held, heads, query, key]
    layer = traitlets.Int(0).tag(sync=True)  # a layer id among `layers`
    head = traitlets.Int(0).tag(sync=True)
    selected_token = traitlets.Int(-1).tag(sync=True)  # the query token last clicked (-1 for none)
    color_scale = traitlets.Dict().tag(sync=True)  # the resolved colour scale ({"kind", "vmin", "center", "vmax"})
    hide_bos = traitlets.Bool(False).tag(sync=True)  # the first key's (BOS) column hidden
    renormalize = traitlets.Bool(True).tag(sync=True)  # with hide_bos: rows renormalised over the other keys

    def __init__(
        self, source: Any, text: str | None = None, *, layers: int | Sequence[int] | None = None,
        layer: int | None = None, head: int = 0, scale: str = "sequential", vmin: float | None = None,
        vmax: float | None = None, center: float | None = None, hide_bos: bool = False, renormalize: bool = True,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        colours = probability_scale(scale, vmin, vmax, center)
        if isinstance(source, AttentionData):
            data = source
        elif hasattr(source, "run_sites"):  # a Model
            if not isinstance(text, str):
                raise TypeError("AttentionPattern(model, text): give the text to read.")
            _check_view(layer, head, source.n_layers, source.n_heads)  # before the forward pass
            data = attention_data(source, text, layers, max_values=int(OPTIONS["max_values"]))
        else:
            raise TypeError(
                f"AttentionPattern takes a model and a text, or AttentionData; got {type(source).__name__}."
            )
        self._data = data
        first = data.layers[0] if layer is None else layer
        if first not in data.layers:
            raise ValueError(f"layer={layer!r} is not among the layers held: {list(data.layers)}.")
        _check_view(None, head, None, int(data.patterns.shape[1]))
        super().__init__(
            tokens=data.tokens, layers=data.layers, patterns=array_payload(data.patterns, "float32"), layer=first,
            head=head, color_scale=colours.to_dict(), hide_bos=bool(hide_bos), renormalize=bool(renormalize), **kwargs,
        )  # fmt: skip

    def set_scale(
        self, scale: str = "sequential", *, vmin: float | None = None, vmax: float | None = None,
        center: float | None = None,
    ) -> ColorScale:  # fmt: skip
        """Recolour (see :meth:`interplab.widgets.LogitLens.set_scale`); returns the resolved scale.

        >>> w.set_scale(vmax=0.3)          # weak attention shows
        """
        colours = probability_scale(scale, vmin, vmax, center)
        self.color_scale = colours.to_dict()
        return colours

    @traitlets.validate("layer")
    def _check_layer(self, proposal: dict[str, Any]) -> int:
        value = proposal["value"]
        if self.layers and value not in self.layers:
            raise traitlets.TraitError(f"layer={value} is not among the layers held: {self.layers}.")
        return value

    @traitlets.validate("head")
    def _check_head(self, proposal: dict[str, Any]) -> int:
        value = proposal["value"]
        n = int(self.patterns["shape"][1]) if self.patterns else 0
        if n and not 0 <= value < n:
            raise traitlets.TraitError(f"head={value} is not a head of this model (0..{n - 1}).")
        return value

    @traitlets.validate("selected_token")
    def _check_token(self, proposal: dict[str, Any]) -> int:
        value = proposal["value"]
        if not -1 <= value < len(self.tokens):
            last = len(self.tokens) - 1
            raise traitlets.TraitError(f"selected_token={value} is not a position of this text (0..{last}).")
        return value

    @staticmethod
    def compare(before: Any, after: AttentionData | None = None, **kwargs: Any) -> Any:
        """Two patterns side by side, before | after, with layer, head and clicked token linked.

        ``before`` is an attention-drift result (``ilab.evals.attention_drift``) or AttentionData (then give
        ``after`` too); ``kwargs`` go to both widgets (``vmax=0.3``...). Returns an ``ipywidgets.HBox``.

        >>> ilab.widgets.AttentionPattern.compare(ilab.evals.attention_drift(model, text, [" Paris"], steer=vec))
        """
        import ipywidgets

        if after is None and hasattr(before, "before") and hasattr(before, "after"):
            before, after = before.before, before.after
        if not isinstance(before, AttentionData) or not isinstance(after, AttentionData):
            raise TypeError("AttentionPattern.compare takes a drift result, or two AttentionData (before, after); "
                            f"got {type(before).__name__} and {type(after).__name__}.")  # fmt: skip
        if before.tokens != after.tokens or before.layers != after.layers:
            raise ValueError("before and after must hold the same tokens and layers to be compared.")
        left, right = AttentionPattern(before, **kwargs), AttentionPattern(after, **kwargs)
        for name in ("layer", "head", "selected_token"):
            traitlets.link((left, name), (right, name))
        box = ipywidgets.HBox([left, right])
        box.before, box.after = left, right
        return box

    @property
    def data(self) -> AttentionData:
        """The plain data shown."""
        return self._data

    @property
    def pattern(self) -> np.ndarray:
        """The shown head's [query, key] pattern, as shown (NaN in a hidden BOS column)."""
        pattern = self._data.head(self.layer, self.head)
        return without_first_key(pattern, self.renormalize) if self.hide_bos else pattern

    def __repr__(self) -> str:
        return (f"AttentionPattern({len(self.tokens)} tokens, layers {self.layers[0]}..{self.layers[-1]}, "
                f"{self._data.n_heads} heads; showing L{self.layer} H{self.head})")  # fmt: skip


def _check_view(layer: Any, head: Any, n_layers: int | None, n_heads: int) -> None:
    """The first layer and head to show, within the model's (checked before any forward pass)."""
    if layer is not None:
        check_int("layer", layer, 0, n_layers - 1 if n_layers else None)
    check_int("head", head, 0, n_heads - 1)
