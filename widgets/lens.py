"""LogitLens: a text through the logit lens, layers x positions, each cell the top next token.

Example
-------
>>> lens = ilab.logit_lens(model, "When Mary and John went to the store, John gave a drink to")
>>> lens                                   # in a notebook, shows as this widget (the first text)
>>> w = ilab.widgets.LogitLens(lens, token=" Mary")   # cells coloured by P(" Mary")
>>> w.token = " John"; w.selected = [12, 14]           # from Python too
>>> w.selected_top                                      # the clicked cell's top-10 [(token, prob), ...]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import traitlets
from interplab.core.readout import lens as core_lens
from interplab.core.readout.lens import LensView, LogitLensResult
from interplab.core.readout.patchscope import VIEWERS as PATCHSCOPE_VIEWERS
from interplab.core.readout.patchscope import PatchscopeResult
from interplab.core.views.colors import ColorScale, check_scale_options, resolve_scale

from ._kit import OPTIONS, Widget, array_payload, css, esm


class LogitLens(Widget):
    """Layers x positions of one text: each cell the top next token and its probability, coloured by the
    probability of a chosen token; click a cell for its top tokens.

    Parameters
    ----------
    source
        What :func:`interplab.logit_lens` returned (``text`` picks which of its texts), a
        :class:`~interplab.core.readout.lens.LensView`, what :func:`interplab.patchscope` returned (layers x
        greedy steps), or a model with ``text`` the string to read.
    token
        The token whose probability colours the cells (default: the model's prediction at the last position).
    top_k
        How many top tokens each cell keeps.
    scale, vmin, vmax, center
        The colour scale of the probabilities (default: sequential from 0 to 1); see :meth:`set_scale`.
    """

    _esm = esm("lens")
    _css = css("lens")

    tokens = traitlets.List(traitlets.Unicode()).tag(sync=True)  # the text's tokens (the columns)
    layers = traitlets.List(traitlets.Int()).tag(sync=True)  # the rows
    vocab = traitlets.List(traitlets.Unicode()).tag(sync=True)  # every token a cell shows
    vocab_ids = traitlets.List(traitlets.Int()).tag(sync=True)
    top_index = traitlets.Dict().tag(sync=True)  # int32 [layers, positions, k]: indices into vocab
    top_probs = traitlets.Dict().tag(sync=True)  # float32 [layers, positions, k]
    colour_index = traitlets.List(traitlets.Int()).tag(sync=True)  # vocab indices that can colour the cells
    colour_probs = traitlets.Dict().tag(sync=True)  # float32 [layers, positions, len(colour_index)]
    token_id = traitlets.Int(-1).tag(sync=True)  # the token colouring the cells
    color_scale = traitlets.Dict().tag(sync=True)  # the resolved colour scale ({"kind", "vmin", "center", "vmax"})
    selected = traitlets.List(traitlets.Int()).tag(sync=True)  # [layer, position] last clicked ([] for none)

    def __init__(
        self, source: LogitLensResult | LensView | Any, text: int | str = 0, *, token: str | int | None = None,
        top_k: int = 10, scale: str = "sequential", vmin: float | None = None, vmax: float | None = None,
        center: float | None = None, **kwargs: Any,
    ) -> None:  # fmt: skip
        colours = probability_scale(scale, vmin, vmax, center)
        asked = [] if token is None else [token]
        if isinstance(source, PatchscopeResult):
            view = source.view  # rows the patched layers, columns the greedy steps
        elif isinstance(source, LogitLensResult):
            if not isinstance(text, int):
                raise TypeError(f"With a logit_lens result, text= is the index of one of its texts, got {text!r}.")
            view = source.view_data(text, top_k=top_k, tokens=asked)
        elif isinstance(source, LensView):
            view = source
        elif hasattr(source, "readout_parts"):  # a Model
            if not isinstance(text, str):
                raise TypeError(f"With a model, text= is the text to read, got {text!r}.")
            view = core_lens.lens_view(source, text, top_k=top_k, tokens=asked)
        else:
            raise TypeError(
                "LogitLens takes what ilab.logit_lens or ilab.patchscope returned, a LensView or a model; "
                f"got {type(source).__name__}."
            )
        self._view = view
        ids = view.candidates.tolist()
        lookup = {t: i for i, t in enumerate(ids)}
        top_index = np.vectorize(lookup.__getitem__, otypes=[np.int32])(view.top_ids)
        n_layers, n_pos = view.top_ids.shape[:2]
        keep = _colour_candidates(view, max(1, int(OPTIONS["max_values"]) // max(1, n_layers * n_pos)))
        default = int(view.top_ids[-1, -1, 0])
        chosen = default if token is None else _token_id(view, token)
        if chosen not in (ids[i] for i in keep):
            keep = [lookup[chosen], *keep[:-1]]
        super().__init__(
            tokens=view.tokens, layers=view.layers, vocab=view.candidate_tokens, vocab_ids=ids,
            top_index=array_payload(top_index, "int32"), top_probs=array_payload(view.top_probs, "float32"),
            colour_index=keep, colour_probs=array_payload(view.candidate_probs[:, :, keep], "float32"),
            token_id=chosen, color_scale=colours.to_dict(), **kwargs,
        )  # fmt: skip

    def set_scale(
        self, scale: str = "sequential", *, vmin: float | None = None, vmax: float | None = None,
        center: float | None = None,
    ) -> ColorScale:  # fmt: skip
        """Recolour: ``scale`` "sequential" (0 to 1 unless ``vmin``/``vmax`` say otherwise) or "diverging"
        (around ``center``, default 0.5); returns the resolved scale.

        >>> w.set_scale(vmax=0.2)          # make small probabilities visible
        """
        colours = probability_scale(scale, vmin, vmax, center)
        self.color_scale = colours.to_dict()
        return colours

    @property
    def view(self) -> LensView:
        """The plain data shown."""
        return self._view

    @property
    def token(self) -> str:
        """The token colouring the cells (set it to recolour; it must be one the view offers)."""
        return self.vocab[self.vocab_ids.index(self.token_id)]

    @token.setter
    def token(self, value: str | int) -> None:
        self.token_id = _token_id(self._view, value)

    @traitlets.validate("token_id")
    def _check_token(self, proposal: dict[str, Any]) -> int:
        value = proposal["value"]
        offered = [self.vocab_ids[i] for i in self.colour_index]
        if offered and value not in offered:
            raise traitlets.TraitError(
                f"token id {value} cannot colour this view; ask for it with LogitLens(..., token=...)."
            )
        return value

    @property
    def selected_top(self) -> list[tuple[str, float]] | None:
        """The clicked cell's top tokens and probabilities, or None."""
        if len(self.selected) != 2:
            return None
        layer, position = self.selected
        if layer not in self._view.layers or not 0 <= position < len(self._view.tokens):
            return None
        return self._view.top(self._view.layers.index(layer), position)

    def __repr__(self) -> str:
        return f"LogitLens({len(self._view.layers)} layers x {len(self._view.tokens)} positions, token={self.token!r})"


def probability_scale(scale: str, vmin: float | None, vmax: float | None, center: float | None) -> ColorScale:
    """A colour scale for probabilities: the data range is 0..1 (diverging scales centre on 0.5 by default)."""
    scale, vmin, vmax, center = check_scale_options(scale, vmin, vmax, center)
    if scale == "diverging" and center is None:
        center = 0.5
    return resolve_scale(0.0, 1.0, scale, vmin, vmax, center)


def _token_id(view: LensView, token: str | int) -> int:
    if isinstance(token, str):
        if token not in view.candidate_tokens:
            raise ValueError(
                f"{token!r} is not among the tokens this view holds; pass token= when making it (e.g. "
                f"LogitLens(lens, token={token!r})). Some it holds: {view.candidate_tokens[:12]}."
            )
        return int(view.candidates[view.candidate_tokens.index(token)])
    if int(token) not in view.candidates.tolist():
        raise ValueError(f"Token id {token} is not among the tokens this view holds; pass token= when making it.")
    return int(token)


def _colour_candidates(view: LensView, cap: int) -> list[int]:
    """Indices of the candidates that get a probability column: all of them, or the ``cap`` likeliest anywhere."""
    n = len(view.candidates)
    if n <= cap:
        return list(range(n))
    best = view.candidate_probs.reshape(-1, n).max(0)
    return sorted(np.argsort(-best)[:cap].tolist())


def _show(result: LogitLensResult) -> LogitLens:
    return LogitLens(result)


core_lens.VIEWERS.append(_show)  # what ilab.logit_lens returns displays as this widget
PATCHSCOPE_VIEWERS.append(LogitLens)  # what ilab.patchscope returns displays as this widget
