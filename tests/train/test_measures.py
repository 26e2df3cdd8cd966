"""What the paper notebooks measure: accuracy through a sited model, and a head's ablation as a model.logits edit
giving what zeroing the head by a plain forward hook gives."""

from __future__ import annotations

import pytest
import torch

import interplab as ilab
from tests.train.nets import ICL_SITES, ICLNet

SMALL = dict(pool=64, n_novel=8, n_labels=8, n_train=64, n_eval=32)


def sited() -> tuple[ICLNet, ilab.Model, ilab.train.Task]:
    task = ilab.train.bursty_icl(16, **SMALL)
    torch.manual_seed(0)
    net = ICLNet(len(task.vocab)).eval()
    return net, ilab.load_model(net, sites=ICL_SITES, tokenizer=task.vocab), task


def test_accuracy_reads_the_answers_of_the_held_out_rows():
    net, model, task = sited()
    with torch.no_grad():
        want = (net(task.inputs_NL[~task.train_N])[:, -1].argmax(-1) == task.targets_N[~task.train_N]).float().mean()
    assert ilab.train.measures.accuracy(model, task) == pytest.approx(float(want))
    with pytest.raises(ValueError, match=r"rows selects none of the 96 rows of bursty_icl"):
        ilab.train.measures.accuracy(model, task, rows=torch.zeros(96, dtype=torch.bool))


def test_a_head_ablation_zeroes_that_head_as_a_forward_hook_does():
    net, model, task = sited()
    texts = task.texts(~task.train_N)[:4]
    ablated = model.logits(texts, edit=ilab.train.measures.head_ablation(model, 1, 0))[:, -1]

    def zero_head(module, args):
        z = args[0].clone()
        z[..., : model.d_head] = 0
        return (z,)

    handle = net.blocks[1].attn.out.register_forward_pre_hook(zero_head)
    try:
        with torch.no_grad():
            want = net(task.inputs_NL[~task.train_N][:4])[:, -1]
    finally:
        handle.remove()
    torch.testing.assert_close(ablated, want, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(ablated, model.logits(texts)[:, -1])
    with pytest.raises(ValueError, match=r"head"):
        ilab.train.measures.head_ablation(model, 1, 2)
