"""Contrastive training of a small CLIP on images and caption ids, resumable (the job contract of ARCHITECTURE.md).

Each step draws ``batch_size`` pairs by ``(seed, step)`` (the same from any step, so a run killed and resumed
ends with the same weights) and minimises CLIP's symmetric cross-entropy, with pairs of the same caption counted
as matches. With ``path`` the run commits weights, optimizer and history every ``checkpoint_every`` steps; the
finished run keeps only the weights and history, so a rerun finds it and returns at once.

Example
-------
>>> res = ilab.vision.train_clip(clip, images, caption_ids, steps=500, path="clip-run/")
>>> res.history["loss"][-1]
"""

from __future__ import annotations

import hashlib
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from ..checks import check_int, check_number
from ..model.limits import module_fingerprint
from ..model.trace_ops import log_probs
from ..storage.checkpoint import load_optimizer_state, optimizer_state
from ..storage.resumable import ResumableJob

JOB = "vision.train_clip"


@dataclass
class ClipTraining:
    """The trained ``module`` and its ``history`` (``step`` and the batch ``loss`` every ``eval_every`` steps)."""

    module: torch.nn.Module
    history: dict[str, list[float]] = field(default_factory=dict)


def _digest(*tensors: torch.Tensor) -> str:
    """A short hash of the training data, so a resume on other data is refused."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def contrastive_loss(module: Any, pixels: torch.Tensor, ids_BL: torch.Tensor) -> torch.Tensor:
    """CLIP's symmetric cross-entropy over a batch, every pair with the same caption a match."""
    logits = module(input_ids=ids_BL, pixel_values=pixels).logits_per_image
    same = (ids_BL[:, None, :] == ids_BL[None, :, :]).all(-1).float()
    target = same / same.sum(1, keepdim=True)
    by_image, by_text = log_probs(logits), log_probs(logits.T)  # over texts per image, over images per text
    return -(target * by_image).sum(1).mean() - (target.T * by_text).sum(1).mean()


def _check(module: Any, images: torch.Tensor, ids: torch.Tensor) -> None:
    if not hasattr(module, "get_text_features") or not hasattr(module, "get_image_features"):
        raise TypeError(f"train_clip trains a transformers CLIPModel; got {type(module).__name__}.")
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or not images.is_floating_point():
        raise ValueError(f"images are a float [N, C, H, W] tensor; got {getattr(images, 'shape', type(images))}.")
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.shape[0] != images.shape[0]:
        raise ValueError(f"caption_ids are an int [N, L] tensor with one row per image ({images.shape[0]}); got "
                         f"{list(getattr(ids, 'shape', []))}.")  # fmt: skip


def train_clip(
    module: Any, images: torch.Tensor, caption_ids: torch.Tensor, steps: int = 500, lr: float = 2e-3,
    batch_size: int = 64, seed: int = 0, eval_every: int = 25, path: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 100, progress: Any = True,
) -> ClipTraining:  # fmt: skip
    """Train a transformers ``CLIPModel`` in place on image / caption-id pairs (AdamW, one-cycle learning rate).

    >>> res = train_clip(clip, images, ids, steps=200, path="run/")
    """
    _check(module, images, caption_ids)
    steps = check_int("steps", steps, 1)
    batch_size = check_int("batch_size", batch_size, 2)
    eval_every = check_int("eval_every", eval_every, 1)
    lr = check_number(lr, "lr")
    inputs = {"model": module_fingerprint(type(module).__name__, module), "data": _digest(images, caption_ids),
              "steps": steps, "lr": lr, "batch_size": batch_size, "seed": seed, "eval_every": eval_every}  # fmt: skip
    job = ResumableJob(JOB, path, inputs)
    opt = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=steps)
    state = job.start()
    step = 0
    history: dict[str, list[float]] = {"step": [], "loss": []}
    if state is not None:
        module.load_state_dict(state["weights"])
        step, history = int(state["step"]), {k: list(state["history"][k]) for k in ("step", "loss")}
        if step < steps:
            load_optimizer_state(opt, state["optimizer"])
            with warnings.catch_warnings():  # the schedule replayed to ``step``, no optimizer step between
                warnings.simplefilter("ignore", UserWarning)
                for _ in range(step):
                    sched.step()
    module.train()
    with job.progress(steps, step, "train CLIP", progress) as bar:
        while step < steps:
            rows = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed * 1_000_003 + step))
            loss = contrastive_loss(module, images[rows[:batch_size]], caption_ids[rows[:batch_size]])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            bar.update(1)
            if step % eval_every == 0 or step == steps:
                history["step"].append(step)
                history["loss"].append(float(loss.detach()))
            if job.due(step, checkpoint_every, steps):
                optimizer = optimizer_state(opt) if step < steps else {}
                job.commit({"step": step, "weights": module.state_dict(), "optimizer": optimizer, "history": history})
    module.eval()
    return ClipTraining(module, history)
