"""Steering inside nnsight traces (``core/steering/traces.py``): scale 0 is exactly unsteered, ``start``,
several vectors, ``remote="local"``, a known vector on the embedded model, and generation with an empty steering list.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from interplab.core.saes import SAE

from tests.bars import RecordingBar
from tests.steering.common import SITES, S, vector
from tests.tiny import TEXTS, tiny_model


@pytest.mark.parametrize("site", SITES)
def test_scale_zero_is_exactly_unsteered(model, site):
    vec = vector(model, site)
    clean = model.logits(TEXTS, positions=None)
    assert torch.equal(S.logits(model, TEXTS, (vec, 0.0), positions=None), clean)
    steered = S.logits(model, TEXTS, (vec, 3.0), positions=None)
    assert (steered - clean).abs().max() > 1e-3


def test_start_limits_steering_to_later_positions(model):
    vec = vector(model, "blocks.0.hook_resid_post", scale=5.0)
    clean = model.logits(TEXTS, positions=[0, 1, -1])
    steered = S.logits(model, TEXTS, vec, positions=[0, 1, -1], start=-1)
    assert torch.equal(steered[:, :2], clean[:, :2])  # before the start: untouched (causal model)
    assert (steered[:, 2] - clean[:, 2]).abs().max() > 1e-3
    from_one = S.logits(model, TEXTS, vec, positions=[0, 1], start=1)
    assert torch.equal(from_one[:, 0], clean[:, 0]) and not torch.equal(from_one[:, 1], clean[:, 1])


def test_several_vectors_at_a_site_add_up(model):
    site = "blocks.1.hook_resid_pre"
    a, b = vector(model, site, 1), vector(model, site, 2)
    both = S.logits(model, TEXTS, [(a, 2.0), (b, -1.0)])
    summed = S.SteeringVector(site, 2.0 * a.direction - b.direction)
    torch.testing.assert_close(both, S.logits(model, TEXTS, summed), rtol=1e-5, atol=1e-5)
    other = vector(model, "blocks.0.hook_mlp_out", 3)  # and at two sites at once (any order given)
    two = S.logits(model, TEXTS, [a * 2.0, other * 1.5])
    assert torch.equal(two, S.logits(model, TEXTS, [other * 1.5, a * 2.0]))


@pytest.mark.parametrize("remote_family", ["gpt2", "gemma3"])
def test_remote_local_path(remote_family):
    local, remote = tiny_model(remote_family), tiny_model(remote_family, remote="local")
    vec = vector(local, "blocks.1.hook_resid_post", scale=3.0)
    sae = SAE.create("topk", d_in=32, d_sae=64, k=4, site="blocks.0.hook_resid_post")
    steer = [vec, S.clamp(sae, 5, 2.0)]
    assert torch.equal(S.logits(remote, TEXTS, steer), S.logits(local, TEXTS, steer))
    assert S.generate(remote, TEXTS, steer, max_new_tokens=4) == S.generate(local, TEXTS, steer, max_new_tokens=4)


@pytest.mark.embedded
def test_known_vector_moves_the_logit_difference(embedded):
    model = embedded
    prompt = "When Mary and John went to the store, John gave a drink to"
    metric = S.logit_diff(" Mary", " John").on(model).score
    clean = metric(model.logits(prompt)[:, -1])
    assert clean > 0  # the model already prefers Mary (about +5)
    # a diff-of-means vector from contexts ending in " Mary" vs " John", at a late layer
    site = "blocks.14.hook_resid_post"
    mary, john = ["I saw Mary", "This is Mary", "We met Mary"], ["I saw John", "This is John", "We met John"]
    vec = S.diff_of_means(model, site, mary, john)
    up = metric(S.logits(model, prompt, vec * 1.0)[:, -1])
    down = metric(S.logits(model, prompt, vec * -1.0)[:, -1])
    assert down < clean < up
    assert torch.equal(S.logits(model, prompt, vec * 0.0), model.logits(prompt))
    # greedy generation: the nnsight and hook paths agree on the real model
    a = S.generate(model, prompt, vec * -2.0, max_new_tokens=4)
    assert a == S.generate_local(model, prompt, vec * -2.0, max_new_tokens=4)


ROOT = Path(__file__).resolve().parents[2]


def test_generate_with_no_steering_ends_and_equals_plain_generation():
    code = (
        "from tests.tiny import tiny_model\nimport interplab as ilab\nm = tiny_model('gpt2')\n"
        "assert ilab.steering.generate(m, 'the cat', [], max_new_tokens=2) == m.generate('the cat', max_new_tokens=2)\n"
        "assert ilab.steering.logits(m, 'the cat', []).equal(m.logits('the cat'))\nprint('done')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    try:  # in a subprocess with a time limit: a generation that never ends fails the test, not the run
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=120)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("steering.generate(model, 'the cat', [], max_new_tokens=2) never returned")
    assert out.returncode == 0 and "done" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize("backend", ["nnsight", "hooks"])
def test_generate_reports_one_step_per_new_token(gpt2, backend):
    bar = RecordingBar()
    out = S.generate(gpt2, TEXTS[:2], [], max_new_tokens=5, backend=backend, progress=bar)
    assert (bar.total, bar.n) == (5, 5)
    assert out == S.generate(gpt2, TEXTS[:2], [], max_new_tokens=5, backend=backend, progress=False)  # the control
    with pytest.raises(TypeError, match=r"progress must be True, False or a progress bar"):
        S.generate(gpt2, TEXTS[0], [], max_new_tokens=2, progress=None)
