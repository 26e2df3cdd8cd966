"""Fine-tuning a model until it follows both intents of the knob task, as the knob paper does before its search.

:func:`finetune_intents` trains a low-rank adapter (LoRA: ``x @ A_IR @ B_RO`` added to the output of every linear
layer) on the last ``blocks`` blocks, in float32 beside the model's own weights, which are never written: the
adapter acts through forward hooks only inside ``with tuning.applied(model):``, which holds the model's run lock,
so no other run of the shared model sees it and every exit (an error included) removes it. The loss is the
cross-entropy over the whole vocabulary at the last token, the target being the intended answer; items are split
by city, so held-out questions ask about cities never trained on. ``snapshots=`` keeps the adapter after those
steps: the fine-tune's intermediate models, for :func:`interplab.core.das.separation.knob_separation`.
The finished adapter and the snapshots are kept in float16. With ``path=`` the run is a resumable job whose
finished state (the adapter and its snapshots, under 1 MB for the notebook's settings) is found by a rerun, which
then returns at once.

Example
-------
>>> task = ilab.das.knob_task(model, n=40)
>>> tuning = ilab.das.finetune_intents(model, task, blocks=2, steps=30)
>>> tuning.before, tuning.after                       # held-out share following each intent
>>> tuning.at(5)                                      # the adapter after step 5 (when kept by snapshots=)
>>> with tuning.applied(model):
...     knob = ilab.das.fit(model, tuning.pairs(), "blocks.14.hook_resid_post", k=1)
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..checks import check_int, check_number
from ..memory.frozen import frozen_weights
from ..model.trace_ops import log_probs
from ..storage.resumable import ResumableJob
from ..views.charts import offline
from .knob import INTENTS, KnobTask
from .pairs import CounterfactualPairs, label_ids

if TYPE_CHECKING:
    from ..model.model import Model

JOB = "das.finetune_intents"
#: A LoRA adapter: module path -> (A_IR, B_RO).
Adapter = dict[str, tuple[torch.Tensor, torch.Tensor]]


@dataclass(repr=False)
class IntentTuning:
    """A LoRA adapter on the last blocks and the held-out share following each intent before and after it."""

    task: KnobTask
    blocks: list[int]
    rank: int
    adapter: Adapter
    train_items: list[int]
    test_items: list[int]
    before: dict[str, float]
    after: dict[str, float]
    losses: list[float] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    snapshots: dict[int, Adapter] = field(default_factory=dict)  # step -> the adapter after it (float16)

    @contextlib.contextmanager
    def applied(self, model: Model) -> Iterator[Model]:
        """``model`` with the adapter added to its runs, under its run lock; removed on every exit."""
        modules = _linears(model, self.blocks)
        missing = sorted(set(self.adapter) - set(modules))
        if missing:
            raise ValueError(f"The adapter names modules {missing[:3]} that {model.name!r} has not: "
                             "it was fitted on another model.")  # fmt: skip
        with model.lock:
            hooks = [modules[path].register_forward_hook(_hook(A, B)) for path, (A, B) in self.adapter.items()]
            try:
                yield model
            finally:
                for hook in hooks:
                    hook.remove()

    def at(self, step: int) -> IntentTuning:
        """The fine-tune after ``step`` steps: this tuning with the adapter kept then (``snapshots=``).

        Its ``after`` is empty (not measured); ``before`` is the plain model's.
        """
        if step not in self.snapshots:
            raise ValueError(f"step={step!r} has no snapshot; the kept steps are {sorted(self.snapshots)} "
                             "(finetune_intents(..., snapshots=[...])).")  # fmt: skip
        adapter = {path: (A.float(), B.float()) for path, (A, B) in self.snapshots[step].items()}
        return IntentTuning(self.task, self.blocks, self.rank, adapter, self.train_items, self.test_items,
                            self.before, {}, self.losses[:step], {**self.settings, "steps": step})  # fmt: skip

    def pairs(self, split: str = "test") -> CounterfactualPairs:
        """The task's intent-swapping pairs on the ``"train"`` or ``"test"`` items (held-out cities)."""
        if split not in ("train", "test"):
            raise ValueError(f"split={split!r} is not one of ('train', 'test').")
        items = self.train_items if split == "train" else self.test_items
        return KnobTask([self.task.items[i] for i in items]).pairs()

    def held_out(self) -> KnobTask:
        """The task of the held-out items only."""
        return KnobTask([self.task.items[i] for i in self.test_items])

    def to_dict(self) -> dict[str, Any]:
        return {"blocks": self.blocks, "rank": self.rank, "before": self.before, "after": self.after,
                "steps": len(self.losses), "n_train": len(self.train_items),
                "n_test": len(self.test_items)}  # fmt: skip

    def chart(self) -> Any:
        """Altair: the held-out share following each intent, before and after fine-tuning."""
        import altair as alt
        import pandas as pd

        rows = [{"model": when, "intent": intent, "share following": float(acc[intent])}
                for when, acc in (("before", self.before), ("after", self.after)) for intent in INTENTS]  # fmt: skip
        return offline(alt.Chart(pd.DataFrame(rows)).mark_bar().encode(
            x=alt.X("model:N", sort=["before", "after"]), y=alt.Y("share following:Q", scale=alt.Scale(domain=[0, 1])),
            color="model:N", column="intent:N").properties(
            title=f"held-out intents, LoRA rank {self.rank} on blocks {self.blocks}", width=120,
            height=200))  # fmt: skip

    def __repr__(self) -> str:
        fmt = ", ".join(f"{i} {self.before[i]:.2f} -> {self.after[i]:.2f}" for i in INTENTS)
        return (f"IntentTuning(blocks {self.blocks}, rank {self.rank}, {len(self.losses)} steps; held-out share "
                f"following: {fmt}; {len(self.test_items)} held-out items)")  # fmt: skip


