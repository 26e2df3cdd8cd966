"""SteeringPanel on the Python side: traits, runs in a background thread, cancellation, history, bad input."""

from __future__ import annotations

import time

import pytest
import torch
import traitlets

import interplab as ilab
from tests.tiny import tiny_model

S = ilab.steering
SITE = "blocks.1.hook_resid_pre"
PROMPT = "the cat sat on the mat"


@pytest.fixture
def gpt2():
    return tiny_model("gpt2")


def directions(model, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(model.d_model, generator=gen) * 3, torch.randn(model.d_model, generator=gen) * 3


def panel_for(model, **kwargs):
    a, b = directions(model)
    vec = S.SteeringVector(SITE, a)
    kwargs.setdefault("max_new_tokens", 6)
    return ilab.widgets.SteeringPanel(model, {"alpha": vec, "beta": b}, prompt=PROMPT, **kwargs), vec, b


def test_panel_traits_and_first_run(gpt2):
    panel, _, _ = panel_for(gpt2, ranges={"beta": (-2, 2, 0.25)}, default_range=(-8.0, 8.0, 0.5))
    assert panel.wait(60)
    assert panel.names == ["alpha", "beta"]
    assert panel.ranges == {"alpha": [-8.0, 8.0, 0.5], "beta": [-2.0, 2.0, 0.25]}
    assert panel.values == {"alpha": 0.0, "beta": 0.0}
    assert panel.site == SITE and SITE in panel.sites and "blocks.0.attn.hook_z" in panel.sites  # hook_z: 4x8=32
    assert panel.status == "done" and len(panel.baseline_tokens) == 6
    assert panel.steered_tokens == panel.baseline_tokens  # all sliders at 0: exactly the unsteered text
    (first,) = panel.history
    assert first["baseline"] == gpt2.generate(PROMPT, max_new_tokens=6)[0] == first["steered"]
    assert set(first) == {"run", "prompt", "values", "site", "temperature", "seed", "baseline", "steered"}


def test_setting_values_from_python_steers(gpt2):
    panel, vec, b = panel_for(gpt2)
    panel.wait(60)
    panel.values = {"alpha": 4.0}  # a partial dict: the other slider keeps its value
    assert panel.values == {"alpha": 4.0, "beta": 0.0}
    assert panel.wait(60)
    last = panel.history[-1]
    assert last["values"] == {"alpha": 4.0, "beta": 0.0}
    expected = S.generate(gpt2, PROMPT, vec * 4.0, max_new_tokens=6)[0]
    assert last["steered"] == expected != last["baseline"]
    assert "".join(panel.steered_tokens) == gpt2.tokenizer.decode(S.stream(gpt2, PROMPT, vec * 4.0, max_new_tokens=6))
    panel.values = {"alpha": -2.0, "beta": 1.5}
    panel.wait(60)
    both = [(S.SteeringVector(SITE, vec.direction), -2.0), (S.SteeringVector(SITE, b), 1.5)]
    assert panel.history[-1]["steered"] == S.generate(gpt2, PROMPT, both, max_new_tokens=6)[0]
    # another site of the same width: the same directions, added there
    panel.site = "blocks.0.hook_mlp_out"
    panel.wait(60)
    moved = [(v.at("blocks.0.hook_mlp_out"), s) for v, s in both]
    assert panel.history[-1]["steered"] == S.generate(gpt2, PROMPT, moved, max_new_tokens=6)[0]
    assert panel.history[-1]["site"] == "blocks.0.hook_mlp_out"


def test_a_new_request_cancels_the_running_one(gpt2):
    panel, vec, _ = panel_for(gpt2, max_new_tokens=64)
    panel.wait(60)
    n_before = len(panel.history)
    slow = gpt2.module.register_forward_hook(lambda *_: time.sleep(0.01))  # about 1 s per generation
    try:
        panel.values = {"alpha": 1.0}
        gen = panel._live.latest
        deadline = time.monotonic() + 30
        while not (panel.run_id == gen and len(panel.steered_tokens) >= 2) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert 2 <= len(panel.steered_tokens) < 64  # mid-run
        for value in (2.0, 3.0, 4.0, 5.0):  # a burst, faster than generation
            panel.values = {"alpha": value}
        assert panel.wait(120)
    finally:
        slow.remove()
    runs = panel.history[n_before:]
    assert [r["values"]["alpha"] for r in runs] == [5.0]  # superseded runs leave no history
    assert runs[-1]["steered"] == S.generate(gpt2, PROMPT, vec * 5.0, max_new_tokens=64)[0]
    assert panel.run_id == runs[-1]["run"] and len(panel.steered_tokens) == 64


def test_baseline_is_cached_until_prompt_or_sampling_changes(gpt2):
    panel, _, _ = panel_for(gpt2)
    panel.wait(60)
    calls = []
    handle = gpt2.module.register_forward_hook(lambda *_: calls.append(1))
    try:
        panel.values = {"alpha": 1.0}
        panel.wait(60)
        steered_only = len(calls)
        panel.prompt = "the dog ran"
        panel.wait(60)
    finally:
        handle.remove()
    assert steered_only <= 6  # one generation (<= 6 forwards), not two
    assert len(calls) > steered_only + 6  # a new prompt: baseline and steered again
    assert panel.history[-1]["baseline"] == gpt2.generate("the dog ran", max_new_tokens=6)[0]


def test_sampling_is_reproducible_with_a_seed(gpt2):
    panel, _, _ = panel_for(gpt2, temperature=1.5, seed=3)
    panel.wait(60)
    first = panel.history[-1]["baseline"]
    panel.seed = 4
    panel.wait(60)
    panel.seed = 3
    panel.wait(60)
    assert panel.history[-1]["baseline"] == first


def test_panel_bad_input(gpt2):
    a, _ = directions(gpt2)
    with pytest.raises(ValueError, match=r"d=16.*width 32"):
        ilab.widgets.SteeringPanel(gpt2, {"x": torch.ones(16)}, site=SITE)
    with pytest.raises(ValueError, match="Give site="):
        ilab.widgets.SteeringPanel(gpt2, {"x": a})
    with pytest.raises(ValueError, match="Unknown site"):
        ilab.widgets.SteeringPanel(gpt2, {"x": a}, site="blocks.9.hook_resid_post")
    with pytest.raises(ValueError, match="NaN"):
        ilab.widgets.SteeringPanel(gpt2, {"x": torch.full((32,), float("nan"))}, site=SITE)
    with pytest.raises(ValueError, match="empty"):
        ilab.widgets.SteeringPanel(gpt2, {"x": a}, site=SITE, prompt="  ")
    with pytest.raises(ValueError, match="non-empty dict"):
        ilab.widgets.SteeringPanel(gpt2, {}, site=SITE)
    with pytest.raises(ValueError, match="min < max"):
        ilab.widgets.SteeringPanel(gpt2, {"x": a}, site=SITE, ranges={"x": (1, -1, 0.1)})
    with pytest.raises(ValueError, match="not a slider"):
        ilab.widgets.SteeringPanel(gpt2, {"x": a}, site=SITE, ranges={"y": (-1, 1, 0.1)})
    panel = ilab.widgets.SteeringPanel(gpt2, {"x": a}, site=SITE, autorun=False)
    with pytest.raises(traitlets.TraitError, match=r"Unknown slider\(s\) \['y'\].*\['x'\]"):
        panel.values = {"y": 1.0}
    with pytest.raises(traitlets.TraitError, match="finite"):
        panel.values = {"x": float("nan")}
    with pytest.raises(traitlets.TraitError, match="not one of the sites"):
        panel.site = "blocks.0.hook_resid_postx"
    with pytest.raises(traitlets.TraitError, match="temperature"):
        panel.temperature = -1.0
    assert panel.history == [] and panel.status == "idle"
    panel._autorun = True
    panel.prompt = ""  # from the page: an empty prompt is reported, nothing runs
    assert panel.status.startswith("error: the prompt is empty")
    time.sleep(0.2)
    assert panel.history == []
    panel.close()


def test_traces_in_the_main_thread_while_the_panel_generates(gpt2):
    """The panel's generation and the notebook's traces take turns: no "parent cannot be on a different
    thread" from nnsight in the notebook's cell, and no error in the panel."""
    slow = gpt2.module.register_forward_hook(lambda *_: time.sleep(0.01))  # each generated token takes a while
    try:
        panel, vec, _ = panel_for(gpt2, max_new_tokens=20)
        want_logits = gpt2.logits(PROMPT)
        want_acts = gpt2.collect([PROMPT], sites=[SITE])[SITE]
        for i in range(6):
            panel.values = {"alpha": float(i % 3)}  # keep the panel generating
            deadline = time.monotonic() + 0.3
            while time.monotonic() < deadline:  # traces of every kind, in this (the main) thread
                torch.testing.assert_close(gpt2.logits(PROMPT), want_logits)
                torch.testing.assert_close(gpt2.collect([PROMPT], sites=[SITE])[SITE], want_acts)
                gpt2.generate(PROMPT, max_new_tokens=2)
        assert panel.wait(60)
    finally:
        slow.remove()
    assert panel.status == "done", panel.status
    assert panel.history[-1]["values"] == {"alpha": 2.0, "beta": 0.0}
    steered = S.generate(gpt2, PROMPT, (vec, 2.0), max_new_tokens=20)[0]
    assert panel.history[-1]["steered"] == steered


def test_metric_readout_beside_the_texts(gpt2):
    """The readout is the metric on the next-token logits after the prompt, baseline and steered."""
    word = " cat"
    panel, vec, _ = panel_for(gpt2, metric=word)
    assert panel.metric_name == "P(' cat')"
    assert panel.wait(60)
    (cat,) = gpt2.tokenizer(word, add_special_tokens=False)["input_ids"]
    base = gpt2.logits(PROMPT)[0, -1].softmax(-1)[cat]
    assert panel.metric_values["baseline"] == pytest.approx(float(base), rel=1e-4)
    assert panel.metric_values["steered"] == panel.metric_values["baseline"]  # sliders at 0
    panel.values = {"alpha": 4.0}
    assert panel.wait(60)
    steered = S.logits(gpt2, PROMPT, vec * 4.0)[0, -1].softmax(-1)[cat]
    assert panel.metric_values["steered"] == pytest.approx(float(steered), rel=1e-4)
    assert panel.history[-1]["metric"] == panel.metric_values
    # a metric from ilab.metrics, a function of logits, and KL from the baseline
    diff, _, _ = panel_for(gpt2, metric=ilab.metrics.logit_diff(" cat", " dog"), autorun=False)
    assert diff.metric_name == "logit ' cat' − ' dog'"
    own, _, _ = panel_for(gpt2, metric=lambda logits: logits.max(-1).values, metric_name="top logit")
    assert own.wait(60) and own.metric_name == "top logit"
    assert own.metric_values["baseline"] == pytest.approx(float(gpt2.logits(PROMPT)[0, -1].max()), rel=1e-5)
    kl, _, _ = panel_for(gpt2, metric=ilab.metrics.kl_to_clean())
    assert kl.wait(60) and kl.metric_values == {"baseline": 0.0, "steered": 0.0}
    kl.values = {"alpha": 4.0}
    assert kl.wait(60) and kl.metric_values["steered"] > 0
    with pytest.raises(ValueError, match="one token"):
        panel_for(gpt2, metric=" not one token at all", autorun=False)


def test_a_failed_generation_shows_in_the_panel_and_run_recovers(gpt2, capfd):
    """The error is the panel's: nothing printed into whichever cell runs, and Run works again."""
    panel, vec, _ = panel_for(gpt2)
    assert panel.wait(60)

    def boom(*_):
        raise RuntimeError("a broken hook")

    bad = gpt2.module.transformer.h[0].register_forward_hook(boom)
    try:
        panel.values = {"alpha": 2.0}
        assert panel.wait(60)
    finally:
        bad.remove()
    assert panel.status == "error: RuntimeError: a broken hook (Run tries again)"
    assert isinstance(panel.last_error, RuntimeError)
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "broken hook" not in out + err
    n = len(panel.history)
    panel._on_message(panel, {"type": "run"}, [])  # the Run button, nothing else changed
    assert panel.wait(60)
    assert panel.status == "done" and panel.last_error is None and len(panel.history) == n + 1
    assert panel.history[-1]["steered"] == S.generate(gpt2, PROMPT, vec * 2.0, max_new_tokens=6)[0]
