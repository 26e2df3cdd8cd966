"""Two threads running one model take turns (``core/model/runlock.py``): every nnsight trace, generation
and torch-hook run of a model holds its lock, whoever writes the trace, and each thread gets what it
would have got alone."""

from __future__ import annotations

import threading

import nnsight
import numpy as np
import pytest
import torch

import interplab as ilab
from tests.patching.torch_reference import CLEAN, CORRUPT, metric
from tests.steering.common import vector
from tests.tiny import tiny_model

SITE = "blocks.1.hook_resid_post"
TEXT = "the cat sat on the mat"
ROUNDS = 12


def raw_trace(model):
    """A trace written straight on nnsight, as new code or a notebook would: no interplab in the way."""
    block = model.nn.transformer.h[0]
    with torch.no_grad(), model.nn.trace(TEXT) as tracer:
        hidden = nnsight.save(block.output[0] if isinstance(block.output, tuple) else block.output)
        tracer.stop()
    return hidden


def raw_generate(model):
    with torch.no_grad(), model.nn.generate(TEXT, max_new_tokens=3, do_sample=False) as tracer:
        ids = nnsight.save(tracer.result)
    return ids


CALLS = {
    "collect": lambda m: m.collect([TEXT], sites=[SITE])[SITE],
    "logits": lambda m: m.logits([TEXT]),
    "generate": lambda m: m.generate([TEXT], max_new_tokens=3),
    "steering.generate": lambda m: ilab.steering.generate(m, TEXT, vector(m, SITE) * 4.0, max_new_tokens=3),
    "logit_lens": lambda m: ilab.logit_lens(m, [TEXT]).tensor(),
    "patching.grid": lambda m: ilab.patching.grid(m, CLEAN, CORRUPT, metric(), site="resid_post").values,
    "pattern": lambda m: m.collect([TEXT], sites=["blocks.0.attn.hook_pattern"])["blocks.0.attn.hook_pattern"],
    "nnsight trace": raw_trace,
    "nnsight generate": raw_generate,
}


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def race(model, first: str, second: str) -> tuple[list[str], dict[str, list]]:
    """Run ``first`` and ``second`` ROUNDS times each from two threads at once; the errors and the results."""
    errors: list[str] = []
    results: dict[str, list] = {first: [], second: []}
    start = threading.Barrier(2)

    def loop(name: str) -> None:
        start.wait()
        for _ in range(ROUNDS):
            try:
                results[name].append(CALLS[name](model))
            except Exception as err:  # every failure is reported by the test
                errors.append(f"{name}: {type(err).__name__}: {err}")

    threads = [threading.Thread(target=loop, args=(name,)) for name in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors, results


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("collect", "logits"),
        ("generate", "collect"),
        ("steering.generate", "logits"),
        ("logit_lens", "generate"),
        ("patching.grid", "collect"),
        ("pattern", "steering.generate"),
        ("nnsight trace", "logits"),
        ("nnsight generate", "collect"),
    ],
)
def test_two_threads_tracing_one_model_take_turns(first, second):
    model = tiny_model("gpt2")
    alone = {name: CALLS[name](model) for name in (first, second)}
    errors, results = race(model, first, second)
    assert errors == []
    for name in (first, second):
        assert len(results[name]) == ROUNDS
        assert all(same(r, alone[name]) for r in results[name]), name


def test_every_run_of_the_model_holds_its_lock_whoever_writes_the_trace(gpt2):
    """A forward of the model, from interplab's calls or from a trace written on nnsight, runs with the
    model's lock held by the running thread."""
    held: list[bool] = []
    hook = gpt2.module.register_forward_hook(lambda *_: held.append(gpt2.lock._is_owned()))
    try:
        for name in ("collect", "logits", "generate", "nnsight trace", "nnsight generate", "steering.generate"):
            CALLS[name](gpt2)
    finally:
        hook.remove()
    assert held and all(held)


def test_another_threads_generate_waits_instead_of_running_inside_the_trace(gpt2):
    """While one thread's trace runs (its lock held), another thread's ``model.nn.generate`` opens a trace
    of its own and waits; it is never taken for a call inside the running trace."""
    out: list = []
    with gpt2.lock:
        worker = threading.Thread(target=lambda: out.append(raw_generate(gpt2)))
        worker.start()
        worker.join(timeout=1.0)
        assert worker.is_alive() and out == []  # still waiting for the lock, nothing run
    worker.join()
    assert len(out) == 1 and torch.equal(out[0], raw_generate(gpt2))
