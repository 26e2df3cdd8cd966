"""SteeringPanel in a real JupyterLab: slider by mouse and keyboard, streamed text, Python sync, burst of moves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Page, expect

from .conftest import REPO_ROOT, cell_output_locator
from .test_heatmap import kernel_eval, wait_for_python
from .test_tour import _notebook

if TYPE_CHECKING:
    from .conftest import LabServer, RunNotebook

pytestmark = pytest.mark.browser

SETUP = f"""
import sys, time
sys.path.insert(0, {str(REPO_ROOT)!r})
import torch
import interplab as ilab
from tests.tiny import tiny_model
torch.set_num_threads(1)
model = tiny_model("gpt2")
words = model.module.transformer.wte.weight.detach()  # tied unembedding: this direction favours cat over dog
ids = model.tokenizer.convert_tokens_to_ids
direction = (words[ids("cat")] - words[ids("dog")]) * 0.3
vec = ilab.steering.SteeringVector("blocks.1.hook_resid_post", direction)
panel = ilab.widgets.SteeringPanel(model, {{"alpha": vec}}, prompt="the cat sat on the mat", max_new_tokens=12,
                                   metric=" cat", default_range=(-8, 8, 0.5))
panel
"""


def steered_tokens(out) -> list[str]:
    return out.locator(".ilab-steer-steered .ilab-steer-tok").all_text_contents()


def steered_text(out) -> str:
    return out.locator(".ilab-steer-steered .ilab-steer-text").text_content() or ""


def expected_tokens(page: Page, value: float) -> str:
    """The panel's steered tokens for this value, computed independently in the kernel."""
    code = (
        f"ids = ilab.steering.stream(model, panel.prompt, vec * {value}, max_new_tokens=12)\n"
        "print(''.join(model.tokenizer.decode([t]) for t in ids))"
    )
    return kernel_eval(page, code)


def wait_done(page: Page) -> None:
    wait_for_python(page, "panel.wait(60) and panel.status", "done")


def test_steering_panel_in_jupyterlab(page: Page, run_notebook: RunNotebook, lab_server: LabServer, scratch_dir: Path):
    nb = scratch_dir / "steering.ipynb"
    nb.write_text(json.dumps(_notebook(SETUP)))
    cells = run_notebook(page, nb.relative_to(lab_server.root).as_posix(), timeout_s=240)
    assert not any(c["has_error"] for c in cells), json.dumps(cells, indent=1)
    out = cell_output_locator(page, cells[0]["index"], cells[0]["panel_id"])
    slider = out.locator("input.ilab-steer-range")
    expect(slider).to_have_count(1, timeout=30_000)
    # the slider's ends are written beside it
    expect(out.locator(".ilab-steer-min")).to_have_text("-8")
    expect(out.locator(".ilab-steer-max")).to_have_text("8")
    expect(out.locator(".ilab-steer-max")).to_be_visible()
    wait_done(page)
    base_tokens = out.locator(".ilab-steer-baseline .ilab-steer-tok")
    expect(base_tokens).to_have_count(12, timeout=30_000)
    baseline = out.locator(".ilab-steer-baseline .ilab-steer-text").text_content()
    expect(out.locator(".ilab-steer-steered .ilab-steer-text")).to_have_text(baseline or "")  # sliders at 0

    # Mouse: click three quarters along the slider; Python sees the value the slider shows.
    box = slider.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + box["width"] * 0.75, box["y"] + box["height"] / 2)
    shown = float(slider.input_value())
    assert 2.0 <= shown <= 6.0, shown
    wait_for_python(page, "panel.values['alpha']", str(shown))
    wait_done(page)
    want = expected_tokens(page, shown)
    expect(out.locator(".ilab-steer-steered .ilab-steer-text")).to_have_text(want, timeout=30_000)
    assert want != baseline  # the steered text changed
    # only the first token where the texts part ways is marked (not every token after it)
    first = next(i for i, (x, y) in enumerate(zip(base_tokens.all_text_contents(), steered_tokens(out))) if x != y)
    expect(out.locator(".ilab-steer-steered .ilab-steer-diff")).to_have_count(1)
    assert out.locator(".ilab-steer-steered .ilab-steer-diff").get_attribute("data-i") == str(first)
    # the readout beside each text: P(' cat') next, as Python computed it
    readout = json.loads(kernel_eval(page, "import json; print(json.dumps(panel.metric_values))"))
    for side in ("baseline", "steered"):
        text = out.locator(f".ilab-steer-{side} .ilab-steer-metric").text_content() or ""
        assert text.startswith("P(' cat') = ")
        assert float(text.split("= ")[1]) == pytest.approx(readout[side], rel=5e-3)

    # Keyboard: arrow keys move the slider by one step (JupyterLab must not swallow them).
    slider.focus()
    page.keyboard.press("ArrowRight")
    assert float(slider.input_value()) == shown + 0.5
    wait_for_python(page, "panel.values['alpha']", str(shown + 0.5))

    # Python sets the value: the slider follows.
    kernel_eval(page, "panel.values = {'alpha': -3.0}")
    expect(slider).to_have_value("-3", timeout=30_000)
    wait_done(page)

    # A burst of moves while generations are slow: only the last generation ends on screen.
    kernel_eval(page, "slow = model.module.register_forward_hook(lambda *_: time.sleep(0.04))")
    slider.focus()
    for _ in range(6):
        page.keyboard.press("ArrowLeft")
        page.wait_for_timeout(220)  # longer than the debounce: each move starts a run that the next supersedes
    final = float(slider.input_value())
    assert final == -6.0
    wait_for_python(page, "panel.values['alpha']", "-6.0")
    wait_done(page)
    kernel_eval(page, "slow.remove()")
    want = expected_tokens(page, final)
    expect(out.locator(".ilab-steer-steered .ilab-steer-text")).to_have_text(want, timeout=30_000)
    history = "import json; print(json.dumps([h['values']['alpha'] for h in panel.history]))"
    runs = json.loads(kernel_eval(page, history))
    assert runs[-1] == -6.0
    assert len([v for v in runs if v < -3.0]) < 6  # superseded runs were cancelled, not finished
    last_run = kernel_eval(page, "print(panel.history[-1]['run'])")
    assert out.locator(".ilab-steer-steered .ilab-steer-text").get_attribute("data-run") == last_run
    page.wait_for_timeout(500)  # nothing stale arrives afterwards
    assert steered_text(out) == want

    # Reset puts every slider back to 0: the steered text is the baseline again.
    out.locator("button.ilab-steer-reset").click()
    wait_for_python(page, "panel.values['alpha']", "0.0")
    wait_done(page)
    expect(out.locator(".ilab-steer-steered .ilab-steer-text")).to_have_text(baseline or "", timeout=30_000)

    # A trace in another cell while the panel generates: they take turns (no "parent cannot be on a different
    # thread" in that cell, no error in the panel).
    kernel_eval(page, "panel.values = {'alpha': 3.0}")
    wait_done(page)
    kernel_eval(page, "slow = model.module.register_forward_hook(lambda *_: time.sleep(0.08))")
    out.locator("button.ilab-steer-run").click()  # the same prompt: Run starts a generation anyway
    wait_for_python(page, "panel.status", "running")
    code = "for _ in range(10): logits = model.logits('the dog')\nprint(panel.status, logits.shape)"
    traced = kernel_eval(page, code)
    assert traced.startswith("running") or traced.startswith("done"), traced  # no error in this cell
    wait_done(page)
    kernel_eval(page, "slow.remove()")
    expect(out.locator(".ilab-steer-status")).to_contain_text("done")

    # A failed generation shows in the panel; Run then starts again, without a slider being moved first.
    kernel_eval(page, "bad = model.module.transformer.h[0].register_forward_hook(lambda *_: 1 / 0)")
    kernel_eval(page, "panel.values = {'alpha': 2.0}")  # a steered run (a baseline is cached: no forward)
    expect(out.locator(".ilab-steer-status")).to_contain_text("error: ZeroDivisionError", timeout=30_000)
    kernel_eval(page, "bad.remove()")
    runs = int(kernel_eval(page, "print(len(panel.history))"))
    out.locator("button.ilab-steer-run").click()
    wait_for_python(page, "panel.wait(60) and (panel.status, len(panel.history))", f"('done', {runs + 1})")
    expect(out.locator(".ilab-steer-status")).to_contain_text("done")


