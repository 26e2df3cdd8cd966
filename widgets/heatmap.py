"""Token heatmaps: documents as flowing text, each token coloured by a value.

Example
-------
>>> acts = model.collect(texts, sites=["blocks.6.hook_mlp_out"])
>>> w = FeatureHeatmap(acts, features=[12, 40, 311])   # pick among these dimensions
>>> w.feature = 40          # recolour from Python
>>> w.selected_token        # the flat index of the token last clicked (-1 for none)
>>> TokenHeatmap(["The", " cat"], [0.1, 2.0])           # any per-token scalar
>>> w.set_scale("diverging", center=-400.0)              # colours: scale, vmin, vmax, center

Colours follow :mod:`interplab.core.views.colors`: ``scale`` "auto" (diverging around 0 when a
feature's values have both signs, else sequential), "sequential" or "diverging"; ``vmin``/``vmax``
fix the ends and ``center`` the midpoint of a diverging scale (``None``: from the data, per feature).
BOS tokens do not set the range unless ``exclude_bos=False``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import traitlets
from interplab.core.features.density import MAX_DENSITY, check_max_density, density_filter
from interplab.core.features.labels import load_labels
from interplab.core.model.activations import Activations
from interplab.core.views.colors import SCALES, check_scale_options, scales_payload
from interplab.core.views.heatmap import HeatmapData, as_heatmap_data

from ._kit import OPTIONS, ScaleOptions, Widget, array_payload, css, esm


class FeatureHeatmap(ScaleOptions, Widget):
    """Tokens coloured by the selected feature; pick features, hover for values, click tokens.

    Parameters
    ----------
    source
        :class:`~interplab.Activations` from ``Model.collect``, a :class:`HeatmapData`, or
        string tokens (one list per document, or one flat list) with ``values``.
    values
        With string tokens: [n_tokens] or [n_tokens, n_features]. With activations: an SAE
        (anything with ``encode`` and ``site``) whose latents become the features.
    site, features, labels
        Which site of the activations, which of its dimensions (or latents) to offer, and
        a label for each.
    scale, vmin, vmax, center, exclude_bos
        The colour scale (see the module doc); settable later, together, with :meth:`set_scale`.
    max_density, density
        With an SAE: the hover's "top features here" (and the latents offered by default) leave out latents
        firing on more than ``max_density`` of tokens (default 0.1; None keeps them), by ``density``
        (FeatureData or one fraction per latent) or the SAE's stored firing rates
        (:mod:`interplab.core.features.density`).
    """

    _esm = esm("heatmap")
    _css = css("heatmap")

    vocab = traitlets.List(traitlets.Unicode()).tag(sync=True)
    token_ids = traitlets.Dict().tag(sync=True)
    doc_starts = traitlets.Dict().tag(sync=True)
    values = traitlets.Dict().tag(sync=True)  # float32 [n_sent, n_tokens], feature-major
    sent_columns = traitlets.List(traitlets.Int()).tag(sync=True)
    scales = traitlets.Dict().tag(sync=True)  # float32 [n_features, 4]: each column's colour scale
    bos_tokens = traitlets.Dict().tag(sync=True)  # int32: flat indexes of BOS tokens
    top_features = traitlets.Dict().tag(sync=True)  # int32 [n_tokens, k] feature ids
    top_values = traitlets.Dict().tag(sync=True)
    top_labels = traitlets.Dict().tag(sync=True)  # {str(id): label} for top features that are not offered
    top_filter = traitlets.Unicode("").tag(sync=True)  # which latents the top features leave out ("": none)
    feature_ids = traitlets.List(traitlets.Int()).tag(sync=True)
    labels = traitlets.List(traitlets.Unicode()).tag(sync=True)
    feature = traitlets.Int(0).tag(sync=True)
    selected_token = traitlets.Int(-1).tag(sync=True)
    scale = traitlets.Enum(SCALES, "auto").tag(sync=True)
    vmin = traitlets.Float(None, allow_none=True).tag(sync=True)
    vmax = traitlets.Float(None, allow_none=True).tag(sync=True)
    center = traitlets.Float(None, allow_none=True).tag(sync=True)
    exclude_bos = traitlets.Bool(True).tag(sync=True)
    page = traitlets.Int(0).tag(sync=True)
    page_tokens = traitlets.Int(2000).tag(sync=True)
    show_picker = traitlets.Bool(True).tag(sync=True)

    def __init__(
        self,
        source: Activations | HeatmapData | Sequence[str] | Sequence[Sequence[str]],
        values: Any = None,
        *,
        site: str | None = None,
        features: Sequence[int] | None = None,
        labels: Sequence[str] | None = None,
        feature: int | None = None,
        scale: str = "auto",
        vmin: float | None = None,
        vmax: float | None = None,
        center: float | None = None,
        exclude_bos: bool = True,
        max_density: float | None = MAX_DENSITY,
        density: Any = None,
        **kwargs: Any,
    ) -> None:
        scale, vmin, vmax, center = check_scale_options(scale, vmin, vmax, center)
        max_density = check_max_density(max_density)

        def dense(sae: Any) -> tuple[Any, str]:
            found = density_filter(sae, max_density, density)
            return found.dense, found.short

        data = as_heatmap_data(source, values, site=site, features=features, labels=labels, latent_labels=load_labels,
                               latent_filter=dense)  # fmt: skip
        self._data = data
        first = data.feature_ids[0] if feature is None else feature
        if first not in data.feature_ids:
            raise ValueError(f"feature={first!r} is not among the features shown: {_preview(data.feature_ids)}.")
        sent = self._initial_columns(data, data.feature_ids.index(first))
        # With every column in the browser, it finds the top features at a token itself, unless
        # they come from more features than are offered (every latent of an SAE).
        beyond = sorted(set(np.unique(data.top_features).tolist()) - set(data.feature_ids))
        top = (
            {}
            if len(sent) == data.n_features and not beyond and not data.top_filter
            else {
                "top_features": array_payload(data.top_features, "int32"),
                "top_values": array_payload(data.top_values, "float32"),
                "top_labels": {str(i): t for i, t in data.top_labels.items() if i in set(beyond) and t},
                "top_filter": data.top_filter,
            }
        )
        super().__init__(
            vocab=data.vocab,
            token_ids=array_payload(data.token_ids, "int32"),
            doc_starts=array_payload(data.doc_starts, "int32"),
            values=array_payload(data.values[:, sent].T, "float32"),
            sent_columns=sent,
            scales=array_payload(scales_payload(data.color_scales(scale, vmin, vmax, center, exclude_bos)), "float32"),
            bos_tokens=array_payload(np.flatnonzero(data.bos if data.bos is not None else []), "int32"),
            **top,
            feature_ids=data.feature_ids,
            labels=data.labels,
            feature=first,
            scale=scale,
            vmin=vmin,
            vmax=vmax,
            center=center,
            exclude_bos=bool(exclude_bos),
            page_tokens=int(OPTIONS["page_tokens"]),
            show_picker=data.n_features > 1,
            **kwargs,
        )
        self._ready = True
        self.on_msg(self._on_request)

    _ready = False  # the colour options trigger a rescale only once the widget is built

    @staticmethod
    def _initial_columns(data: HeatmapData, selected: int) -> list[int]:
        """All columns when under the cap; otherwise only the selected one (others on demand)."""
        if data.n_tokens * data.n_features <= int(OPTIONS["max_values"]):
            return list(range(data.n_features))
        return [selected]

    def set_scale(
        self,
        scale: str | None = None,
        *,
        vmin: float | None = None,
        vmax: float | None = None,
        center: float | None = None,
        exclude_bos: bool | None = None,
    ) -> FeatureHeatmap:
        """Set the colour options together (unnamed ones go back to "from the data"); returns the widget.

        >>> w.set_scale("diverging", center=0.5, vmax=3)
        """
        more = {} if exclude_bos is None else {"exclude_bos": bool(exclude_bos)}
        self._set_scale_options(scale or "auto", vmin, vmax, center, **more)
        return self

    @traitlets.observe("vmin", "vmax", "center", "scale", "exclude_bos")
    def _rescale(self, _change: dict[str, Any]) -> None:
        if not self._ready:
            return
        scales = self._data.color_scales(self.scale, self.vmin, self.vmax, self.center, self.exclude_bos)
        self.scales = array_payload(scales_payload(scales), "float32")

    def color_scale(self, feature: int | None = None) -> Any:
        """The resolved :class:`~interplab.core.views.colors.ColorScale` of a feature (default: the one shown)."""
        f = self.feature if feature is None else feature
        if f not in self._data.feature_ids:
            raise ValueError(f"feature={f!r} is not among the features shown: {_preview(self._data.feature_ids)}.")
        scales = self._data.color_scales(self.scale, self.vmin, self.vmax, self.center, self.exclude_bos)
        return scales[self._data.feature_ids.index(f)]

    @property
    def data(self) -> HeatmapData:
        """The plain data shown."""
        return self._data

    @traitlets.validate("feature")
    def _check_feature(self, proposal: dict[str, Any]) -> int:
        value = proposal["value"]
        if self.feature_ids and value not in self.feature_ids:
            shown = _preview(self.feature_ids)
            raise traitlets.TraitError(f"feature={value} is not among the features shown: {shown}.")
        return value

    @traitlets.validate("selected_token")
    def _check_selected_token(self, proposal: dict[str, Any]) -> int:
        value = proposal["value"]
        n = self._data.n_tokens if hasattr(self, "_data") else None
        if n is not None and not -1 <= value < n:
            raise traitlets.TraitError(f"selected_token={value} is out of range: tokens are 0..{n - 1} (-1: none).")
        return value

    @property
    def selected_text(self) -> str | None:
        """The text of the clicked token, or None."""
        i = self.selected_token
        return None if i < 0 else self._data.vocab[int(self._data.token_ids[i])]

    def column(self, feature: int) -> np.ndarray:
        """The values of one feature over all tokens, [n_tokens]."""
        if feature not in self._data.feature_ids:
            shown = _preview(self._data.feature_ids)
            raise ValueError(f"feature={feature!r} is not among the features shown: {shown}.")
        return self._data.values[:, self._data.feature_ids.index(feature)]

    def _on_request(self, _widget: Any, content: dict[str, Any], _buffers: list[Any]) -> None:
        if content.get("type") == "ping":
            self.send({"type": "pong"})  # the browser learns a kernel is there to fetch columns from
            return
        if content.get("type") != "column":
            return
        index = int(content.get("index", -1))
        if not 0 <= index < self._data.n_features:
            return
        payload = np.ascontiguousarray(self._data.values[:, index], dtype=np.float32)
        self.send({"type": "column", "index": index}, buffers=[payload.tobytes()])

    def __repr__(self) -> str:
        d = self._data
        return f"{type(self).__name__}({d.n_docs} docs, {d.n_tokens} tokens, {d.n_features} features)"


class TokenHeatmap(FeatureHeatmap):
    """Tokens coloured by one scalar each: a neuron, a probe score, a per-token loss.

    >>> TokenHeatmap([["The", " cat"], ["Hi"]], [0.5, 1.0, -2.0], scale="diverging")
    """

    def __init__(self, tokens: Any, values: Any, *, label: str = "", **kwargs: Any) -> None:
        arr = values.detach().cpu().float().numpy() if hasattr(values, "detach") else np.asarray(values)  # bf16 too
        if arr.ndim != 1:
            raise ValueError(f"TokenHeatmap takes one value per token ([n_tokens]); got shape {arr.shape}.")
        super().__init__(tokens, arr, labels=[label], **kwargs)


def _preview(ids: Sequence[int]) -> str:
    ids = list(ids)
    return str(ids) if len(ids) <= 12 else f"{ids[:12]}... ({len(ids)} in all)"
