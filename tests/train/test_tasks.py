"""The task generators of the paper notebooks: bursty few-shot classification and reachability in small DAGs
give rows whose answers follow from their own tokens."""

from __future__ import annotations

import torch

import interplab as ilab

SMALL = dict(pool=64, n_novel=8, n_labels=8, n_train=256, n_eval=64)


def pairs_and_query(task: ilab.train.Task, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ids_NL = task.inputs_NL[rows]
    return ids_NL[:, :-1:2], ids_NL[:, 1:-1:2], ids_NL[:, -1]


def test_icl_rows_of_novel_classes_answer_from_the_context_only():
    task = ilab.train.bursty_icl(16, probe="icl", **SMALL)
    assert task.inputs_NL.shape == (256 + 64, 13) and task.n_train == 256
    items_NC, labels_NC, query_N = pairs_and_query(task, ~task.train_N)
    assert bool((items_NC >= 64 - 8).all() and (items_NC < 64).all())  # only novel items
    where_NC = items_NC == query_N[:, None]
    assert bool(where_NC.any(1).all())  # the query's class is in every context, with its label
    assert bool((labels_NC[where_NC.nonzero()[:, 0], where_NC.nonzero()[:, 1]]
                 == task.targets_N[~task.train_N][where_NC.nonzero()[:, 0]]).all())  # fmt: skip
    trained_items, *_ = pairs_and_query(task, task.train_N)
    assert bool((trained_items < 16).all())
    assert (torch.stack([(row[:, None] == row).sum(0) for row in trained_items]) == 2).all()  # bursts of 2


def test_iwl_rows_hide_the_query_and_share_the_training_rows():
    icl = ilab.train.bursty_icl(16, probe="icl", **SMALL)
    iwl = ilab.train.bursty_icl(16, probe="iwl", **SMALL)
    assert torch.equal(icl.inputs_NL[icl.train_N], iwl.inputs_NL[iwl.train_N])
    items_NC, _, query_N = pairs_and_query(iwl, ~iwl.train_N)
    assert not bool((items_NC == query_N[:, None]).any())
    trained_items, trained_labels, _ = pairs_and_query(iwl, iwl.train_N)
    label_of = dict(zip(trained_items.flatten().tolist(), trained_labels.flatten().tolist(), strict=True))
    assert all(label_of[int(q)] == int(a) for q, a in zip(query_N, iwl.targets_N[~iwl.train_N], strict=True)
               if int(q) in label_of)  # fmt: skip


def test_reachability_answers_follow_the_edges():
    task = ilab.train.dag_reachability(6, 7, n_rows=200, test_frac=0.25)
    hops_N = ilab.train.dag_hops(task)
    yes = torch.tensor([task.vocab[int(t)] == "yes" for t in task.targets_N])
    assert torch.equal(yes, hops_N < 6) and yes.float().mean() == 0.5
    assert set(hops_N[yes].tolist()) == {1, 2, 3, 4}  # every distance along the path, up to n_vertices - 2
    assert task.n_train == 150 and task.inputs_NL.shape == (200, 17)
    assert task.texts()[0].split()[-3] == "?"
