"""Models trained in the notebook: task generators and a small resumable trainer.

The public namespace ``ilab.train``. ``tasks.py`` enumerates small tasks (a finite group's table, Boolean
functions, bursty few-shot classification, reachability in small DAGs); ``measures.py`` has what the paper
notebooks measure and assert; ``identifiability.py`` enumerates a tiny Boolean MLP's circuits and aligned
algorithms; ``trainer.py`` has :func:`tiny` (AdamW on a task, resumable from a folder) and :class:`TrainResult`
(the history as plain data with ``.chart()``). Give the trained module named sites with
``ilab.load_model(module, sites=...)``.

Example
-------
>>> import interplab as ilab
>>> task = ilab.train.group_table("S4", train_frac=0.5)
>>> res = ilab.train.tiny(net, task, steps=2000, lr=3e-3, weight_decay=1.0)
>>> res.chart()
"""

from __future__ import annotations

from . import identifiability, measures
from .tasks import Task, boolean, bursty_icl, dag_hops, dag_reachability, group_elements, group_table
from .trainer import TrainResult, answer_logits, tiny

__all__ = ["Task", "TrainResult", "answer_logits", "boolean", "bursty_icl", "dag_hops", "dag_reachability",
           "group_elements", "group_table", "identifiability", "measures", "tiny"]  # fmt: skip
