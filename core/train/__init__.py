"""Models trained in the notebook: task generators and a small resumable trainer.

The public namespace ``ilab.train``. ``tasks.py`` enumerates small tasks (a finite group's table, Boolean
functions, byte-level text of named domains, repeated random tokens); ``experts.py`` measures which experts of a
MoE model serve which domain and what removing them costs; ``identifiability.py`` enumerates a tiny Boolean
MLP's circuits and aligned algorithms; ``trainer.py`` has :func:`tiny` (AdamW on a task, resumable from a
folder) and :class:`TrainResult` (the history as plain data with ``.chart()``). Give the trained module named sites with
``ilab.load_model(module, sites=...)``.

Example
-------
>>> import interplab as ilab
>>> task = ilab.train.group_table("S4", train_frac=0.5)
>>> res = ilab.train.tiny(net, task, steps=2000, lr=3e-3, weight_decay=1.0)
>>> res.chart()
"""

from __future__ import annotations

from . import experts, identifiability
from .tasks import Task, TextTask, boolean, byte_text, group_elements, group_table, repeated_tokens
from .trainer import TrainResult, answer_logits, tiny

__all__ = ["Task", "TextTask", "TrainResult", "answer_logits", "boolean", "byte_text", "experts", "group_elements",
           "group_table", "identifiability", "repeated_tokens", "tiny"]  # fmt: skip
