"""A BatchTopK SAE trained to convergence on one site, as a resumable job whose finished folder is small.

Stitching and meta-SAEs compare a large SAE with a smaller one on the same site; the comparison means
something only when the smaller SAE has converged. :func:`train_converged` caches the site's activations
from the model over a corpus into a store (itself resumable), holds out the last ``held_out`` tokens,
and trains on the rest with batches drawn by ``(seed, step)`` (the same from any step), recording the
held-out fraction of variance unexplained (FVU) every ``eval_every`` steps. The folder keeps a checkpoint
(weights, Adam state, history) while it runs; the finished job keeps only the SAE in bfloat16 and its
history, so a rerun returns at once without the model's activations.

Example
-------
>>> run = train_converged(model, "blocks.6.hook_resid_post", "nbs/papers/stitching_meta_run")
>>> run.sae, run.converged(), run.chart()
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..checks import check_fraction, check_int, check_number
from ..data.corpus import describe_corpus
from ..saes import SAE
from ..saes.training.trainer import train_step
from ..storage.cache import cache_dir
from ..storage.checkpoint import load_optimizer_state, optimizer_state
from ..storage.readers import FileError
from ..storage.resumable import ResumableJob

JOB = "matching.converged"
_COLUMNS = ("step", "train_fvu", "heldout_fvu", "heldout_l0")


@dataclass
class ConvergedSAE:
    """The trained SAE (reading raw activations) and its ``history`` (lists per column of ``_COLUMNS``)."""

    sae: SAE
    history: dict[str, list[float]]
    n_train_tokens: int
    steps: int
    batch_size: int

    def frame(self) -> pd.DataFrame:
        """The history, one row per evaluation."""
        return pd.DataFrame(self.history)

    def tail_change(self, tail: float = 0.2) -> float:
        """Relative change of the held-out FVU over the last ``tail`` of the steps (a least-squares line's
        rise across that window divided by the final FVU; near 0 when the curve is flat).

        >>> run.tail_change()  # e.g. -0.004: 0.4% lower at the end of the window than at its start
        """
        tail = check_fraction("tail", tail, what="a share of the steps")
        frame = self.frame()
        window = frame[frame.step >= self.steps * (1 - tail)]
        if len(window) < 3:
            raise ValueError(f"The last {tail:.0%} of the steps hold {len(window)} evaluations; 3 are needed.")
        slope = np.polyfit(window.step.to_numpy(float), window.heldout_fvu.to_numpy(float), 1)[0]
        span = float(window.step.iloc[-1] - window.step.iloc[0])
        return float(slope * span / window.heldout_fvu.iloc[-1])

    def tail_share(self, tail: float = 0.2) -> float:
        """The held-out FVU's change over the last ``tail`` of the steps as a share of its whole fall (first
        evaluation to last): near 0 on a plateau, ``tail`` or more on a curve still falling as fast as ever.

        >>> run.tail_share()  # e.g. -0.001: the last fifth of training gave 0.1% of the fall
        """
        fall = self.history["heldout_fvu"][0] - self.history["heldout_fvu"][-1]
        change = self.tail_change(tail) * self.history["heldout_fvu"][-1]
        return float(change / fall) if fall > 0 else float("inf")

    def converged(self, tail: float = 0.2, tolerance: float = 0.01) -> bool:
        """Whether the last ``tail`` of training moved the held-out FVU by less than ``tolerance`` of its whole fall
        (the curve is flat there on the scale of the curve).

        >>> run.converged()  # True: the last fifth gave less than 1% of the fall
        """
        tolerance = check_fraction("tolerance", tolerance, what="a share of the fall")
        return abs(self.tail_share(tail)) < tolerance

    def chart(self, tail: float = 0.2) -> Any:
        """Held-out and training FVU against the step (log scale), the last ``tail`` of the steps shaded."""
        import altair as alt

        from ..views.charts import offline

        tail = check_fraction("tail", tail, what="a share of the steps")
        long = self.frame().melt("step", ["train_fvu", "heldout_fvu"], "measure", "fvu")
        fvu = alt.Y("fvu:Q", scale=alt.Scale(type="log"), title="FVU")
        line = alt.Chart(long).mark_line().encode(x=alt.X("step:Q"), y=fvu, color="measure:N")
        band = alt.Chart(pd.DataFrame({"start": [self.steps * (1 - tail)], "end": [self.steps]})).mark_rect(
            opacity=0.15).encode(x="start:Q", x2="end:Q")  # fmt: skip
        title = f"{self.sae.d_sae}-latent SAE on {self.sae.site}: last {tail:.0%} shaded"
        return offline((band + line).properties(title=title, width=420, height=220))


def _check_settings(width: int, k: int, steps: int, batch_size: int, lr: float, eval_every: int) -> None:
    check_int("width", width, minimum=1)
    check_int("k", k, 1, width)
    check_int("steps", steps, minimum=10)
    check_int("batch_size", batch_size, minimum=1)
    if not check_number(lr, "lr") > 0:
        raise ValueError(f"lr must be > 0, got {lr!r}.")
    check_int("eval_every", eval_every, 1, steps)


def train_converged(
    model: Any, site: str, path: str | os.PathLike[str] | None, *, corpus: Any = "default",
    n_tokens: int = 400_000, held_out: int = 4096, width: int = 512, k: int = 32, steps: int = 6000,
    batch_size: int = 1024, lr: float = 1e-3, eval_every: int = 20, seed: int = 0,
    store: str | os.PathLike[str] | None = None, progress: Any = True,
) -> ConvergedSAE:  # fmt: skip
    """Train (or find trained in ``path``) a BatchTopK SAE of ``width`` latents on ``model``'s ``site``.

    ``n_tokens`` of ``corpus`` are cached into ``store`` (default: a folder in the interplab cache), the last
    ``held_out`` of them kept for the held-out FVU; ``steps`` Adam steps of ``batch_size`` rows at ``lr``
    (5% warm-up, then constant, so a flat end is convergence and not a vanishing rate).

    >>> run = ilab.matching.train_converged(model, "blocks.6.hook_resid_post", "run/", steps=2000)
    """
    _check_settings(width, k, steps, batch_size, lr, eval_every)
    check_int("held_out", held_out, 1, n_tokens - batch_size)
    (parsed,) = model.parse_sites(site)
    site = parsed.name
    inputs = {"model": model.fingerprint(), "site": site, "corpus": describe_corpus(corpus), "n_tokens": n_tokens,
              "held_out": held_out, "width": width, "k": k, "steps": steps, "batch_size": batch_size, "lr": lr,
              "eval_every": eval_every, "seed": seed}  # fmt: skip
    job = ResumableJob(JOB, path, inputs)
    state = job.start()
    if state is not None and state.get("done"):
        return _finished(job, state, site, model.site_dim(site), width, k)
    store_path = Path(store) if store is not None else cache_dir() / "stores" / f"{model.name}-{site}-{n_tokens}"
    acts = model.cache(corpus, site, store_path, n_tokens=n_tokens, context_size=128, batch_size=16,
                       dtype="bfloat16", progress=progress)  # fmt: skip
    x = acts.read(site)[:n_tokens]  # kept in the store's dtype; batches are made float32 one at a time
    if len(x) <= held_out + batch_size:
        raise ValueError(f"The store at {str(store_path)!r} holds {len(x)} tokens: too few for held_out={held_out}.")
    run = _Run(x, held_out, site, width, k, seed, lr, steps, batch_size)
    if state is not None:
        run.restore(job.where, state, acts.identity())
    with job.progress(steps, run.step, f"train {width}-latent SAE", progress) as bar:
        while run.step < steps:
            run.train_one()
            bar.update(1)
            if run.step % eval_every == 0 or run.step == steps:
                run.evaluate()
            if run.step < steps and job.due(run.step, 10 * eval_every, steps):
                job.commit(run.state(acts.identity()))
    result = run.finish()
    job.commit(_final_state(result, acts.identity()))
    return result


class _Run:
    """One training run in memory: the SAE, its optimiser, the scaled rows, the step and the history."""

    def __init__(
        self, x: torch.Tensor, held_out: int, site: str, width: int, k: int, seed: int, lr: float, steps: int,
        batch_size: int,
    ) -> None:  # fmt: skip
        mean_norm = torch.cat([part.float().norm(dim=1) for part in x.split(65_536)]).mean()
        self.scale = math.sqrt(x.shape[1]) / float(mean_norm)
        self.train_x, self.test_x = x[:-held_out], x[-held_out:].float() * self.scale
        self.sae = SAE.create("batchtopk", d_in=x.shape[1], d_sae=width, k=k, site=site)
        self.sae.init_weights(seed)
        with torch.no_grad():
            self.sae.b_dec.copy_(self.train_x[:65_536].float().mean(0) * self.scale)
        self.opt = torch.optim.Adam(self.sae.parameters(), lr=lr, betas=(0.9, 0.999))
        self.seed, self.lr, self.steps, self.batch_size = seed, lr, steps, batch_size
        self.since_fired = torch.zeros(width, dtype=torch.long)
        self.dead_tokens = max(batch_size, len(self.train_x) // 4)
        self.step, self.last_fvu = 0, float("nan")
        self.history: dict[str, list[float]] = {c: [] for c in _COLUMNS}

    def train_one(self) -> None:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.step)
        batch = self.train_x[torch.randint(len(self.train_x), (self.batch_size,), generator=gen)].float() * self.scale
        for group in self.opt.param_groups:
            group["lr"] = self.lr * min(1.0, (self.step + 1) / max(1, self.steps // 20))
        info = train_step(self.sae, self.opt, batch, self.since_fired > self.dead_tokens, self.since_fired)
        self.last_fvu = float(info["mse"]) / float((batch - batch.mean(0)).pow(2).sum(-1).mean())
        self.step += 1

    @torch.no_grad()
    def evaluate(self) -> None:
        self.sae.eval()
        acts = self.sae.encode(self.test_x)
        err = (self.test_x - self.sae.decode(acts)).pow(2).sum(-1).mean()
        var = (self.test_x - self.test_x.mean(0)).pow(2).sum(-1).mean()
        self.sae.train(True)
        row = (self.step, self.last_fvu, float(err / var), float((acts > 0).float().sum(-1).mean()))
        for column, value in zip(_COLUMNS, row, strict=True):
            self.history[column].append(value)

    def state(self, store: dict[str, Any]) -> dict[str, Any]:
        return {"done": False, "step": self.step, "sae": self.sae.state_dict(), "opt": optimizer_state(self.opt),
                "since_fired": self.since_fired, "history": self.history, "store": store}  # fmt: skip

    def restore(self, where: Any, state: dict[str, Any], store: dict[str, Any]) -> None:
        if state.get("store") != store:
            raise FileError(where, "state.store", "was made from another activation store than this run's")
        try:
            self.sae.load_state_dict(state["sae"])
            load_optimizer_state(self.opt, state["opt"])
            self.step = check_int("step", state["step"], 0, self.steps)
            self.history = {c: [float(v) for v in state["history"][c]] for c in _COLUMNS}
            self.since_fired = state["since_fired"].long()
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as err:
            raise FileError(where, "state", f"does not fit this training run ({err})") from None

    def finish(self) -> ConvergedSAE:
        self.sae.fold_input_scale(self.scale)
        self.sae.eval()
        self.sae.cfg.metadata.update({"training_tokens": self.steps * self.batch_size, "input_scale": self.scale,
                                      "unique_tokens": len(self.train_x)})  # fmt: skip
        return ConvergedSAE(self.sae, self.history, len(self.train_x), self.steps, self.batch_size)


def _final_state(result: ConvergedSAE, store: dict[str, Any]) -> dict[str, Any]:
    weights = {name: t.to(torch.bfloat16) for name, t in result.sae.state_dict().items()}
    return {"done": True, "step": result.steps, "sae": weights, "history": result.history, "store": store,
            "n_train_tokens": result.n_train_tokens}  # fmt: skip


def _finished(job: ResumableJob, state: dict[str, Any], site: str, d_in: int, width: int, k: int) -> ConvergedSAE:
    """The finished job's SAE and history, checked against the shapes this call asks for."""
    inputs = job.inputs
    sae = SAE.create("batchtopk", d_in=d_in, d_sae=width, k=k, site=site)
    try:
        sae.load_state_dict({name: t.float() for name, t in state["sae"].items()})
        history = {c: [float(v) for v in state["history"][c]] for c in _COLUMNS}
        n_train = check_int("n_train_tokens", state["n_train_tokens"], minimum=1)
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as err:
        raise FileError(job.where, "state", f"does not hold a finished {width}-latent SAE ({err})") from None
    sae.eval()
    sae.cfg.metadata.update({"training_tokens": inputs["steps"] * inputs["batch_size"], "unique_tokens": n_train})
    return ConvergedSAE(sae, history, n_train, inputs["steps"], inputs["batch_size"])