def _hook(A_IR: torch.Tensor, B_RO: torch.Tensor) -> Any:
    def add(module: torch.nn.Module, inputs: tuple[Any, ...], out: torch.Tensor) -> torch.Tensor:
        x = inputs[0]
        return out + (x.float() @ A_IR.to(x.device) @ B_RO.to(x.device)).to(out.dtype)

    return add


def widths(module: torch.nn.Module) -> tuple[int, int] | None:
    """(in, out) features of a linear layer (``nn.Linear``, or GPT-2's ``Conv1D`` with ``nx``/``nf``); else None."""
    if isinstance(module, torch.nn.Linear):
        return module.in_features, module.out_features
    nx, nf = getattr(module, "nx", None), getattr(module, "nf", None)
    return (nx, nf) if isinstance(nx, int) and isinstance(nf, int) else None


def _linears(model: Model, blocks: list[int]) -> dict[str, torch.nn.Module]:
    """Every linear layer of ``blocks``, by its path in ``model.module``."""
    out = {}
    for layer in blocks:
        path = str(model.block(layer).path).split(".", 1)[1]  # the envoy's path starts with the root's name
        for name, mod in model.module.get_submodule(path).named_modules():
            if widths(mod) is not None:
                out[f"{path}.{name}"] = mod
    return out


def split_items(task: KnobTask, test_size: float, seed: int) -> tuple[list[int], list[int]]:
    """Item indices split by city: every item of a held-out city is held out."""
    cities = sorted({city for city, _, _ in task.items})
    order = np.random.default_rng(seed).permutation(len(cities))
    n_test = min(len(cities) - 1, max(1, round(test_size * len(cities))))
    held = {cities[i] for i in order[:n_test]}
    test = [i for i, (city, _, _) in enumerate(task.items) if city in held]
    return [i for i in range(len(task.items)) if i not in test], test


def check_task(model: Model, task: Any, blocks: int) -> KnobTask:
    """Refuse a task that cannot teach both intents, or blocks the model has not, before any forward pass."""
    if not isinstance(task, KnobTask):
        raise TypeError(f"task must be a KnobTask (ilab.das.knob_task), got {type(task).__name__}.")
    if len(set(task.intents)) < 2:
        raise ValueError(f"task has one intent {tuple(task.intents)!r}: fine-tuning needs both of {tuple(INTENTS)}.")
    if len({city for city, _, _ in task.items}) < 2:
        raise ValueError(f"task has {len(task.items)} items of one city: held-out questions need two cities or more.")
    if any(true == fake for _, true, fake in task.items):
        raise ValueError("task has an item whose context agrees with the fact: both intents give one answer.")
    check_int("blocks", blocks, 1, model.n_layers)
    return task


