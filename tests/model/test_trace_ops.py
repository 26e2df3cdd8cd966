"""Scoring next tokens inside a trace (core/model/trace_ops.py): the same values with and without gradients, and
without gradients a bounded number of [rows, vocab] tensors alive at once.

Each [rows, vocab] float tensor is 16 MB for 16 rows of the embedded model's 262,144-token vocabulary; eight alive
at once would stay as heap and lift nbs/02's kernel (``ilab.evaluate``) by about 0.37 GB, over the 1.4 GB goal.
"""

from __future__ import annotations

import sys

import pytest
import torch
from interplab.core.model.trace_ops import next_token_scores

VOCAB, D, ROWS = 1 << 20, 8, 16


def _case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    W = torch.randn(VOCAB, D, generator=g).to(torch.bfloat16)
    run = torch.randn(2, ROWS, D, generator=g).to(torch.bfloat16)
    clean = (run.float() + 0.3 * torch.randn(2, ROWS, D, generator=g)).to(torch.bfloat16)
    targets = torch.randint(0, VOCAB, (2, ROWS), generator=g)
    return W, run, clean, targets


def test_scores_without_gradients_equal_the_plain_computation():
    W, run, clean, targets = _case()
    readout = lambda h: h @ W.T  # noqa: E731
    with torch.no_grad():
        lean = next_token_scores(readout, run, targets, clean, step=4)
        (nll_only, none1, none2) = next_token_scores(readout, run, targets, None, step=4)
    plain = next_token_scores(readout, run, targets, clean, step=4)  # grad mode: the out-of-place path
    logp = torch.log_softmax((run @ W.T).float(), -1)
    logc = torch.log_softmax((clean @ W.T).float(), -1)
    want = (-logp.gather(-1, targets[..., None])[..., 0], -logc.gather(-1, targets[..., None])[..., 0],
            (logc.exp() * (logc - logp)).sum(-1))  # fmt: skip
    for got in (lean, plain):
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(nll_only, want[0], rtol=1e-5, atol=1e-4)
    assert none1 is None and none2 is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM from /proc")
def test_scores_without_gradients_hold_few_vocabulary_tensors():
    W, run, clean, targets = _case()
    readout = lambda h: h @ W.T  # noqa: E731
    one = 2 * 4 * VOCAB * 4  # a [2, 4, vocab] float tensor: 32 MB (above glibc's mmap threshold: freed at once)

    def peak_over_rss(grad: bool) -> float:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := VmRSS
        with torch.set_grad_enabled(grad):
            next_token_scores(readout, run, targets, clean, step=4)
        with open("/proc/self/status") as f:
            status = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.startswith("Vm")}
        return (status["VmHWM"] - status["VmRSS"]) / one

    peak_over_rss(False)  # warm-up
    lean, plain = peak_over_rss(False), peak_over_rss(True)
    # measured: 3 (logp, logc, their difference), 5 with gradients, and 5 without them before the fix
    assert lean < 4.0, lean
    assert plain > lean + 1.5, (plain, lean)  # the out-of-place path: log_softmax copies, exp, product


def test_an_output_the_block_edits_in_place_is_read_as_the_module_returned_it():
    """Falcon's block adds attention into its MLP's output in place (``mlp_output += attention_output``): the
    check at load records it, so hook_mlp_out is what the MLP returned (the control: a forward hook on ``mlp``
    copying its output), and a tensor written there is not edited by the block."""
    import interplab as ilab
    from tests.model.test_coverage import tiny_hf
    from tests.tiny import TEXTS, tiny_tokenizer

    hf = tiny_hf("falcon")
    model = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    seen: list[torch.Tensor] = []
    hook = hf.transformer.h[0].mlp.register_forward_hook(lambda _m, _i, out: seen.append(out.clone()))
    try:
        acts = model.collect(TEXTS[:1], ["blocks.0.hook_mlp_out", "blocks.1.hook_resid_pre"])  # the trace runs on
    finally:
        hook.remove()
    assert model.envoy("blocks.0.hook_mlp_out")[1] == "edited"
    torch.testing.assert_close(acts["blocks.0.hook_mlp_out"][0], seen[0][0], rtol=0, atol=0)

    from interplab.core.model.trace_ops import write_site

    written = acts["blocks.0.hook_mlp_out"].clone()
    envoy, io = model.envoy("blocks.0.hook_mlp_out")
    with torch.no_grad(), model.nn.trace(model.to_tokens(TEXTS[:1])):
        write_site(envoy, io, written)
    torch.testing.assert_close(written, acts["blocks.0.hook_mlp_out"], rtol=0, atol=0)
