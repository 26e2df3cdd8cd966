"""Train a small model on a :class:`~interplab.core.train.tasks.Task`, resumable, keeping its history.

:func:`tiny` trains any ``torch.nn.Module`` that maps token ids ``[batch, pos]`` to logits (``[batch, pos,
vocab]``, read at the last position, or ``[batch, vocab]``) with AdamW and cross-entropy on the task's answers
(at every position where the task has an answer per position: a language model's next token).
Batches are the whole training split, or rows drawn by ``(seed, step)``: the same from any step, so a run
killed at any point and resumed from its folder ends with the same weights and history (the job contract,
ARCHITECTURE.md "Crash safety"). The history (loss, train and held-out accuracy at steps) is plain data with
:meth:`TrainResult.chart`.

Example
-------
>>> task = ilab.train.group_table("S4", train_frac=0.5)
>>> res = ilab.train.tiny(net, task, steps=2000, lr=3e-3, weight_decay=1.0, path="s4-run/")
>>> res.final["test_acc"], res.chart()
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch

from ..checks import check_int
from ..model.limits import module_fingerprint
from ..storage.checkpoint import load_optimizer_state, optimizer_state
from ..storage.resumable import ResumableJob
from ..views.charts import offline
from .tasks import Task

JOB = "train.tiny"
_COLUMNS = ("step", "loss", "train_acc", "test_acc")


@dataclass
class TrainResult:
    """What :func:`tiny` gives: the trained ``module``, its ``task`` and ``history`` (lists per column).

    ``history["step"][i]`` is the step after which ``loss`` (the training loss of that step's batch),
    ``train_acc`` and ``test_acc`` (None without held-out rows) were measured.
    """

    module: torch.nn.Module
    task: Task
    history: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def final(self) -> dict[str, Any]:
        """The last row of the history."""
        return {k: v[-1] for k, v in self.history.items()}

    def frame(self) -> pd.DataFrame:
        """The history as a DataFrame, one row per evaluation."""
        return pd.DataFrame(self.history)

    def chart(self) -> Any:
        """Loss (log scale) and accuracies against the step, as an altair chart that renders offline."""
        import altair as alt

        long = self.frame().melt("step", var_name="measure", value_name="value").dropna()
        base = alt.Chart(long).mark_line().encode(x="step:Q", color="measure:N")
        loss = base.transform_filter(alt.datum.measure == "loss").encode(
            y=alt.Y("value:Q", scale=alt.Scale(type="log"), title="loss"))  # fmt: skip
        acc = base.transform_filter(alt.datum.measure != "loss").encode(
            y=alt.Y("value:Q", scale=alt.Scale(domain=[0, 1]), title="accuracy"))  # fmt: skip
        return offline(alt.hconcat(loss.properties(width=260, height=180), acc.properties(width=260, height=180)))


def answer_logits(module: torch.nn.Module, ids_NL: torch.Tensor) -> torch.Tensor:
    """The module's logits for the answer: the last position's of ``[N, L, V]``, or ``[N, V]`` as given."""
    out = module(ids_NL)
    out = getattr(out, "logits", out)
    return out[:, -1] if out.ndim == 3 else out


def task_logits(module: torch.nn.Module, task: Task, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits the task's answers are read from and those answers, for ``rows``: ``([N, V], [N])`` for one
    answer per row, ``([N, L, V], [N, L])`` for a task with an answer at every position (-100 where none)."""
    targets = task.targets_N[rows]
    if targets.ndim == 1:
        return answer_logits(module, task.inputs_NL[rows]), targets
    out = module(task.inputs_NL[rows])
    return getattr(out, "logits", out), targets


def _loss(module: torch.nn.Module, task: Task, rows: torch.Tensor) -> torch.Tensor:
    logits, targets = task_logits(module, task, rows)
    return torch.nn.functional.cross_entropy(logits.flatten(0, -2).float(), targets.flatten(), ignore_index=-100)


def _accuracy(module: torch.nn.Module, task: Task, rows_N: torch.Tensor) -> float | None:
    if not bool(rows_N.any()):
        return None
    with torch.no_grad():
        logits, targets = task_logits(module, task, rows_N)
    scored = targets != -100
    return float((logits.argmax(-1) == targets)[scored].float().mean())


def check_fit(module: torch.nn.Module, task: Task, batch_size: int | None) -> None:
    """Refuse, before any training, a batch larger than the training split and logits narrower than the answers."""
    if not isinstance(task, Task):
        raise TypeError(f"task must be a Task (ilab.train.group_table, boolean, ...), got {type(task).__name__}.")
    if batch_size is not None:
        check_int("batch_size", batch_size, 1, task.n_train)
    with torch.no_grad():
        out, targets = task_logits(module, task, torch.arange(min(2, len(task.inputs_NL))))
    if out.shape[:-1] != targets.shape or out.shape[-1] < task.n_classes:
        want = f"[rows, >= {task.n_classes}] (or [rows, pos, >= {task.n_classes}])"
        if targets.ndim == 2:
            want = f"[rows, pos, >= {task.n_classes}], an answer at every position"
        raise ValueError(
            f"{type(module).__name__} gives logits of shape {tuple(out.shape)} for 2 rows of {task.name}, which has "
            f"{task.n_classes} answers: it must give {want}."
        )


def _rows(task: Task, batch_size: int | None, seed: int, step: int) -> torch.Tensor:
    """The training rows of ``step`` (indices): all of them, or ``batch_size`` drawn by ``(seed, step)``."""
    train = task.train_N.nonzero().flatten()
    if batch_size is None:
        return train
    pick = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed * 1_000_003 + step))
    return train[pick[:batch_size]]


