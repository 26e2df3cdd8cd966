"""Feature dashboards: one card per SAE latent, a searchable list of latents, a "try your text" box.

Example
-------
>>> sae = ilab.load_sae("embedded", layer=6)
>>> dash = ilab.widgets.FeatureDashboard(sae, model, ilab.default_corpus())   # computes FeatureData
>>> dash.selected = 123                 # open latent 123's card (clicks set it too)
>>> dash.scores = my_scores             # [d_sae] values: sort the list by them
>>> dash.link(ilab.widgets.FeatureHeatmap(acts, sae))   # picking a latent there opens it here
>>> FeatureDashboard(FeatureData.load("dash/"), sae=sae, model=model)   # from saved data
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
import traitlets
from interplab.core.checks import check_int, check_latent
from interplab.core.features.cards import TOP_LATENTS, histogram_chart, text_latents
from interplab.core.features.density import MAX_DENSITY, check_max_density
from interplab.core.features.labels import check_label
from interplab.core.features.search_index import search_index
from interplab.core.views.charts import offline

from ._kit import Widget, array_payload, css, esm

SORTS = ("density", "max_act", "score", "id")
N_CARDS = 64  # cards sent up front (the first by the current sort, plus those named with latents=)
DEFAULT_TOKENS = 100_000  # tokens scanned by FeatureDashboard(sae, model) unless n_tokens= says otherwise
TRY_TOP = TOP_LATENTS  # latents listed per token in the "try your text" box


_TOP = ("top_tokens", "top_acts", "top_max", "top_where")


class FeatureDashboard(Widget):
    """A feature dashboard over :class:`~interplab.core.features.FeatureData`.

    Parameters
    ----------
    source
        A ``FeatureData`` (computed or loaded from disk), or an SAE: then ``model`` and
        ``corpus`` (texts, default: the default corpus) are run through
        :func:`~interplab.core.features.feature_data` with ``feature_kwargs``.
    model, corpus
        The model (needed with an SAE, and for the live "try your text" box) and the texts
        (default: the default corpus, ``n_tokens=100_000`` of it unless given).
    sae
        With a ``FeatureData``: the SAE, for the live "try your text" box.
    latents
        Latents whose cards are sent up front (they render in exported HTML), in addition to
        the first ``n_cards`` by the sort.
    sort, scores, score_name
        The list's order: "density", "max_act", "score" or "id" (default: "score" when ``scores``,
        [d_sae] numbers of your own, are given, else "density").
    max_density
        "Try your text" lists each token's top latents leaving out those firing on more than this fraction of the
        data's tokens (default 0.1; None keeps them all).
    """

    _esm = esm("dashboard")
    _css = css("dashboard")
    _uid = traitlets.Unicode().tag(sync=True)  # keys the state shared by this dashboard's views in the browser

    site = traitlets.Unicode("").tag(sync=True)
    d_sae = traitlets.Int(0).tag(sync=True)
    n_tokens = traitlets.Int(0).tag(sync=True)
    density = traitlets.Dict().tag(sync=True)  # float32 [d_sae]
    max_act = traitlets.Dict().tag(sync=True)  # float32 [d_sae]
    mean_act = traitlets.Dict().tag(sync=True)  # float32 [d_sae]
    score_values = traitlets.Dict().tag(sync=True)  # float32 [d_sae], or {} when no scores
    score_name = traitlets.Unicode("score").tag(sync=True)
    labels = traitlets.Dict().tag(sync=True)  # {str(latent): label}, set by hand
    explanations = traitlets.Dict().tag(sync=True)  # {str(latent): record} (core/features/explanations.py)
    cards = traitlets.Dict().tag(sync=True)  # binary bundle of the cards sent up front
    token_strings = traitlets.Dict().tag(sync=True)  # {str(token id): string} for those cards and max_tokens
    max_tokens = traitlets.Dict().tag(sync=True)  # int32 [d_sae, n_top]: the token at each top example's max (-1: none)
    search_index = traitlets.Dict().tag(sync=True)  # what the search box looks in (core/features/search_index.py)
    selected = traitlets.Int(0).tag(sync=True)
    sort = traitlets.Enum(SORTS, "density").tag(sync=True)
    query = traitlets.Unicode("").tag(sync=True)
    live = traitlets.Bool(False).tag(sync=True)  # model and SAE present: "try your text" possible

    def __init__(
        self,
        source: Any,
        model: Any = None,
        corpus: Sequence[str] | None = None,
        *,
        sae: Any = None,
        latents: Sequence[int] | None = None,
        n_cards: int = N_CARDS,
        sort: str | None = None,
        scores: Any = None,
        score_name: str = "score",
        selected: int | None = None,
        max_density: float | None = MAX_DENSITY,
        **feature_kwargs: Any,
    ) -> None:
        self._max_density = check_max_density(max_density)
        check_int("n_cards", n_cards, minimum=0)
        sort = ("density" if scores is None else "score") if sort is None else sort
        if sort not in SORTS:
            raise ValueError(f"sort={sort!r} is not one of {SORTS}.")
        if hasattr(source, "encode"):
            if sae is not None:
                raise TypeError("Give the SAE once: FeatureDashboard(sae, model, corpus).")
            if model is None:
                raise TypeError("FeatureDashboard(sae, model, corpus) needs the model to compute feature data.")
            from interplab.core.features import feature_data

            sae = source
            feature_kwargs.setdefault("n_tokens", DEFAULT_TOKENS)
            data = feature_data(sae, model, "default" if corpus is None else corpus, **feature_kwargs)
        elif hasattr(source, "hist_counts") and hasattr(source, "top_tokens"):
            if corpus is not None or feature_kwargs:
                raise TypeError("With precomputed FeatureData, give only sae= and model= (no corpus or options).")
            data = source
        else:
            raise TypeError(f"FeatureDashboard takes FeatureData or an SAE; got {type(source).__name__}.")
        if sae is not None and getattr(sae, "d_sae", data.d_sae) != data.d_sae:
            raise ValueError(f"The SAE has {sae.d_sae} latents but the feature data has {data.d_sae}.")
        self._data, self._sae, self._model = data, sae, model
        self._links: list[tuple[Any, Any, str]] = []  # (widget, observer, trait)
        self._scores: np.ndarray | None = None
        named = [self._check_latent(i) for i in (latents or [])]
        first = named[0] if selected is None and named else selected
        score_payload = {}
        if scores is not None:
            self._scores = self._check_scores(scores)
            score_payload = array_payload(self._scores, "float32")
        order = self._order(sort)
        sent = list(dict.fromkeys(named + ([] if first is None else [self._check_latent(first)]) + order[:n_cards]))
        bundle, strings = self._bundle(sent)
        max_tokens = np.where(data.top_max > 0, data.top_tokens[:, :, data.lead], -1).astype(np.int32)
        for t in np.unique(max_tokens[max_tokens >= 0]).tolist():
            strings.setdefault(str(t), data.token_str(t))
        super().__init__(
            site=data.site,
            d_sae=int(data.d_sae),
            n_tokens=int(data.n_tokens),
            density=array_payload(data.density, "float32"),
            max_act=array_payload(data.max_act, "float32"),
            mean_act=array_payload(data.mean_act, "float32"),
            score_values=score_payload,
            score_name=score_name,
            labels={str(k): v for k, v in data.labels.items()},
            explanations={str(k): v for k, v in data.explanations.items()},
            cards=bundle,
            token_strings=strings,
            max_tokens=array_payload(max_tokens, "int32"),
            search_index=_index_payload(data),
            selected=int(order[0] if first is None else first),
            sort=sort,
            live=sae is not None and model is not None,
            _uid=uuid.uuid4().hex,
        )
        self.on_msg(self._on_message)

    # ------------------------------------------------------------ public API
    @property
    def data(self) -> Any:
        """The FeatureData shown."""
        return self._data

    @property
    def sent(self) -> list[int]:
        """Latents whose cards were sent up front (they render without a kernel)."""
        return [int(i) for i in np.frombuffer(bytes(self.cards["ids"]["view"]), dtype=np.int32)]

    @property
    def scores(self) -> np.ndarray | None:
        """User scores per latent ([d_sae]); setting them sorts the list by them."""
        return self._scores

    @scores.setter
    def scores(self, values: Any) -> None:
        if values is None:
            self._scores = None
            self.score_values = {}
            if self.sort == "score":
                self.sort = "density"
            return
        self._scores = self._check_scores(values)
        self.score_values = array_payload(self._scores, "float32")
        self.sort = "score"

    def set_explanations(self, explained: Any, scores: Any = None, scorer: str = "detection",
                         metric: str = "auroc") -> None:  # fmt: skip
        """Show automatic explanations (``ilab.autointerp.explain``) and their scores (``score``) on the cards and
        in the list, kept with the data (:meth:`FeatureData.set_explanations`); a hand label still wins."""
        self._data.set_explanations(explained, scores, scorer, metric)
        self.explanations = {str(k): v for k, v in self._data.explanations.items()}

    def set_label(self, latent: int, label: str) -> None:
        """Label a latent (shown in the list, its card and its neighbours; saved with the data)."""
        i = self._check_latent(latent)
        self.labels = {**self.labels, str(i): check_label(label)}

    def link(self, widget: Any) -> FeatureDashboard:
        """Follow a :class:`FeatureHeatmap` or a :class:`PatchingGrid` of SAE latents.

        Picking a latent there (a feature of ``FeatureHeatmap(acts, sae)``, a latent row or cell of
        ``PatchingGrid(ilab.patching.latents(...))``) opens its card here, and the labels set here
        (in the card or with :meth:`set_label`) show there, now and whenever they change.
        Returns the dashboard, so ``dash.link(w)`` can end a cell.
        """
        if hasattr(widget, "latent") and hasattr(widget, "set_row_text"):
            trait = "latent"
        elif hasattr(widget, "feature") and hasattr(widget, "observe"):
            trait = "feature"
        else:
            raise TypeError(f"link() takes a FeatureHeatmap or a PatchingGrid; got {type(widget).__name__}.")

        def follow(change: dict[str, Any]) -> None:
            if 0 <= change["new"] < self._data.d_sae:
                self.selected = int(change["new"])

        widget.observe(follow, names=trait)
        self._links.append((widget, follow, trait))
        self._push_labels(widget)
        return self

    def unlink(self) -> None:
        """Stop following every linked widget."""
        for widget, follow, trait in self._links:
            widget.unobserve(follow, names=trait)
        self._links = []

    def _push_labels(self, widget: Any) -> None:
        """Show this dashboard's labels in a linked widget (its latent ids, nothing else)."""
        labels = {int(k): v for k, v in self.labels.items()}
        if hasattr(widget, "set_row_text"):
            widget.set_row_text(labels)
            return
        ids = list(getattr(widget, "feature_ids", []))
        if ids and all(0 <= i < self._data.d_sae for i in ids):
            widget.labels = [labels.get(i, "") for i in ids]

    def histogram(self, latent: int | None = None) -> Any:
        """The latent's activation histogram as an ``altair.Chart`` (default: the selected latent)."""
        i = self._check_latent(self.selected if latent is None else latent)
        return offline(histogram_chart(self._data, i, self.labels.get(str(i), "")))

    def try_text(self, text: str, latent: int | None = None, top: int = TRY_TOP) -> dict[str, Any]:
        """Run ``text`` through the model and SAE: per-token activation of ``latent`` and top latents.

        Returns ``{"tokens": [str], "acts": [n_tok], "top_ids": [n_tok, top], "top_values": [n_tok, top],
        "density_filter": str}`` (BOS left out; latents denser than the dashboard's ``max_density`` on its data
        left out of the lists), what the box in the widget shows (:func:`interplab.core.features.cards.text_latents`).
        """
        if self._sae is None or self._model is None:
            raise RuntimeError("try_text needs the SAE and the model: FeatureDashboard(data, sae=sae, model=model).")
        latent = self.selected if latent is None else latent
        return text_latents(
            self._sae, self._model, text, latent, top, max_density=self._max_density, density=self._data
        )

    # ------------------------------------------------------------ internals
    @traitlets.validate("selected")
    def _valid_selected(self, proposal: dict[str, Any]) -> int:
        value = proposal["value"]
        if self.d_sae and not 0 <= value < self.d_sae:
            raise traitlets.TraitError(f"selected={value} is out of range: latents are 0..{self.d_sae - 1}.")
        return value

    @traitlets.observe("labels")
    def _save_labels(self, change: dict[str, Any]) -> None:
        new = {int(k): v for k, v in change["new"].items()}
        for k, v in new.items():
            if self._data.labels.get(k) != v:
                self._store_label(k, v)
        for k in set(self._data.labels) - set(new):
            self._store_label(k, "")
        for widget, _follow, _trait in getattr(self, "_links", []):
            self._push_labels(widget)

    def _store_label(self, latent: int, label: str) -> None:
        """Through FeatureData.set_label: kept on the data and saved to its labels file (if it has one)."""
        self._data.set_label(latent, label)

    def _check_latent(self, latent: Any) -> int:
        return check_latent(latent, int(self._data.d_sae))

    def _check_scores(self, values: Any) -> np.ndarray:
        arr = values.detach().cpu().float().numpy() if hasattr(values, "detach") else np.asarray(values)  # bf16 too
        if arr.shape != (self._data.d_sae,):
            raise ValueError(f"scores need one value per latent, shape ({self._data.d_sae},); got {arr.shape}.")
        return arr.astype(np.float32)

    def _order(self, sort: str) -> list[int]:
        d = self._data
        if sort == "id":
            return list(range(d.d_sae))
        if sort == "score":
            if self._scores is None:
                raise ValueError("sort='score' needs scores=[one value per latent].")
            key = self._scores
        else:
            key = np.asarray(d.density if sort == "density" else d.max_act)
        return [int(i) for i in np.argsort(-np.nan_to_num(key, nan=-np.inf), kind="stable")]

    def _bundle(self, ids: list[int]) -> tuple[dict[str, Any], dict[str, str]]:
        """The cards of ``ids`` as binary payloads, and the strings of the tokens they show."""
        d = self._data
        idx = np.asarray(ids, dtype=np.int64)
        # the top examples as a card shows them: near-duplicate contexts left out (core/features/distinct.py)
        top = d.distinct_top(idx) if hasattr(d, "distinct_top") else {k: getattr(d, k)[idx] for k in _TOP}
        tokens = np.concatenate([top["top_tokens"], d.quantile_tokens[idx]], axis=1)
        logit_ids = np.stack([d.logit_top_ids[idx], d.logit_bottom_ids[idx]], axis=1)
        arrays = {
            "ids": array_payload(idx, "int32"),
            "tokens": array_payload(tokens, "int32"),
            "acts": array_payload(np.concatenate([top["top_acts"], d.quantile_acts[idx]], axis=1), "float32"),
            "ex_max": array_payload(np.concatenate([top["top_max"], d.quantile_max[idx]], axis=1), "float32"),
            "hist_counts": array_payload(d.hist_counts[idx], "float32"),
            "hist_edges": array_payload(d.hist_edges[idx], "float32"),
            "logit_ids": array_payload(logit_ids, "int32"),
            "logit_values": array_payload(
                np.stack([d.logit_top_values[idx], d.logit_bottom_values[idx]], axis=1), "float32"
            ),
            "near_ids": array_payload(d.neighbour_ids[idx], "int32"),
            "near_cos": array_payload(d.neighbour_sims[idx], "float32"),
        }
        used = np.unique(np.concatenate([tokens.ravel(), logit_ids.ravel()]))
        strings = {str(int(t)): d.token_strings.get(int(t), f"<{int(t)}>") for t in used if t >= 0}
        return {**arrays, "n_top": int(d.top_tokens.shape[1]), "lead": int(getattr(d, "lead", -1))}, strings

    def _on_message(self, _widget: Any, content: dict[str, Any], _buffers: list[Any]) -> None:
        kind = content.get("type")
        if kind == "ping":
            self.send({"type": "pong", "live": self.live})
        elif kind == "card":
            try:
                i = self._check_latent(content.get("latent"))
            except (TypeError, ValueError):
                return
            self._send_bundle("card", [i])
        elif kind == "try":
            self._reply_try(str(content.get("text", "")), content.get("latent"))

    def _send_bundle(self, kind: str, ids: list[int], **extra: Any) -> None:
        bundle, strings = self._bundle(ids)
        meta: dict[str, Any] = {}
        buffers: list[Any] = []
        for name, value in bundle.items():
            if isinstance(value, dict):
                meta[name] = {"dtype": value["dtype"], "shape": value["shape"], "buffer": len(buffers)}
                buffers.append(value["view"])
            else:
                meta[name] = value
        self.send({"type": kind, "cards": meta, "token_strings": strings, **extra}, buffers=buffers)

    def _reply_try(self, text: str, latent: Any) -> None:
        try:
            out = self.try_text(text, latent)
        except (RuntimeError, ValueError, TypeError) as exc:
            self.send({"type": "try", "error": str(exc)})
            return
        shapes = {k: list(out[k].shape) for k in ("acts", "top_ids", "top_values")}
        self.send(
            {
                "type": "try",
                "tokens": out["tokens"],
                "latent": self._check_latent(latent),
                "shapes": shapes,
                "density_filter": out["density_filter"],
            },
            buffers=[out["acts"].tobytes(), out["top_ids"].tobytes(), out["top_values"].tobytes()],
        )

    def __repr__(self) -> str:
        d = self._data
        return f"{type(self).__name__}({d.site}, {d.d_sae} latents, {d.n_tokens} tokens, {len(self.sent)} cards sent)"


def _index_payload(data: Any) -> dict[str, Any]:
    """The search index of ``data`` for the browser: its texts, where each latent's entries start, the entries
    and their kinds (0: fires on, 1: promotes), and what a search looks in, in words."""
    index = search_index(data)
    return {
        "texts": index.texts,
        "starts": array_payload(index.starts, "int32"),
        "entries": array_payload(index.entries, "int32"),
        "kinds": array_payload(index.kinds, "uint8"),
        "searched": index.searched,
    }
