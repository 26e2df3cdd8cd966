"""Live steered generation: a background thread where the newest request wins.

:class:`LiveSteering` holds named directions that all go to one site, and generates the baseline and the
steered continuation of a prompt in a thread of its own, so the caller (a widget's kernel, a notebook) stays
responsive. Each :meth:`~LiveSteering.request` supersedes the running one: its generation id no longer
matches, and a stopping criterion ends it after the current token; superseded runs leave no history. Tokens
are passed to ``show`` as they are generated. Every run of the model holds ``model.lock`` (through
:func:`.hooks.stream` and :func:`.hooks.next_token_logits`), so a notebook's traces take turns with it.

The checks of the settings live here too (:func:`check_values`, :func:`check_temperature`,
:func:`check_max_new_tokens`, :func:`check_range`, :func:`bind_metric`), for the steering panel and any
other front end.

Example
-------
>>> live = LiveSteering(model, {"happy": vec}, show=print)      # show(status=..., steered_tokens=[...], ...)
>>> live.request(Settings("I think that", {"happy": 4.0}, vec.site, max_new_tokens=12))
>>> live.wait(); live.history[-1]["steered"]
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..checks import check_number
from ..readout.metrics import BoundMetric, as_metric, prob
from .hooks import next_token_logits, stream
from .vectors import SteeringVector, check_direction

if TYPE_CHECKING:
    from ..model.model import Model

logger = logging.getLogger(__name__)

#: The most tokens one live generation makes.
MAX_NEW_TOKENS = 512
#: What ``show`` is told when a request has an empty prompt (nothing runs).
EMPTY_PROMPT = "error: the prompt is empty; type some text to continue."


@dataclass(frozen=True)
class Settings:
    """What one generation runs: the prompt, each direction's scale, the site and the sampling."""

    prompt: str
    values: Mapping[str, float] = field(default_factory=dict)
    site: str = ""
    temperature: float = 0.0
    seed: int = 0
    max_new_tokens: int = 24