SCALED = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT)!r})
import torch
import interplab as ilab
from interplab.core.steering.ranges import typical_norm
from tests.tiny import tiny_model
torch.set_num_threads(1)
model = tiny_model("gpt2")
big = torch.ones(model.d_model) * 20.0          # a vector far longer than the stream it steers
site = "blocks.1.hook_resid_post"
panel = ilab.widgets.SteeringPanel(model, {{"big": big}}, site=site, prompt="the cat sat", max_new_tokens=4)
norm = typical_norm(model, site)
panel
"""


def test_default_range_is_scaled_to_the_site_and_said(
    page: Page, run_notebook: RunNotebook, lab_server: LabServer, scratch_dir: Path
):
    nb = scratch_dir / "scaled.ipynb"
    nb.write_text(json.dumps(_notebook(SCALED)))
    cells = run_notebook(page, nb.relative_to(lab_server.root).as_posix(), timeout_s=240)
    assert not any(c["has_error"] for c in cells), json.dumps(cells, indent=1)
    out = cell_output_locator(page, cells[0]["index"], cells[0]["panel_id"])
    slider = out.locator("input.ilab-steer-range")
    expect(slider).to_have_count(1, timeout=30_000)
    # the slider's end adds about twice the site's typical norm (rounded up to a round number), not ±8
    end = float(kernel_eval(page, "print(panel.ranges['big'][1])"))
    reach = float(kernel_eval(page, "print(panel.ranges['big'][1] * float(big.norm()) / norm)"))
    assert 1.998 <= reach <= 2.0 * 1.5 and end != 8.0
    assert float(slider.get_attribute("max") or "nan") == end
    note = out.locator(".ilab-steer-rangenote")
    expect(note).to_be_visible()
    expect(note).to_contain_text(f"typical norm of {'blocks.1.hook_resid_post'}")
    expect(note).to_contain_text("|big| = ")
    # the range's end labels sit beside the slider, not over it
    s, lo, hi = (
        slider.bounding_box(),
        out.locator(".ilab-steer-min").bounding_box(),
        out.locator(".ilab-steer-max").bounding_box(),
    )
    assert s and lo and hi
    assert lo["x"] + lo["width"] <= s["x"] + 0.5 and s["x"] + s["width"] <= hi["x"] + 0.5, (lo, s, hi)
    # another site: the range follows that site's norm
    kernel_eval(page, "panel.site = 'blocks.0.hook_resid_pre'")
    expect(note).to_contain_text("typical norm of blocks.0.hook_resid_pre")
    want = kernel_eval(page, "print(panel.ranges['big'][1])")
    assert float(slider.get_attribute("max") or "nan") == float(want)
