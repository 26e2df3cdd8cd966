"""The ICL-transition notebook's network and claims (nbs/papers/icl_transition.ipynb): the network answers only
with labels and takes named sites; the claims hold for the shipped runs and fail for untrained networks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import interplab as ilab

icl = ilab.train.icl
PAPERS = Path(__file__).resolve().parents[2] / "nbs" / "papers"
#: The notebook's task and training settings (a resume with others is refused).
TASK = dict(pool=2048, n_novel=64, n_labels=32, n_pairs=8, burst=4, p_bursty=0.9, n_train=8192, n_eval=512)
DIVERSITIES = (16, 64, 256, 1024)
TRAIN = dict(steps=3000, lr=3e-3, batch_size=128, eval_every=250, checkpoint_every=500, progress=False)
SMALL = dict(pool=64, n_novel=8, n_labels=8, n_pairs=8, burst=4, n_train=32, n_eval=8)


def untrained(task: ilab.train.Task) -> icl.ICLNet:
    torch.manual_seed(0)
    return icl.ICLNet(task)


def test_icl_net_answers_with_labels_and_its_query_ablation_zeroes_the_head_at_the_last_position():
    task = ilab.train.bursty_icl(16, **SMALL)
    net = icl.ICLNet(task, dim=15).eval()
    ids_NL = task.inputs_NL[:4]
    logits_NLV = net(ids_NL)
    assert logits_NLV.shape == (4, 17, 72)
    assert (logits_NLV[..., :64] == icl.ITEM_LOGIT).all() and (logits_NLV[..., 64:] != icl.ITEM_LOGIT).all()

    model = ilab.load_model(net, sites=icl.SITES, tokenizer=task.vocab)
    assert (model.n_layers, model.n_heads) == (2, 1)
    edited = model.logits(task.texts(torch.arange(4)), edit=icl.query_head_ablation(model, 1, 0))[:, -1]

    def zero_last(module: torch.nn.Module, args: tuple) -> tuple:
        z_NLD = args[0].clone()
        z_NLD[:, -1] = 0
        return (z_NLD,)

    handle = net.blocks[1].attn.out.register_forward_pre_hook(zero_last)
    with torch.no_grad():
        expected = net(ids_NL)[:, -1]
    handle.remove()
    torch.testing.assert_close(edited.float(), expected)
    assert not torch.allclose(expected, logits_NLV[:, -1].detach())


def test_transition_claim_needs_icl_high_only_at_high_diversity_and_iwl_only_at_low():
    assert icl.transition({16: 0.04, 1024: 0.96}, {16: 1.0, 1024: 0.05}, n_labels=32)["holds"]
    both = icl.transition({16: 0.9, 1024: 0.96}, {16: 1.0, 1024: 0.05}, n_labels=32)
    assert not both["holds"] and not both["no in-context learning at low diversity"]
    assert not icl.transition({16: 0.5, 1024: 0.5}, {16: 0.5, 1024: 0.5}, n_labels=32)["holds"]
    with pytest.raises(ValueError, match=r"same diversities \(at least 2\), got \[16\] and \[16, 64\]"):
        icl.transition({16: 0.5}, {16: 0.5, 64: 0.5}, n_labels=32)


def test_ablation_claim_needs_the_induction_head_alone_to_remove_icl():
    assert icl.ablation(0.96, 0.05, 0.95, iwl=1.0, iwl_ablated=0.99, n_labels=32)["holds"]
    assert not icl.ablation(0.96, 0.05, 0.05, iwl=1.0, iwl_ablated=0.99, n_labels=32)["holds"]  # control too
    assert not icl.ablation(0.96, 0.05, 0.95, iwl=1.0, iwl_ablated=0.1, n_labels=32)["holds"]  # IWL lost too
    assert not icl.ablation(0.96, 0.7, 0.95, iwl=1.0, iwl_ablated=0.99, n_labels=32)["holds"]  # ICL kept


def accuracies(nets: dict[int, torch.nn.Module]) -> tuple[dict[int, float], dict[int, float], dict[int, object]]:
    """ICL and IWL accuracy of each diversity's network, on the held-out rows of each probe, and its sited model."""
    icl_acc, iwl_acc, models = {}, {}, {}
    for k, net in nets.items():
        task = ilab.train.bursty_icl(k, probe="icl", **TASK)
        models[k] = ilab.load_model(net, sites=icl.SITES, tokenizer=task.vocab)
        icl_acc[k] = ilab.train.measures.accuracy(models[k], task)
        iwl_acc[k] = ilab.train.measures.accuracy(models[k], ilab.train.bursty_icl(k, probe="iwl", **TASK))
    return icl_acc, iwl_acc, models


def ablation_claim(models: dict[int, object]) -> dict:
    """The notebook's ablation claim with layer 1's head as the induction head and layer 0's as the control."""
    high, low = max(models), min(models)
    task, iwl_low = ilab.train.bursty_icl(high, **TASK), ilab.train.bursty_icl(low, probe="iwl", **TASK)
    acc = ilab.train.measures.accuracy
    return icl.ablation(
        acc(models[high], task),
        acc(models[high], task, edit=icl.query_head_ablation(models[high], 1, 0)),
        acc(models[high], task, edit=icl.query_head_ablation(models[high], 0, 0)),
        acc(models[low], iwl_low),
        acc(models[low], iwl_low, edit=icl.query_head_ablation(models[low], 1, 0)),
        n_labels=TASK["n_labels"],
    )


def test_icl_transition_claims_hold_for_the_shipped_runs_and_fail_for_untrained_networks(tmp_path):
    runs = Path(shutil.copytree(PAPERS / "icl_transition_runs", tmp_path / "icl_transition_runs"))
    trained, control = {}, {}
    for k in DIVERSITIES:
        task = ilab.train.bursty_icl(k, probe="icl", **TASK)
        trained[k] = ilab.train.tiny(untrained(task), task, path=runs / f"diversity_{k}", **TRAIN).module
        control[k] = untrained(task).eval()
    icl_acc, iwl_acc, models = accuracies(trained)
    assert icl.transition(icl_acc, iwl_acc, TASK["n_labels"])["holds"]
    assert ablation_claim(models)["holds"]
    icl_acc, iwl_acc, models = accuracies(control)
    assert not icl.transition(icl_acc, iwl_acc, TASK["n_labels"])["holds"]
    assert not ablation_claim(models)["holds"]


def test_icl_net_refuses_another_task_and_heads_that_do_not_divide_its_width():
    with pytest.raises(ValueError, match=r"ICLNet reads a bursty_icl task .*got 'boolean:xor'"):
        icl.ICLNet(ilab.train.boolean("xor"))
    with pytest.raises(ValueError, match=r"n_heads=3 does not divide the width 32 \(dim 15 \+ 17 positions\)"):
        icl.ICLNet(ilab.train.bursty_icl(16, **SMALL), dim=15, n_heads=3)