class LiveSteering:
    """Generates baseline and steered text in a background thread; the newest :meth:`request` wins.

    ``vectors`` are ``{"name": SteeringVector or direction tensor [d]}``, all applied at ``site`` (default: the
    first SteeringVector's site; any site of the same width, :attr:`sites`, can be requested). ``metric`` is
    read on the next-token logits after the prompt, baseline and steered (see :func:`bind_metric`). ``show``
    is called with keyword arguments named after what changed: ``status``, ``baseline_tokens``,
    ``steered_tokens`` (the token strings so far), ``run_id`` (the run whose tokens are shown) and
    ``metric_values``; it runs in the background thread.

    >>> live = LiveSteering(model, {"happy": vec}, metric=" great")
    >>> live.request(Settings("I think that", {"happy": 4.0}, vec.site)); live.wait()
    """

    def __init__(
        self,
        model: Model,
        vectors: Mapping[str, SteeringVector | torch.Tensor | Any],
        site: str | None = None,
        metric: str | BoundMetric | Any = None,
        show: Callable[..., None] | None = None,
    ) -> None:
        self.model = model
        self.site, self.directions = check_vectors(model, vectors, site)
        self.sites: list[str] = model.sites_of_width(model.site_dim(self.site))
        self.metric, self.metric_name = bind_metric(model, metric)
        self.history: list[dict[str, Any]] = []
        self.last_error: BaseException | None = None  # the exception of the last failed generation
        self._show = show if show is not None else _ignore
        self._wake = threading.Condition(threading.Lock())
        self._gen = 0  # id of the newest request
        self._done_gen = 0  # id of the newest finished (or superseded) request
        self._settings = Settings("")
        self._thread: threading.Thread | None = None
        self._closed = False
        self._baseline_key: tuple[Any, ...] | None = None
        self._baseline: list[int] = []
        self._baseline_logits: torch.Tensor | None = None

    @property
    def latest(self) -> int:
        """The id of the newest request."""
        return self._gen

    def steering(self, site: str, values: Mapping[str, float]) -> list[tuple[SteeringVector, float]]:
        """(vector at ``site``, scale) pairs of the directions whose scale is not 0."""
        return [
            (SteeringVector(site, self.directions[n], 1.0, {"method": "panel", "name": n}), v)
            for n, v in values.items()
            if v != 0.0
        ]

    def check(self, settings: Settings) -> Settings:
        """``settings`` with its values as floats, or a ValueError naming the bad setting and the valid ones."""
        if settings.site not in self.sites:
            raise ValueError(f"site {settings.site!r} is not one of the sites of this width: {self.sites}.")
        check_temperature(settings.temperature)
        check_max_new_tokens(settings.max_new_tokens)
        values = check_values(settings.values, list(self.directions))
        return Settings(settings.prompt, values, settings.site, settings.temperature, settings.seed,
                        settings.max_new_tokens)  # fmt: skip

    def request(self, settings: Settings) -> int:
        """Start a generation for ``settings`` (superseding any running one); returns its id.

        An empty prompt starts nothing: ``show`` gets an error status and the id of the newest request returns.
        """
        settings = self.check(settings)
        if not settings.prompt.strip():
            self._show(status=EMPTY_PROMPT)
            return self._gen
        with self._wake:
            self._gen += 1
            self._settings = settings
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
        """Stop the worker thread (a running generation ends after its current token)."""
        with self._wake:
            self._closed = True
            self._gen += 1
            self._wake.notify_all()

    def _worker(self) -> None:
        seen = 0

        def newer() -> bool:
            return self._gen != seen or self._closed

        while True:
            with self._wake:
                self._wake.wait_for(newer)
                if self._closed:
                    self._done_gen = self._gen
                    self._wake.notify_all()
                    return
                gen = seen = self._gen
                settings = self._settings
            try:
                self._run_once(gen, settings)
                if self._gen == gen:
                    self.last_error = None
            except Exception as err:  # shown by the front end, not printed into whichever cell runs now
                logger.debug("steering generation failed", exc_info=True)
                self.last_error = err
                self._show(status=f"error: {type(err).__name__}: {err} (Run tries again)")
            with self._wake:
                self._done_gen = max(self._done_gen, gen)
                self._wake.notify_all()

    def _stale(self, gen: int) -> bool:
        return self._gen != gen

    def _stream(self, gen: int, s: Settings, steering: list[tuple[SteeringVector, float]], trait: str) -> list[int]:
        """Generate with ``steering``, showing the token strings so far as ``trait``; the ids generated."""
        ids: list[int] = []
        shown: list[str] = []
        decode = self.model.tokenizer.decode

        def on_token(tok: int) -> None:
            ids.append(tok)
            if not self._stale(gen):
                shown.append(decode([tok]))
                self._show(**{trait: list(shown)})

        stream(self.model, s.prompt, steering, s.max_new_tokens, s.temperature, s.seed, on_token=on_token,
               should_stop=lambda: self._stale(gen))  # fmt: skip
        return ids

    def _run_once(self, gen: int, s: Settings) -> None:
        decode = self.model.tokenizer.decode
        self._show(status="running")
        key = (s.prompt, s.temperature, s.seed, s.max_new_tokens)
        if key != self._baseline_key:
            self._show(baseline_tokens=[])
            base = self._stream(gen, s, [], "baseline_tokens")
            if self._stale(gen):
                return
            self._baseline_key, self._baseline = key, base
            self._baseline_logits = next_token_logits(self.model, s.prompt, []) if self.metric else None
        self._show(steered_tokens=[], metric_values={}, run_id=gen)
        steering = self.steering(s.site, s.values)
        if not steering:
            ids = list(self._baseline)
            self._show(steered_tokens=[decode([t]) for t in ids])
        else:
            ids = self._stream(gen, s, steering, "steered_tokens")
        if self._stale(gen):
            return
        readout = self._readout(s.prompt, steering)
        if self._stale(gen):
            return
        self._show(metric_values=readout)
        self.history.append(
            {
                "run": gen,
                "prompt": s.prompt,
                "values": dict(s.values),
                "site": s.site,
                "temperature": s.temperature,
                "seed": s.seed,
                "baseline": decode(self._baseline, skip_special_tokens=True),
                "steered": decode(ids, skip_special_tokens=True),
                **({"metric": readout} if readout else {}),
            }
        )
        self._show(status="done")

    def _readout(self, prompt: str, steering: list[tuple[SteeringVector, float]]) -> dict[str, float]:
        """The metric on the baseline's and the steered next-token logits ({} without a metric)."""
        if self.metric is None or self._baseline_logits is None:
            return {}
        base = self._baseline_logits[None]
        steered = next_token_logits(self.model, prompt, steering)[None] if steering else base
        if self.metric.metric.kind == "kl":
            self.metric.set_clean(base)
        return {"baseline": float(self.metric(base)[0]), "steered": float(self.metric(steered)[0])}


