"""The paper notebooks' claims hold for the models their shipped jobs trained, and fail when an untrained model
of the same shape (the control) replaces them. The run resumes from a copy of the shipped job folder (finished:
nothing trains) and is measured on fewer rows than the notebook (nbs/papers/graph_search.ipynb)."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

import interplab as ilab
from tests.train.nets import GRAPH_SITES, GraphNet

PAPERS = Path(__file__).resolve().parents[2] / "nbs" / "papers"
measures = ilab.train.measures
#: The steps of the shipped runs (the notebooks' settings: a resume with others is refused).
GRAPH_STEPS = 6000


def shipped(name: str, tmp_path: Path) -> Path:
    """A copy of a notebook's shipped job folder (the test writes nothing into the repository)."""
    return Path(shutil.copytree(PAPERS / name, tmp_path / name))


def graph_claim(net: torch.nn.Module, task: ilab.train.Task) -> dict:
    """The graph-search notebook's claim on ``net``, on 600 rows (probes) and the held-out rows (accuracy)."""
    model = ilab.load_model(net, sites=GRAPH_SITES, tokenizer=task.vocab)
    hops = ilab.train.dag_hops(task)[:600]
    texts = task.texts()[:600]
    reachable = (hops < 6).tolist()
    shuffled = [reachable[i] for i in torch.randperm(600, generator=torch.Generator().manual_seed(0)).tolist()]
    depths = ["blocks.0.hook_resid_pre"] + [f"blocks.{layer}.hook_resid_post" for layer in range(model.n_layers)]
    probe = ilab.probes.train(model, texts, reachable, sites=depths, cv=0, batch_size=256, progress=False).accuracy
    control = ilab.probes.train(model, texts, shuffled, sites=depths, cv=0, batch_size=256, progress=False).accuracy
    accuracy = measures.accuracy(model, task)
    return measures.search_by_depth(accuracy, [probe[s] for s in depths], [control[s] for s in depths])


def test_graph_search_claim_holds_for_the_trained_model_and_fails_for_an_untrained_one(tmp_path):
    task = ilab.train.dag_reachability(6, 7, n_rows=4096)

    def untrained() -> GraphNet:
        torch.manual_seed(0)
        return GraphNet(len(task.vocab))

    run = ilab.train.tiny(untrained(), task, steps=GRAPH_STEPS, lr=2e-3, batch_size=64, eval_every=500,
                          checkpoint_every=500, path=shipped("graph_search_runs", tmp_path) / "reachability",
                          progress=False)  # fmt: skip
    assert graph_claim(run.module, task)["holds"]
    assert not graph_claim(untrained().eval(), task)["holds"]
