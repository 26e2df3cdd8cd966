"""Steered runs in nnsight traces (core/steering/traces.py): generation with an empty steering list."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
