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
>>> panel.range_note                   # how the sliders' ends were chosen: from the site's typical norm

The generation runs in :class:`interplab.core.steering.live.LiveSteering`, which holds ``model.lock``
(every nnsight trace of the model does too), so a cell that runs a trace while the panel generates
waits for the token in flight instead of colliding with it. An error in a generation shows in the
panel (``panel.last_error`` keeps the exception) instead of printing into whichever cell runs, and
Run starts a new generation whatever state the panel is in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
import traitlets
from interplab.core.checks import check_float, check_int, check_positive_int, check_texts
from interplab.core.readout.metrics import BoundMetric, Metric
from interplab.core.steering.live import (
    LiveSteering,
    Settings,
    check_max_new_tokens,
    check_ranges,
    check_temperature,
    check_values,
)
from interplab.core.steering.ranges import REACH, default_ranges
from interplab.core.steering.vectors import SteeringVector

from ._kit import Widget, css, esm

if TYPE_CHECKING:
    from interplab.core.model.model import Model


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
    default_range
        ``(min, max, step)`` for the sliders ``ranges`` does not name. By default each is scaled to the site:
        its ends add about twice the site's typical activation norm (median per token over a neutral text,
        ``interplab.core.steering.ranges``), whatever the vector's own norm; the panel says so
        (``range_note``) and rescales when another site is picked.
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
    range_note = traitlets.Unicode("").tag(sync=True)  # how the sliders' ends were chosen

    def __init__(
        self,
        model: Model,
        vectors: Mapping[str, SteeringVector | torch.Tensor | Any],
        site: str | None = None,
        prompt: str = "I think that",
        ranges: Mapping[str, tuple[float, float, float]] | None = None,
        default_range: tuple[float, float, float] | None = None,
        max_new_tokens: int = 24,
        temperature: float = 0.0,
        seed: int = 0,
        autorun: bool = True,
        metric: str | Metric | BoundMetric | Any = None,
        metric_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        check_texts([prompt])
        check_int("seed", seed, 0, 2**32 - 1)  # a number the browser holds exactly
        check_positive_int("max_new_tokens", max_new_tokens)
        check_float("temperature", temperature, minimum=0)
        live = LiveSteering(model, vectors, site, metric, show=self._show)
        names = list(live.directions)
        given = ranges or {}
        self._scaled = [] if default_range is not None else [n for n in names if n not in given]
        all_ranges = check_ranges(ranges, names, default_range or (-8.0, 8.0, 0.5))
        self._live = live
        self._norms: dict[str, float] = {}
        note = ""
        if self._scaled:
            all_ranges, note = self._site_ranges(live.site, all_ranges)
        self._autorun = False
        super().__init__(
            prompt=prompt,
            names=names,
            ranges=all_ranges,
            values=dict.fromkeys(names, 0.0),
            sites=live.sites,
            site=live.site,
            temperature=float(temperature),
            seed=int(seed),
            max_new_tokens=int(max_new_tokens),
            metric_name=live.metric_name if metric_name is None else str(metric_name),
            range_note=note,
            **kwargs,
        )
        self.on_msg(self._on_message)
        self._autorun = autorun
        if autorun:
            self.run()

    # ------------------------------------------------------------ validation
    @traitlets.validate("values")
    def _check_values(self, proposal: dict[str, Any]) -> dict[str, float]:
        try:
            new = check_values(proposal["value"], list(self._live.directions))
        except (TypeError, ValueError) as err:
            raise traitlets.TraitError(str(err)) from None
        return {**self.values, **new}

    @traitlets.validate("site")
    def _check_site(self, proposal: dict[str, Any]) -> str:
        if self.sites and proposal["value"] not in self.sites:
            value = proposal["value"]
            raise traitlets.TraitError(f"site {value!r} is not one of the sites of this width: {self.sites}.")
        return proposal["value"]

    @traitlets.validate("temperature")
    def _check_temperature(self, proposal: dict[str, Any]) -> float:
        try:
            return check_temperature(proposal["value"])
        except ValueError as err:
            raise traitlets.TraitError(str(err)) from None

    @traitlets.validate("max_new_tokens")
    def _check_max_new(self, proposal: dict[str, Any]) -> int:
        try:
            return check_max_new_tokens(proposal["value"])
        except ValueError as err:
            raise traitlets.TraitError(str(err)) from None

    def _site_ranges(self, site: str, ranges: dict[str, list[float]]) -> tuple[dict[str, list[float]], str]:
        """``ranges`` with the scaled sliders' ranges for ``site``, and the note that says how they were chosen."""
        directions = {n: self._live.directions[n] for n in self._scaled}
        scaled, norm = default_ranges(self._live.model, site, directions, self._norms.get(site))
        self._norms[site] = norm
        lengths = ", ".join(f"|{n}| = {float(d.float().norm()):.3g}" for n, d in directions.items())
        note = (f"slider ends add about {REACH:g}x the typical norm of {site} ({norm:.3g}, median per token "
                f"over a neutral text); {lengths}")  # fmt: skip
        return {**ranges, **{n: list(r) for n, r in scaled.items()}}, note

    @traitlets.observe("site")
    def _rescale_sliders(self, change: dict[str, Any]) -> None:
        if self._scaled and change["new"] != change["old"]:
            self.ranges, self.range_note = self._site_ranges(change["new"], dict(self.ranges))

    @traitlets.observe("values", "prompt", "site", "temperature", "seed", "max_new_tokens")
    def _on_change(self, _change: dict[str, Any]) -> None:
        if self._autorun:
            self.run()

    def _on_message(self, _widget: Any, content: dict[str, Any], _buffers: list[Any]) -> None:
        if content.get("type") == "run":  # the Run button: a new generation even if nothing changed
            self.run()

    def _show(self, **changes: Any) -> None:
        """Show what the generation changed (called from its thread)."""
        for trait, value in changes.items():
            setattr(self, trait, value)

    # ---------------------------------------------------------------- running
    @property
    def history(self) -> list[dict[str, Any]]:
        """Every finished run: prompt, values, site, sampling, baseline and steered text (and the metric)."""
        return self._live.history

    @property
    def last_error(self) -> BaseException | None:
        """The exception of the last failed generation (None once a run succeeds)."""
        return self._live.last_error

    def steering(self) -> list[tuple[SteeringVector, float]]:
        """The steering the sliders describe now: (vector at the selected site, scale) pairs."""
        return self._live.steering(self.site, self.values)

    def run(self) -> int:
        """Start a generation for the current settings (superseding any running one); returns its id."""
        settings = Settings(self.prompt, dict(self.values), self.site, self.temperature, self.seed,
                            self.max_new_tokens)  # fmt: skip
        return self._live.request(settings)

    def wait(self, timeout: float = 120.0) -> bool:
        """Block until the newest request has finished; False on timeout."""
        return self._live.wait(timeout)

    def close(self) -> None:
        """Stop the worker thread (a running generation ends after its current token) and close the widget."""
        live = getattr(self, "_live", None)  # absent when construction failed
        if live is not None:
            live.close()
        super().close()

    def __repr__(self) -> str:
        vals = ", ".join(f"{k}={v:g}" for k, v in self.values.items())
        return f"SteeringPanel({self.site}, {vals})"