def _batch(model: Model, task: KnobTask, idx: list[int], countries: list[str]) -> tuple[dict[str, Any], torch.Tensor]:
    texts = [task.prompt(i, intent) for intent in INTENTS for i in idx]
    target = [countries.index(task.answers(intent)[i]) for intent in INTENTS for i in idx]
    enc = model.tokenizer(texts, return_tensors="pt", padding=True)
    return {k: v.to(model.device) for k, v in enc.items()}, torch.tensor(target)


def _last_logits(model: Model, enc: dict[str, Any]) -> torch.Tensor:
    """The full vocabulary's logits at each prompt's last token [n, V] (only that position unembedded when the
    tokenizer pads on the left and the model takes ``logits_to_keep``)."""
    left = model.tokenizer.padding_side == "left"
    keep = left and "logits_to_keep" in inspect.signature(model.module.forward).parameters
    logits = model.module(**enc, **({"logits_to_keep": 1} if keep else {})).logits
    if left:
        return logits[:, -1].float()
    last = enc["attention_mask"].sum(1) - 1
    return logits[torch.arange(len(logits)), last].float()


def finetune_intents(
    model: Model, task: KnobTask, blocks: int = 2, rank: int = 4, steps: int = 30, lr: float = 0.01,
    batch_items: int = 8, test_size: float = 0.5, seed: int = 0, path: str | os.PathLike[str] | None = None,
    progress: bool = True, snapshots: Sequence[int] = (),
) -> IntentTuning:  # fmt: skip
    """Train a rank-``rank`` LoRA on the last ``blocks`` blocks for ``steps`` Adam steps so both intents are followed.

    Each step takes ``batch_items`` training items under both intents; ``test_size`` of the cities are held out.
    ``snapshots`` lists steps (1..steps-1) after which the adapter is kept (:meth:`IntentTuning.at`).
    ``path`` keeps the job (resumable; a finished one is returned at once). The model's weights are not written.

    >>> tuning = finetune_intents(model, ilab.das.knob_task(model, n=40), steps=30)
    """
    task = check_task(model, task, blocks)
    rank = check_int("rank", rank, 1, model.d_model)
    steps, batch_items = check_int("steps", steps, minimum=1), check_int("batch_items", batch_items, minimum=1)
    lr = check_number(lr, "lr")
    if lr <= 0:
        raise ValueError(f"lr must be positive, got {lr}.")
    kept = sorted({check_int("snapshot step", s, 1, steps - 1) for s in snapshots}) if steps > 1 else []
    if snapshots and not kept:
        raise ValueError(f"snapshots={list(snapshots)!r} needs steps >= 2 (a snapshot is kept after steps 1..steps-1).")
    train, test = split_items(task, check_number(test_size, "test_size"), seed)
    layers = list(range(model.n_layers - blocks, model.n_layers))
    modules = _linears(model, layers)
    settings = {"blocks": layers, "rank": rank, "steps": steps, "lr": lr, "batch_items": batch_items,
                "test_size": test_size, "seed": seed, "model": model.name, "snapshots": kept}  # fmt: skip
    items = hashlib.sha256(json.dumps(task.items).encode()).hexdigest()[:16]
    job = ResumableJob(JOB, path, {**settings, "weights": model.fingerprint(), "items": items})
    state = job.start()
    adapter = _init(modules, rank, seed) if state is None else _restore(state, modules, rank)
    tuning = IntentTuning(task, layers, rank, adapter, train, test, {}, {}, [], settings)
    done = 0 if state is None else int(state["step"])
    tuning.losses = [] if state is None else [float(x) for x in state["losses"]]
    tuning.snapshots = {} if state is None else _restore_snapshots(state, modules, rank)
    if done < steps:
        _train(model, tuning, job, state, done, progress)
        tuning.adapter = {p: (A.half().float(), B.half().float()) for p, (A, B) in tuning.adapter.items()}  # as kept
    held = tuning.held_out()
    tuning.before = held.accuracy(model) if state is None or "before" not in state else _acc(state["before"])
    with tuning.applied(model):
        tuning.after = held.accuracy(model)
    if state is None or "before" not in state:  # a finished job found by a rerun is left as it is
        job.commit(_state(tuning, None, steps) | {"before": tuning.before})
    return tuning


def _acc(value: Any) -> dict[str, float]:
    return {intent: float(value[intent]) for intent in INTENTS}


