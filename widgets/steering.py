"""SteeringPanel: sliders that steer a model live, baseline and steered continuations side by side.

Each slider scales one direction added at the selected site. Moving a slider (debounced in the
browser) starts a new generation in a background thread, so the kernel stays responsive; a newer
request cancels the running one (its generation id no longer matches, and a stopping criterion
ends it after the current token). Tokens stream into the page as they are generated.

Example
-------
>>> panel = SteeringPanel(model, {"happy": vec, "feature 123": sae.direction(123)}, site=vec.site)
>>> panel.values = {"happy": 4.0}      # move a slider from Python
>>> panel.wait(); panel.history[-1]    # prompt, values, site, baseline and steered text
>>> SteeringPanel(model, {"happy": vec}, metric=" great")   # P(' great') next, beside each text
>>> SteeringPanel(model, {"happy": vec}, metric=ilab.metrics.logit_diff(" great", " awful"))

Generations hold ``model.lock`` (every nnsight trace of the model does too), so a cell that runs
a trace while the panel generates waits for the token in flight instead of colliding with it. An
error in a generation shows in the panel (``panel.last_error`` keeps the exception) instead of
printing into whichever cell runs, and Run starts a new generation whatever state the panel is in.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
import traitlets
from interplab.core.checks import check_number, check_texts
from interplab.core.readout.metrics import BoundMetric, Metric, as_metric, prob
from interplab.core.steering.hooks import next_token_logits, stream
from interplab.core.steering.vectors import SteeringVector, check_direction

from ._kit import Widget, css, esm

if TYPE_CHECKING:
    from interplab.core.model.model import Model

logger = logging.getLogger(__name__)


class SteeringPanel(Widget):
    """Live steering: one slider per vector, a site selector, temperature and seed.

    Parameters
    ----------
    model
        An interplab :class:`~interplab.Model` (generation runs locally with torch hooks).
    vectors
        ``{"name": SteeringVector or direction tensor [d]}``; all are applied at ``site``.
    site
        Where to add them (default: the first SteeringVector's site). Any site of the same width
        can be picked in the panel.
    ranges
        ``{"name": (min, max, step)}`` per slider; others use ``default_range``.
    metric, metric_name
        A readout beside each text, on the next-token logits after the prompt (baseline and
        steered): a token (its probability), an ``ilab.metrics`` metric (``kl_to_clean()`` is the
        KL of the steered distribution from the baseline's) or any function of logits
        ``[rows, vocab]`` returning one value per row; ``metric_name`` labels it.
    """

    _esm = esm("steering")
    _css = css("steering")

    prompt = traitlets.Unicode("").tag(sync=True)
    names = traitlets.List(traitlets.Unicode()).tag(sync=True)
    ranges = traitlets.Dict().tag(sync=True)  # name -> [min, max, step]
    values = traitlets.Dict().tag(sync=True)  # name -> scale
    sites = traitlets.List(traitlets.Unicode()).tag(sync=True)
    site = traitlets.Unicode("").tag(sync=True)
    temperature = traitlets.Float(0.0).tag(sync=True)
    seed = traitlets.Int(0).tag(sync=True)
    max_new_tokens = traitlets.Int(24).tag(sync=True)
    debounce_ms = traitlets.Int(150).tag(sync=True)
    baseline_tokens = traitlets.List(traitlets.Unicode()).tag(sync=True)
    steered_tokens = traitlets.List(traitlets.Unicode()).tag(sync=True)
    run_id = traitlets.Int(0).tag(sync=True)  # the run whose tokens are shown
    status = traitlets.Unicode("idle").tag(sync=True)  # idle, running, done, error: ...
    metric_name = traitlets.Unicode("").tag(sync=True)  # "" when there is no readout
    metric_values = traitlets.Dict().tag(sync=True)  # {"baseline": float, "steered": float} of the run shown

    def __init__(
        self,
        model: Model,
        vectors: Mapping[str, SteeringVector | torch.Tensor | Any],
        site: str | None = None,
        prompt: str = "I think that",
        ranges: Mapping[str, tuple[float, float, float]] | None = None,
        default_range: tuple[float, float, float] = (-8.0, 8.0, 0.5),
        max_new_tokens: int = 24,
        temperature: float = 0.0,
        seed: int = 0,
        autorun: bool = True,
        metric: str | Metric | BoundMetric | Any = None,
        metric_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(vectors, Mapping) or not vectors:
            raise ValueError("vectors must be a non-empty dict {name: SteeringVector or direction tensor}.")
        sv_sites = [v.site for v in vectors.values() if isinstance(v, SteeringVector)]
        site = site or (sv_sites[0] if sv_sites else None)
        if site is None:
            raise ValueError("Give site= (e.g. 'blocks.6.hook_resid_post'): plain directions do not say where they go.")
        model.parse_sites(site)
        width = model.site_dim(site)
        self._model = model
        self._directions: dict[str, torch.Tensor] = {}
        for name, vec in vectors.items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"Slider names must be non-empty strings, got {name!r}.")
            direction = vec.direction if isinstance(vec, SteeringVector) else check_direction(vec, f"vector {name!r}")
            if direction.shape[0] != width:
                raise ValueError(f"Vector {name!r} has d={direction.shape[0]}, but {site} has width {width}.")
            self._directions[name] = direction
        check_texts([prompt])
        self._metric, name = _bind_metric(model, metric)
        all_ranges = {n: list(_check_range(n, (ranges or {}).get(n, default_range))) for n in self._directions}
        for n in ranges or {}:
            if n not in self._directions:
                raise ValueError(f"ranges names {n!r}, which is not a slider; sliders are {list(self._directions)}.")
        self.history: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._gen = 0  # id of the newest request
        self._done_gen = 0  # id of the newest finished (or superseded) request
        self._baseline_key: tuple[Any, ...] | None = None
        self._baseline: list[int] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        self._autorun = False
        self._baseline_logits: torch.Tensor | None = None
        self.last_error: BaseException | None = None  # the exception of the last failed generation
        super().__init__(
            prompt=prompt,
            names=list(self._directions),
            ranges=all_ranges,
            values=dict.fromkeys(self._directions, 0.0),
            sites=model.sites_of_width(width),
            site=site,
            temperature=float(temperature),
            seed=int(seed),
            max_new_tokens=int(max_new_tokens),
            metric_name=name if metric_name is None else str(metric_name),
            **kwargs,
        )
        self.on_msg(self._on_message)
        self._autorun = autorun
        if autorun:
            self.run()

    # ------------------------------------------------------------ validation
    @traitlets.validate("values")
    def _check_values(self, proposal: dict[str, Any]) -> dict[str, float]:
        new = proposal["value"]
        unknown = [k for k in new if k not in self._directions]
        if unknown:
            raise traitlets.TraitError(f"Unknown slider(s) {unknown}; the sliders are {list(self._directions)}.")
        merged = dict(self.values)
        for k, v in new.items():
            try:
                merged[k] = check_number(v, f"slider {k!r}")
            except (TypeError, ValueError) as err:
                raise traitlets.TraitError(str(err)) from None
        return merged

    @traitlets.validate("site")
    def _check_site(self, proposal: dict[str, Any]) -> str:
        if self.sites and proposal["value"] not in self.sites:
            value = proposal["value"]
            raise traitlets.TraitError(f"site {value!r} is not one of the sites of this width: {self.sites}.")
        return proposal["value"]

    @traitlets.validate("temperature")
    def _check_temperature(self, proposal: dict[str, Any]) -> float:
        t = proposal["value"]
        if not math.isfinite(t) or t < 0:
            raise traitlets.TraitError(f"temperature must be >= 0 (0 is greedy), got {t}.")
        return t

    @traitlets.validate("max_new_tokens")
    def _check_max_new(self, proposal: dict[str, Any]) -> int:
        n = proposal["value"]
        if not 1 <= n <= 512:
            raise traitlets.TraitError(f"max_new_tokens must be in 1..512, got {n}.")
        return n

    @traitlets.observe("values", "prompt", "site", "temperature", "seed", "max_new_tokens")
    def _on_change(self, _change: dict[str, Any]) -> None:
        if self._autorun:
            self.run()

    def _on_message(self, _widget: Any, content: dict[str, Any], _buffers: list[Any]) -> None:
        if content.get("type") == "run":  # the Run button: a new generation even if nothing changed
            self.run()

    # ---------------------------------------------------------------- running
    def steering(self) -> list[tuple[SteeringVector, float]]:
        """The steering the sliders describe now: (vector at the selected site, scale) pairs."""
        return [
            (SteeringVector(self.site, self._directions[n], 1.0, {"method": "panel", "name": n}), v)
            for n, v in self.values.items()
            if v != 0.0
        ]

    def run(self) -> int:
        """Start a generation for the current settings (superseding any running one); returns its id."""
        if not self.prompt.strip():
            self.status = "error: the prompt is empty; type some text to continue."
            return self._gen
        with self._wake:
            self._gen += 1
            gen = self._gen
            self._wake.notify_all()
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._worker, name="ilab-steering", daemon=True)
            self._thread.start()
        return gen

    def wait(self, timeout: float = 120.0) -> bool:
        """Block until the newest request has finished; False on timeout."""
        timeout = check_number(timeout, "timeout")
        with self._wake:
            return self._wake.wait_for(lambda: self._done_gen >= self._gen, timeout=timeout)

    def close(self) -> None:
        """Stop the worker thread (a running generation ends after its current token) and close the widget."""
        wake = getattr(self, "_wake", None)  # absent when construction failed
        if wake is not None:
            with wake:
                self._closed = True
                self._gen += 1
                wake.notify_all()
        super().close()

    def _worker(self) -> None:
        seen = 0
        while True:
            with self._wake:
                self._wake.wait_for(lambda seen=seen: self._gen != seen or self._closed)
                if self._closed:
                    self._done_gen = self._gen
                    self._wake.notify_all()
                    return
                gen = seen = self._gen
            try:
                self._run_once(gen)
                if self._gen == gen:
                    self.last_error = None
            except Exception as err:  # shown in the panel, not printed into whichever cell runs now
                logger.debug("steering generation failed", exc_info=True)
                self.last_error = err
                self.status = f"error: {type(err).__name__}: {err} (Run tries again)"
            with self._wake:
                self._done_gen = max(self._done_gen, gen)
                self._wake.notify_all()

    def _run_once(self, gen: int) -> None:
        prompt, values, site = self.prompt, dict(self.values), self.site
        temperature, seed, n_new = self.temperature, self.seed, self.max_new_tokens
        stale = lambda: self._gen != gen  # noqa: E731
        decode = self._model.tokenizer.decode
        self.status = "running"
        key = (prompt, temperature, seed, n_new)
        if key != self._baseline_key:
            self.baseline_tokens = []
            base: list[int] = []

            def on_base(tok: int) -> None:
                base.append(tok)
                if not stale():
                    self.baseline_tokens = [*self.baseline_tokens, decode([tok])]

            stream(self._model, prompt, [], n_new, temperature, seed, on_token=on_base, should_stop=stale)
            if stale():
                return
            self._baseline_key, self._baseline = key, base
            self._baseline_logits = next_token_logits(self._model, prompt, []) if self._metric else None
        self.steered_tokens = []
        self.metric_values = {}
        self.run_id = gen
        steering = self.steering()
        if not steering:
            ids = list(self._baseline)
            self.steered_tokens = [decode([t]) for t in ids]
        else:
            ids = []

            def on_tok(tok: int) -> None:
                ids.append(tok)
                if not stale():
                    self.steered_tokens = [*self.steered_tokens, decode([tok])]

            stream(self._model, prompt, steering, n_new, temperature, seed, on_token=on_tok, should_stop=stale)
        if stale():
            return
        readout = self._readout(prompt, steering)
        if stale():
            return
        self.metric_values = readout
        self.history.append(
            {
                "run": gen,
                "prompt": prompt,
                "values": values,
                "site": site,
                "temperature": temperature,
                "seed": seed,
                "baseline": decode(self._baseline, skip_special_tokens=True),
                "steered": decode(ids, skip_special_tokens=True),
                **({"metric": readout} if readout else {}),
            }
        )
        self.status = "done"

    def _readout(self, prompt: str, steering: list[tuple[SteeringVector, float]]) -> dict[str, float]:
        """The metric on the baseline's and the steered next-token logits ({} without a metric)."""
        if self._metric is None or self._baseline_logits is None:
            return {}
        base = self._baseline_logits[None]
        steered = next_token_logits(self._model, prompt, steering)[None] if steering else base
        if self._metric.metric.kind == "kl":
            self._metric.set_clean(base)
        return {"baseline": float(self._metric(base)[0]), "steered": float(self._metric(steered)[0])}

    def __repr__(self) -> str:
        vals = ", ".join(f"{k}={v:g}" for k, v in self.values.items())
        return f"SteeringPanel({self.site}, {vals})"


def _check_range(name: str, rng: Any) -> tuple[float, float, float]:
    try:
        lo, hi, step = (float(x) for x in rng)
    except (TypeError, ValueError):
        raise ValueError(f"The range of {name!r} must be (min, max, step), got {rng!r}.") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi and 0 < step <= hi - lo):
        raise ValueError(f"The range of {name!r} must have min < max and 0 < step <= max - min, got {rng!r}.")
    return lo, hi, step


def _bind_metric(model: Model, metric: Any) -> tuple[BoundMetric | None, str]:
    """The panel's readout bound to the model (tokens checked now), and its default name."""
    if metric is None:
        return None, ""
    if isinstance(metric, str):
        bound = prob(metric).on(model)
        return bound, f"P({metric!r})"
    bound = metric if isinstance(metric, BoundMetric) else as_metric(metric).on(model)
    m = bound.metric
    if m.kind == "prob" and isinstance(m.answer, (str, int)):
        return bound, f"P({m.answer!r})"
    if m.kind == "logit_diff" and isinstance(m.answer, (str, int)) and isinstance(m.wrong, (str, int)):
        return bound, f"logit {m.answer!r} − {m.wrong!r}"
    return bound, "KL from the baseline" if m.kind == "kl" else m.name