def _ignore(**_: Any) -> None:
    """A ``show`` that shows nothing."""


def check_vectors(
    model: Model, vectors: Mapping[str, SteeringVector | torch.Tensor | Any], site: str | None
) -> tuple[str, dict[str, torch.Tensor]]:
    """The site (default: the first SteeringVector's) and each name's direction, checked against its width."""
    if not isinstance(vectors, Mapping) or not vectors:
        raise ValueError("vectors must be a non-empty dict {name: SteeringVector or direction tensor}.")
    sv_sites = [v.site for v in vectors.values() if isinstance(v, SteeringVector)]
    site = site or (sv_sites[0] if sv_sites else None)
    if site is None:
        raise ValueError("Give site= (e.g. 'blocks.6.hook_resid_post'): plain directions do not say where they go.")
    model.parse_site(site)
    width = model.site_dim(site)
    directions: dict[str, torch.Tensor] = {}
    for name, vec in vectors.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"Slider names must be non-empty strings, got {name!r}.")
        direction = vec.direction if isinstance(vec, SteeringVector) else check_direction(vec, f"vector {name!r}")
        if direction.shape[0] != width:
            raise ValueError(f"Vector {name!r} has d={direction.shape[0]}, but {site} has width {width}.")
        directions[name] = direction
    return site, directions


def check_values(values: Mapping[str, Any], names: list[str]) -> dict[str, float]:
    """Scales by name as finite floats; a name that is not a direction's is refused, naming the valid ones."""
    unknown = [k for k in values if k not in names]
    if unknown:
        raise ValueError(f"Unknown slider(s) {unknown}; the sliders are {names}.")
    return {k: check_number(v, f"slider {k!r}") for k, v in values.items()}


def check_temperature(temperature: float) -> float:
    """A temperature >= 0 (0 is greedy)."""
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 is greedy), got {temperature}.")
    return temperature


def check_max_new_tokens(n: int) -> int:
    """A number of new tokens in 1..:data:`MAX_NEW_TOKENS`."""
    if not 1 <= n <= MAX_NEW_TOKENS:
        raise ValueError(f"max_new_tokens must be in 1..{MAX_NEW_TOKENS}, got {n}.")
    return n


def check_range(name: str, rng: Any) -> tuple[float, float, float]:
    """A slider's (min, max, step): finite, min < max and 0 < step <= max - min."""
    try:
        lo, hi, step = (float(x) for x in rng)
    except (TypeError, ValueError):
        raise ValueError(f"The range of {name!r} must be (min, max, step), got {rng!r}.") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi and 0 < step <= hi - lo):
        raise ValueError(f"The range of {name!r} must have min < max and 0 < step <= max - min, got {rng!r}.")
    return lo, hi, step


def check_ranges(
    ranges: Mapping[str, Any] | None, names: list[str], default: tuple[float, float, float]
) -> dict[str, list[float]]:
    """Each name's [min, max, step] (``default`` where ``ranges`` does not say); a range for no name is refused."""
    ranges = ranges or {}
    out = {n: list(check_range(n, ranges.get(n, default))) for n in names}
    for n in ranges:
        if n not in names:
            raise ValueError(f"ranges names {n!r}, which is not a slider; sliders are {names}.")
    return out


def bind_metric(model: Model, metric: Any) -> tuple[BoundMetric | None, str]:
    """A readout bound to the model (tokens checked now), and its default name.

    A string is the probability of that token; an ``ilab.metrics`` metric (``kl_to_clean()`` is the KL of the
    steered distribution from the baseline's) or any function of logits ``[rows, vocab]`` returning one value
    per row is bound as it is.
    """
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