def _init(modules: dict[str, torch.nn.Module], rank: int, seed: int) -> Adapter:
    """A seeded adapter that starts as the identity (B = 0)."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for path, mod in modules.items():
        d_in, d_out = widths(mod) or (0, 0)
        out[path] = (torch.randn(d_in, rank, generator=gen) / d_in**0.5, torch.zeros(rank, d_out))
    return out


def _restore(state: Any, modules: dict[str, torch.nn.Module], rank: int) -> Adapter:
    out = {}
    for i, (path, mod) in enumerate(modules.items()):
        A, B = state["A"][str(i)].float(), state["B"][str(i)].float()
        d_in, d_out = widths(mod) or (0, 0)
        if A.shape != (d_in, rank) or B.shape != (rank, d_out):
            raise ValueError(f"The saved adapter of {path} has shapes {tuple(A.shape)}, {tuple(B.shape)}; "
                             f"expected ({d_in}, {rank}), ({rank}, {d_out}).")  # fmt: skip
        out[path] = (A.clone(), B.clone())
    return out


def _restore_snapshots(state: Any, modules: dict[str, torch.nn.Module], rank: int) -> dict[int, Adapter]:
    out = {}
    for step, saved in dict(state.get("snapshots", {})).items():
        adapter = _restore(saved, modules, rank)
        out[int(step)] = {path: (A.half(), B.half()) for path, (A, B) in adapter.items()}
    return out


def _tensors(adapter: Adapter, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    pairs = list(adapter.values())
    return {"A": {str(i): A.detach().to(dtype) for i, (A, _) in enumerate(pairs)},
            "B": {str(i): B.detach().to(dtype) for i, (_, B) in enumerate(pairs)}}  # fmt: skip


def _state(tuning: IntentTuning, opt: torch.optim.Optimizer | None, step: int) -> dict[str, Any]:
    """The job's state: mid-run the adapter in float32 with the optimizer's, finished (``opt`` None) in float16."""
    final = torch.float32 if opt is not None else torch.float16
    state: dict[str, Any] = {**_tensors(tuning.adapter, final), "step": step, "losses": list(tuning.losses)}
    if tuning.snapshots:
        state["snapshots"] = {str(s): _tensors(a, torch.float16) for s, a in sorted(tuning.snapshots.items())}
    if opt is not None:
        state["opt"] = opt.state_dict()
    return state


def _train(model: Model, tuning: IntentTuning, job: ResumableJob, state: Any, done: int, progress: Any) -> None:
    """Adam on the adapter from step ``done`` to ``steps``, committing every 10 steps."""
    steps, seed, batch_items = (tuning.settings[k] for k in ("steps", "seed", "batch_items"))
    leaves = [t.requires_grad_(True) for pair in tuning.adapter.values() for t in pair]
    opt = torch.optim.Adam(leaves, lr=tuning.settings["lr"])
    if state is not None and "opt" in state:
        opt.load_state_dict(state["opt"])
    countries = sorted({" " + c for _, true, fake in tuning.task.items for c in (true, fake)})
    ids = label_ids(model, countries)
    with (
        job.progress(steps, done, "fine-tune", progress, leave=False) as bar,
        tuning.applied(model),
        frozen_weights(model.module),
    ):  # only the adapter takes gradients
        for step in range(done, steps):
            gen = torch.Generator().manual_seed(seed * 1000 + step)
            pick = torch.randperm(len(tuning.train_items), generator=gen)[:batch_items].tolist()
            enc, target = _batch(model, tuning.task, [tuning.train_items[i] for i in pick], countries)
            logits_NV = _last_logits(model, enc)
            answer_N = ids[target].to(model.device)
            loss = -log_probs(logits_NV).gather(1, answer_N[:, None]).mean()  # cross-entropy in float32
            grads = torch.autograd.grad(loss, leaves)
            for leaf, grad in zip(leaves, grads, strict=True):
                leaf.grad = grad
            opt.step()
            tuning.losses.append(float(loss.detach()))
            if step + 1 in tuning.settings["snapshots"]:
                tuning.snapshots[step + 1] = {p: (A.detach().half(), B.detach().half())
                                              for p, (A, B) in tuning.adapter.items()}  # fmt: skip
            bar.update(1)
            if job.due(step + 1, 10, steps):
                job.commit(_state(tuning, opt, step + 1))
    for leaf in leaves:
        leaf.requires_grad_(False)
        leaf.grad = None
