"""Live steered generation (``core/steering/live.py``) without a widget: the background thread, the newest
request winning, ``model.lock`` held while the model runs, the settings checks."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from interplab.core.steering.live import (
    EMPTY_PROMPT,
    LiveSteering,
    Settings,
    check_max_new_tokens,
    check_range,
    check_ranges,
    check_temperature,
    check_values,
)

from tests.steering.common import S
from tests.tiny import tiny_model

SITE = "blocks.1.hook_resid_pre"
PROMPT = "the cat sat on the mat"


@pytest.fixture
def gpt2():
    return tiny_model("gpt2")


class Shown:
    """A ``show`` that keeps every change it is told about, in order."""

    def __init__(self) -> None:
        self.changes: list[dict] = []
        self.lock = threading.Lock()

    def __call__(self, **changes) -> None:
        with self.lock:
            self.changes.append(changes)

    def last(self, name: str):
        with self.lock:
            return next((c[name] for c in reversed(self.changes) if name in c), None)


def live_for(model, **kwargs):
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(model.d_model, generator=gen) * 3, torch.randn(model.d_model, generator=gen) * 3
    shown = Shown()
    vec = S.SteeringVector(SITE, a)
    return LiveSteering(model, {"alpha": vec, "beta": b}, show=shown, **kwargs), shown, vec


def test_a_request_generates_baseline_and_steered_text(gpt2):
    live, shown, vec = live_for(gpt2)
    assert live.site == SITE and SITE in live.sites and live.metric is None and live.metric_name == ""
    gen = live.request(Settings(PROMPT, {"alpha": 4.0}, SITE, max_new_tokens=6))
    assert gen == live.latest == 1
    assert live.wait(60)
    (run,) = live.history
    assert run["run"] == 1 and run["values"] == {"alpha": 4.0} and run["site"] == SITE
    assert run["baseline"] == gpt2.generate(PROMPT, max_new_tokens=6)[0]
    assert run["steered"] == S.generate(gpt2, PROMPT, vec * 4.0, max_new_tokens=6)[0] != run["baseline"]
    assert shown.changes[0] == {"status": "running"} and shown.last("status") == "done"
    assert shown.last("run_id") == 1 and len(shown.last("baseline_tokens")) == 6
    streamed = S.stream(gpt2, PROMPT, vec * 4.0, max_new_tokens=6)
    assert "".join(shown.last("steered_tokens")) == gpt2.tokenizer.decode(streamed)
    live.close()


def test_the_newest_request_wins(gpt2):
    live, _, vec = live_for(gpt2)
    slow = gpt2.module.register_forward_hook(lambda *_: time.sleep(0.01))
    try:
        for value in (1.0, 2.0, 3.0, 5.0):  # a burst, faster than generation
            live.request(Settings(PROMPT, {"alpha": value}, SITE, max_new_tokens=32))
        assert live.wait(120)
    finally:
        slow.remove()
    assert [r["values"]["alpha"] for r in live.history] == [5.0]  # superseded runs leave no history
    assert live.history[-1]["steered"] == S.generate(gpt2, PROMPT, vec * 5.0, max_new_tokens=32)[0]
    live.close()


def test_a_generation_holds_the_model_lock(gpt2):
    """Nothing of a request runs while another thread holds ``model.lock``; it goes on once the lock is free."""
    live, shown, _ = live_for(gpt2)
    with gpt2.lock:
        live.request(Settings(PROMPT, {"alpha": 1.0}, SITE, max_new_tokens=4))
        assert not live.wait(0.5)
        assert shown.last("baseline_tokens") == [] and shown.last("steered_tokens") is None
    assert live.wait(60) and shown.last("status") == "done" and len(live.history) == 1
    live.close()


def test_a_failed_generation_is_kept_and_the_next_recovers(gpt2):
    live, shown, vec = live_for(gpt2)

    def boom(*_):
        raise RuntimeError("a broken hook")

    bad = gpt2.module.transformer.h[0].register_forward_hook(boom)
    try:
        live.request(Settings(PROMPT, {"alpha": 2.0}, SITE, max_new_tokens=4))
        assert live.wait(60)
    finally:
        bad.remove()
    assert shown.last("status") == "error: RuntimeError: a broken hook (Run tries again)"
    assert isinstance(live.last_error, RuntimeError) and live.history == []
    live.request(Settings(PROMPT, {"alpha": 2.0}, SITE, max_new_tokens=4))
    assert live.wait(60) and live.last_error is None and shown.last("status") == "done"
    assert live.history[-1]["steered"] == S.generate(gpt2, PROMPT, vec * 2.0, max_new_tokens=4)[0]
    live.close()


def test_settings_are_checked_before_anything_runs(gpt2):
    live, shown, _ = live_for(gpt2, metric=" cat")
    assert live.metric_name == "P(' cat')"
    with pytest.raises(ValueError, match=r"Unknown slider\(s\) \['y'\]; the sliders are \['alpha', 'beta'\]"):
        live.request(Settings(PROMPT, {"y": 1.0}, SITE))
    with pytest.raises(ValueError, match="finite"):
        live.request(Settings(PROMPT, {"alpha": float("nan")}, SITE))
    with pytest.raises(ValueError, match="not one of the sites of this width"):
        live.request(Settings(PROMPT, {}, "blocks.0.hook_resid_postx"))
    with pytest.raises(ValueError, match=r"temperature must be >= 0 \(0 is greedy\), got -1.0"):
        live.request(Settings(PROMPT, {}, SITE, temperature=-1.0))
    with pytest.raises(ValueError, match=r"max_new_tokens must be in 1\.\.512, got 0"):
        live.request(Settings(PROMPT, {}, SITE, max_new_tokens=0))
    assert live.request(Settings("  ", {}, SITE)) == 0  # an empty prompt: reported, nothing runs
    assert shown.changes == [{"status": EMPTY_PROMPT}] and live.latest == 0 and live.history == []
    assert check_values({"a": 2}, ["a", "b"]) == {"a": 2.0}
    assert check_temperature(0.5) == 0.5 and check_max_new_tokens(512) == 512
    assert check_range("a", (-1, 1, 0.5)) == (-1.0, 1.0, 0.5)
    assert check_ranges({"b": (0, 2, 1)}, ["a", "b"], (-8.0, 8.0, 0.5)) == {"a": [-8.0, 8.0, 0.5], "b": [0.0, 2.0, 1.0]}
    with pytest.raises(ValueError, match="must be \\(min, max, step\\)"):
        check_range("a", "wide")
    with pytest.raises(ValueError, match="not a slider"):
        check_ranges({"c": (0, 1, 0.5)}, ["a"], (-8.0, 8.0, 0.5))
    with pytest.raises(ValueError, match="non-empty dict"):
        LiveSteering(gpt2, {})
    with pytest.raises(ValueError, match="Give site="):
        LiveSteering(gpt2, {"x": torch.ones(gpt2.d_model)})
    with pytest.raises(ValueError, match=r"d=16.*width 32"):
        LiveSteering(gpt2, {"x": torch.ones(16)}, site=SITE)
    with pytest.raises(TypeError, match="Slider names must be non-empty strings"):
        LiveSteering(gpt2, {"": torch.ones(32)}, site=SITE)
    live.close()
