"""Models trained in the notebook: task generators and a small resumable trainer.

The public namespace ``ilab.train``. ``tasks.py`` enumerates small tasks (a finite group's table, Boolean
functions, byte-level text of named domains, repeated random tokens, bursty few-shot classification,
reachability in small DAGs); ``bandit.py`` plays two-armed bandits with a Q-learning agent (transcripts for a
tiny transformer to imitate); ``experts.py`` measures which experts of a MoE model serve which domain and what
removing them costs; ``measures.py`` has what the graph-search notebook measures and asserts; ``icl.py`` has
the ICL-transition notebook's network and claims;
``identifiability.py`` enumerates a tiny Boolean MLP's circuits and aligned algorithms; ``trainer.py`` has
:func:`tiny` (AdamW on a task, resumable from a folder) and :class:`TrainResult` (the history as plain data
with ``.chart()``). Give the trained module named sites with
``ilab.load_model(module, sites=...)``.

Example
-------
>>> import interplab as ilab
>>> task = ilab.train.group_table("S4", train_frac=0.5)
>>> res = ilab.train.tiny(net, task, steps=2000, lr=3e-3, weight_decay=1.0)
>>> res.chart()
"""

from __future__ import annotations

from . import experts, group_proofs, icl, identifiability, mamba, measures
from .bandit import BanditTask, q_agent_bandit
from .tasks import (
    Task,
    TextTask,
    boolean,
    bursty_icl,
    byte_text,
    dag_hops,
    dag_reachability,
    group_elements,
    group_table,
    repeated_tokens,
)  # fmt: skip
from .trainer import TrainResult, answer_logits, tiny

__all__ = ["BanditTask", "Task", "TextTask", "TrainResult", "answer_logits", "boolean", "bursty_icl", "byte_text",
           "dag_hops", "dag_reachability", "experts", "group_elements", "group_proofs", "group_table", "icl",
           "identifiability", "mamba", "measures", "q_agent_bandit", "repeated_tokens", "tiny"]  # fmt: skip
