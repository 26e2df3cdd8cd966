"""What the paper notebooks measure on a model trained in the notebook, and the claims they assert.

:func:`accuracy` reads a sited model's answers to a task's rows (optionally under an ``edit``, such as
:func:`head_ablation`); :func:`search_by_depth` is the graph-search notebook's claim, a plain dict of its checks
with ``holds`` (so a test can show the claim fails when an untrained model of the same shape replaces the
trained one).

Example
-------
>>> model = ilab.load_model(net, sites=SITES, tokenizer=task.vocab)
>>> ilab.train.measures.accuracy(model, task)                     # held-out rows
>>> ilab.train.measures.accuracy(model, task, edit=ilab.train.measures.head_ablation(model, 1, 0))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..checks import check_int
from ..model.model import Edit, Model
from ..model.trace_ops import read_site, write_site
from .tasks import Task

#: The graph-search claim's least held-out task accuracy (chance is 0.5: half the rows are reachable).
SOLVED = 0.7


def accuracy(model: Model, task: Task, rows: torch.Tensor | None = None, edit: Edit | None = None,
             batch_size: int = 256) -> float:  # fmt: skip
    """Share of ``rows`` (a bool mask; default the held-out rows) whose top logit at the last position is the answer.

    >>> accuracy(model, ilab.train.dag_reachability(6, 7))   # held-out accuracy
    """
    if not isinstance(task, Task):
        raise TypeError(
            f"task must be a Task (ilab.train.bursty_icl, dag_reachability, ...), got {type(task).__name__}."
        )
    mask = ~task.train_N if rows is None else rows
    if not bool(mask.any()):
        raise ValueError(f"rows selects none of the {len(task.targets_N)} rows of {task.name}.")
    logits = model.logits(task.texts(mask), batch_size=batch_size, edit=edit)[:, -1]
    return float((logits.argmax(-1) == task.targets_N[mask]).float().mean())


def head_ablation(model: Model, layer: int, head: int, last_only: bool = False) -> Edit:
    """An ``edit`` for :meth:`Model.logits` that zeroes one head's ``attn.hook_z`` slice at every position (at the
    last position only with ``last_only``, where the answer is read).

    >>> accuracy(model, task, edit=head_ablation(model, 1, 0))
    """
    layer = check_int("layer", layer, 0, model.n_layers - 1)
    head = check_int("head", head, 0, model.n_heads - 1)
    envoy, io = model.envoy(f"blocks.{layer}.attn.hook_z")
    lo, hi = head * model.d_head, (head + 1) * model.d_head

    def edit(inputs: dict[str, torch.Tensor], step: int) -> None:
        z = read_site(envoy, io).clone()
        if last_only:
            z[:, -1, lo:hi] = 0
        else:
            z[..., lo:hi] = 0
        write_site(envoy, io, z)

    return edit


def search_by_depth(task_accuracy: float, probe: Sequence[float], shuffled: Sequence[float],
                    margin: float = 0.1) -> dict[str, Any]:  # fmt: skip
    """The graph-search claim from the task accuracy and the reachability probe's held-out accuracy at each depth
    (embedding first) beside the same probe on shuffled labels: the model learns the task (held-out accuracy at
    least :data:`SOLVED`), the probe at the last layer beats the first by ``margin`` and its shuffled control by
    ``margin``; ``holds`` is all of them.

    >>> search_by_depth(0.95, [0.6, 0.7, 0.8, 0.9], [0.5, 0.5, 0.5, 0.5])["holds"]
    True
    """
    if len(probe) != len(shuffled) or len(probe) < 2:
        raise ValueError(f"probe and shuffled give one accuracy per depth (at least 2), got {len(probe)} and "
                         f"{len(shuffled)}.")  # fmt: skip
    checks = {
        "learns the task": task_accuracy >= SOLVED,
        "improves with depth": probe[-1] >= probe[0] + margin,
        "beats shuffled labels": probe[-1] >= shuffled[-1] + margin,
    }
    return {**checks, "holds": all(checks.values())}