def tiny(
    module: torch.nn.Module,
    task: Task,
    steps: int = 1000,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    batch_size: int | None = None,
    seed: int = 0,
    eval_every: int = 50,
    path: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 100,
    progress: Any = True,
) -> TrainResult:
    """Train ``module`` in place on ``task`` for ``steps`` AdamW steps; resumable from ``path``.

    ``batch_size`` None trains on the whole training split each step. Every ``eval_every`` steps (and at the
    last) the history gains a row. With ``path`` the run commits its weights, optimizer and history every
    ``checkpoint_every`` steps; run again with a module built the same way (same seed) it resumes, and a run
    of other settings or weights is refused naming what differs.

    >>> res = ilab.train.tiny(net, ilab.train.boolean("xor"), steps=300, lr=1e-2)
    >>> res.final["train_acc"]
    1.0
    """
    steps = check_int("steps", steps, 1)
    eval_every = check_int("eval_every", eval_every, 1)
    checkpoint_every = check_int("checkpoint_every", checkpoint_every, 1)
    check_fit(module, task, batch_size)
    inputs = {"task": task.identity(), "model": module_fingerprint(type(module).__name__, module), "steps": steps,
              "lr": lr, "weight_decay": weight_decay, "batch_size": batch_size, "seed": seed,
              "eval_every": eval_every}  # fmt: skip
    job = ResumableJob(JOB, path, inputs)
    opt = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=weight_decay)
    step, history = _resume(job, module, opt)
    module.train()
    with job.progress(steps, step, f"train {task.name}", progress) as bar:
        while step < steps:
            rows = _rows(task, batch_size, seed, step)
            loss = _loss(module, task, rows)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            bar.update(1)
            if step % eval_every == 0 or step == steps:
                _record(history, module, task, step, float(loss.detach()))
                bar.set_postfix(loss=f"{float(loss.detach()):.3g}", train_acc=history["train_acc"][-1])
            if job.due(step, checkpoint_every, steps):
                job.commit({"step": step, "weights": module.state_dict(), "optimizer": optimizer_state(opt),
                            "history": history})  # fmt: skip
    module.eval()
    return TrainResult(module, task, history)


def _resume(job: ResumableJob, module: torch.nn.Module, opt: torch.optim.Optimizer) -> tuple[int, dict[str, list]]:
    """The step and history to go on from, the module and optimizer loaded (step 0 the first time)."""
    state = job.start()
    if state is None:
        return 0, {k: [] for k in _COLUMNS}
    module.load_state_dict(state["weights"])
    load_optimizer_state(opt, state["optimizer"])
    return int(state["step"]), {k: list(state["history"][k]) for k in _COLUMNS}


def _record(history: dict[str, list[Any]], module: torch.nn.Module, task: Task, step: int, loss: float) -> None:
    module.eval()
    history["step"].append(step)
    history["loss"].append(loss)
    history["train_acc"].append(_accuracy(module, task, task.train_N))
    history["test_acc"].append(_accuracy(module, task, ~task.train_N))
    module.train()
