"""Steering with torch hooks (``core/steering/hooks.py``): the same numbers and tokens as the nnsight path,
only in the thread that applied them, at every generated token."""

from __future__ import annotations

import pytest
import torch

from tests.steering.common import SITES, S, vector
from tests.tiny import TEXTS, tiny_model


@pytest.mark.parametrize("site", SITES)
def test_hook_path_matches_nnsight_path(model, site):
    vec = vector(model, site, scale=3.0)
    steered = S.logits(model, TEXTS, vec, positions=None)
    enc = model.to_tokens(TEXTS)
    with torch.no_grad(), S.apply(model, vec):
        hooked = model.softcap(model.module(**enc).logits)
    mask = enc["attention_mask"].bool()
    torch.testing.assert_close(hooked[mask], steered[mask], rtol=0, atol=1e-6)
    # the hooks are gone afterwards
    with torch.no_grad():
        after = model.softcap(model.module(**enc).logits)
    torch.testing.assert_close(after[mask], model.logits(TEXTS, positions=None)[mask], rtol=0, atol=1e-6)


def test_hooks_steer_only_the_thread_that_applied_them(model):
    import threading

    vec = vector(model, "blocks.1.hook_resid_post", scale=3.0)
    enc = model.to_tokens(TEXTS)
    got = {}

    def other_thread():
        with torch.no_grad():
            got["other"] = model.module(**enc).logits

    with torch.no_grad(), S.apply(model, vec):
        mine = model.module(**enc).logits
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
    mask = enc["attention_mask"].bool()
    clean = model.logits(TEXTS, positions=None)
    torch.testing.assert_close(model.softcap(got["other"])[mask], clean[mask], rtol=0, atol=1e-6)
    assert (model.softcap(mine)[mask] - clean[mask]).abs().max() > 1e-3


def test_generation_paths_give_the_same_tokens(model):
    vec = vector(model, "blocks.1.hook_resid_pre", scale=4.0)
    nnsight_text = S.generate(model, TEXTS, vec, max_new_tokens=6)
    hook_text = S.generate_local(model, TEXTS, vec, max_new_tokens=6)
    assert nnsight_text == hook_text
    assert nnsight_text != model.generate(TEXTS, max_new_tokens=6)  # it does steer
    assert S.generate(model, TEXTS, (vec, 0.0), max_new_tokens=6) == model.generate(TEXTS, max_new_tokens=6)
    expected = S.logits(model, TEXTS, vec)
    with S.apply(model, vec):  # Model's own nnsight calls inside apply() are steered too
        assert model.generate(TEXTS, max_new_tokens=6) == nnsight_text
        torch.testing.assert_close(model.logits(TEXTS), expected, rtol=0, atol=1e-5)
    streamed = []
    ids = S.stream(model, TEXTS[0], vec, max_new_tokens=6, on_token=streamed.append)
    assert streamed == ids
    assert model.tokenizer.decode(ids, skip_special_tokens=True) == nnsight_text[0]


def _record_steps(model, run):
    """Block 0's output (before any steering hook) and block 1's input at every forward of ``run()``."""
    block0, block1 = model.module.transformer.h[0], model.module.transformer.h[1]
    outs, ins = [], []
    h0 = block0.register_forward_hook(lambda _m, _i, out: outs.append(out[0].detach().clone()))
    h1 = block1.register_forward_pre_hook(lambda _m, args: ins.append(args[0].detach().clone()))
    try:
        run()
    finally:
        h0.remove()
        h1.remove()
    return outs, ins


def test_steering_reaches_every_generated_token():
    model = tiny_model("gpt2")
    vec = vector(model, "blocks.0.hook_resid_post", scale=5.0)
    # hook path: the recorder on block 0 runs before the steering hook, so block 1 sees exactly +5 * direction
    outs, ins = _record_steps(model, lambda: S.stream(model, TEXTS[0], vec, max_new_tokens=4))
    assert len(outs) == len(ins) == 4  # the prompt, then one forward per further token
    assert ins[0].shape[1] > 1 and all(x.shape[1] == 1 for x in ins[1:])
    for before, after in zip(outs, ins, strict=True):
        torch.testing.assert_close(after - before, (5.0 * vec.direction).expand_as(after), rtol=0, atol=1e-5)
    # nnsight path: block 1 receives the same steered values at every step
    _, ins_nn = _record_steps(model, lambda: S.generate(model, TEXTS[0], vec, max_new_tokens=4))
    assert len(ins_nn) == 4
    for a, b in zip(ins, ins_nn, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
