"""Distributed alignment search: learn a k-dimensional subspace of a site from counterfactual pairs.

The subspace is the span of orthonormal columns ``Q = orthonormal(A)`` of a free [d, k] matrix ``A``
(QR, so ``Q`` is orthonormal at every step). Training minimises the cross-entropy towards each pair's
label of the base run with the subspace's coordinates swapped in from the source (Adam on ``A``); the
interchange-intervention accuracy (IIA) on held-out pairs says whether the subspace *is* the concept.
``full_iia`` swaps the whole vector (what patching the site does: the ceiling for any subspace), and
``base_rate`` is how often the label is the top token with no intervention at all.

With ``path=`` the run is a :class:`~interplab.core.storage.resumable.ResumableJob`: a kill at any point resumes
to the same subspace. Bad input (pairs of mismatched lengths, ``k`` larger than the site's width, a label
that is not one token) is refused before any forward pass.

Example
-------
>>> das = ilab.das.fit(model, pairs, "blocks.12.hook_resid_post", k=1)
>>> das.iia, das.full_iia, das.direction.shape          # k = 1: a [d] direction
>>> vec = ilab.steering.from_probe(das)                  # a unit steering vector at das.site
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..checks import check_fraction, check_int, check_number
from ..model.trace_ops import orthonormal
from ..patching.prompts import PromptPairs
from ..storage.atomic import write_safetensors
from ..storage.readers import FLOATS, FileError, expect_arrays, expect_values, read_safetensors, result_header
from ..storage.resumable import ResumableJob
from ..views.charts import offline
from .intervene import check_positions, evaluate, prepare, run, source_values
from .pairs import CounterfactualPairs, as_pairs
from .positions import LEARNED, prepare_all, selector_positions, template_length, train_selector

if TYPE_CHECKING:
    from ..model.model import Model

FORMAT = "interplab.das/1"
JOB = "das.fit"
CHECKPOINT = "checkpoint.safetensors"


#: Token positions a saved result may name: within a context of this many tokens (from either end).
MAX_POSITION = 2**24


@dataclass(repr=False)
class DASResult:
    """A learned subspace ``Q_DK`` at ``site`` and ``positions``, and how well swapping it works."""

    site: str
    positions: list[int]
    Q_DK: torch.Tensor
    iia: float
    train_iia: float
    full_iia: float
    base_rate: float
    logit_diff: float
    losses: list[float] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def k(self) -> int:
        return int(self.Q_DK.shape[1])

    @property
    def direction(self) -> torch.Tensor:
        """k = 1: the unit [d] direction, signed so moving along it moves from base towards source."""
        if self.k != 1:
            raise ValueError(f"This subspace has k={self.k} dimensions; a direction needs k=1 (use Q_DK).")
        return self.Q_DK[:, 0]

    @property
    def selector(self) -> list[float] | None:
        """``positions="learned"``: the position selector's mass per token position of the template (else None)."""
        weights = self.settings.get("selector")
        return None if weights is None else [float(x) for x in weights]

    def to_dict(self) -> dict[str, Any]:
        return {"site": self.site, "k": self.k, "iia": self.iia, "train_iia": self.train_iia,
                "full_iia": self.full_iia, "base_rate": self.base_rate, "logit_diff": self.logit_diff}  # fmt: skip

    def chart(self) -> Any:
        """Altair: the training loss by step, the IIAs in the title."""
        import altair as alt
        import pandas as pd

        df = pd.DataFrame({"step": range(1, len(self.losses) + 1), "loss": self.losses})
        title = (f"DAS k={self.k} at {self.site}: IIA {self.iia:.2f} (full swap {self.full_iia:.2f}, "
                 f"no intervention {self.base_rate:.2f})")  # fmt: skip
        chart = alt.Chart(df).mark_line().encode(x="step:Q", y=alt.Y("loss:Q", title="cross-entropy")).properties(
            title=title, width=380, height=200)  # fmt: skip
        if self.selector is None:
            return offline(chart)
        mass = pd.DataFrame({"position": range(len(self.selector)), "mass": self.selector})
        bars = alt.Chart(mass).mark_bar().encode(x="position:O", y=alt.Y("mass:Q", scale=alt.Scale(domain=[0, 1])))
        return offline(chart | bars.properties(title="learned position selector", width=220, height=200))

    def __repr__(self) -> str:
        return (
            f"DASResult({self.site} at positions {self.positions}, k={self.k}: IIA {self.iia:.3f} held out "
            f"(train {self.train_iia:.3f}; full swap {self.full_iia:.3f}; no intervention {self.base_rate:.3f}))"
        )

    def save(self, path: str | os.PathLike[str]) -> Path:
        """One safetensors file: ``Q_DK`` and the rest as JSON metadata."""
        path = Path(path)
        meta = {**self.to_dict(), "positions": self.positions, "losses": self.losses, "settings": self.settings}
        return write_safetensors(path, {"Q_DK": self.Q_DK}, {"format": FORMAT, "interplab": json.dumps(meta)})

    @staticmethod
    def load(path: str | os.PathLike[str]) -> DASResult:
        """Read a file written by :meth:`save` (header and fields checked first)."""
        path = Path(path)
        header, info = result_header(path, FORMAT, "DAS result")
        k = info.int("k", minimum=1)
        found = header.tensors.get("Q_DK")
        expect_arrays(path, header.tensors, {"Q_DK": ((found.shape[0] if found else 0, k), FLOATS)})
        positions = info.list("positions")
        if not positions or not all(isinstance(p, int) and not isinstance(p, bool) for p in positions):
            raise FileError(path, "positions", "must be a non-empty list of integers")
        if len(set(positions)) != len(positions):
            raise FileError(path, "positions", f"repeats an index: {positions!r:.100}")
        expect_values(path, "positions", positions, -MAX_POSITION, MAX_POSITION, "a context of at most")
        losses = info.list("losses", [])
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in losses):
            raise FileError(path, "losses", "must be a list of numbers")
        expect_values(path, "losses", losses)
        _, tensors = read_safetensors(path, " (a DAS result)")
        expect_values(path, "Q_DK", tensors["Q_DK"])
        return DASResult(info.str("site", max_len=200), positions, tensors["Q_DK"].float(), info.float("iia"),
                         info.float("train_iia"), info.float("full_iia"), info.float("base_rate"),
                         info.float("logit_diff"), [float(x) for x in losses],
                         dict(info.obj("settings", {}).data))  # fmt: skip


def _digest(pairs: CounterfactualPairs) -> str:
    text = json.dumps([pairs.base, pairs.source, pairs.labels, pairs.base_labels])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def split(n: int, test_size: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Train and test indices of ``n`` pairs (a seeded permutation; at least one pair on each side)."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_test = min(n - 1, max(1, round(test_size * n))) if test_size > 0 else 0
    return perm[n_test:].sort().values, perm[:n_test].sort().values


def check_fit_args(model: Model, pairs: Any, site: str, k: int, positions: Any, test_size: float
                   ) -> tuple[CounterfactualPairs, int, list[int], int]:  # fmt: skip
    """Every check of :func:`fit` that needs no forward pass: pairs, site, ``k`` within the site's width, positions."""
    pairs = as_pairs(model, pairs)
    parsed = model.parse_site(site)
    d = model.site_dim(parsed.name)
    k = check_int("k", k, minimum=1)
    if k > d:
        raise ValueError(f"k={k} is larger than the width of {parsed.name} (d={d}): a subspace has 1..{d} dimensions.")
    if isinstance(positions, str):
        if positions != LEARNED:
            raise ValueError(f"positions={positions!r}: give token indices or 'learned' (a trained selector).")
        pos = [template_length(model, pairs)]  # the one length (checked), not a position
    else:
        pos = check_positions(model, pairs.base, positions, "base")
        check_positions(model, pairs.source, pos, "source")
    test_size = check_fraction("test_size", test_size, "[")
    if len(pairs) < 2 and test_size > 0:
        raise ValueError("A held-out split needs at least two pairs (or test_size=0).")
    return pairs, d, pos, k


def fit(
    model: Model,
    pairs: CounterfactualPairs | PromptPairs,
    site: str,
    k: int = 1,
    positions: int | Sequence[int] | str = -1,
    epochs: int = 4,
    lr: float = 0.01,
    batch_size: int = 16,
    test_size: float = 0.25,
    seed: int = 0,
    init: torch.Tensor | None = None,
    path: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 20,
    progress: bool = True,
) -> DASResult:
    """Learn a ``k``-dimensional subspace at ``site`` (and ``positions``) by interchange interventions.

    ``epochs`` passes over the training pairs in batches of ``batch_size`` (a seeded order), Adam at ``lr``;
    ``init`` [d, k] starts from given columns (orthonormalised) instead of a seeded random matrix; ``path``
    keeps a checkpoint every ``checkpoint_every`` steps and resumes from it. ``positions="learned"``: prompts of
    one template; a soft position selector is trained with the rotation (:mod:`~interplab.core.das.positions`),
    and the result holds its argmax position and ``selector`` (no ``path``).

    >>> das = fit(model, ilab.patching.ioi(model, n=64), "blocks.12.hook_resid_post", k=1)
    """
    pairs, d, pos, k = check_fit_args(model, pairs, site, k, positions, test_size)
    epochs = check_int("epochs", epochs, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    checkpoint_every = check_int("checkpoint_every", checkpoint_every, minimum=1)
    lr = check_number(lr, "lr")
    if lr <= 0:
        raise ValueError(f"lr must be positive, got {lr}.")
    if positions == LEARNED and path is not None:
        raise ValueError("positions='learned' trains in memory: leave path=None.")
    A = _start(d, k, init, seed)
    site = model.parse_site(site).name
    train_idx, test_idx = split(len(pairs), test_size, seed)
    if positions == LEARNED:
        return _fit_learned(model, pairs, site, A, pos[0], (train_idx, test_idx), lr, epochs, batch_size, seed,
                            test_size)  # fmt: skip
    settings = {"k": k, "positions": pos, "epochs": epochs, "lr": lr, "batch_size": batch_size, "seed": seed,
                "test_size": test_size, "n_pairs": len(pairs), "model": model.name}  # fmt: skip
    inputs = {**settings, "site": site, "weights": model.fingerprint(), "pairs": _digest(pairs),
              "init": hashlib.sha256(A.numpy().tobytes()).hexdigest()[:16]}  # fmt: skip
    job = ResumableJob(JOB, path, inputs, state_file=CHECKPOINT)
    state = job.start()  # other inputs are refused here, before any forward pass
    prep = prepare(model, pairs, site, pos, batch_size)
    losses = _train(model, prep, A, train_idx, job, state, lr, epochs, batch_size, seed, checkpoint_every, progress)
    Q = orthonormal(A.detach())
    Q = _orient(model, Q, prep, pairs, train_idx)
    test = evaluate(model, prep, test_idx, Q, batch_size)
    return DASResult(site, pos, Q, test["iia"], evaluate(model, prep, train_idx, Q, batch_size)["iia"],
                     evaluate(model, prep, test_idx, None, batch_size)["iia"], _base_rate(model, prep, test_idx),
                     test["logit_diff"], losses, settings)  # fmt: skip


def _fit_learned(model: Model, pairs: CounterfactualPairs, site: str, A: torch.Tensor, length: int,
                 split_idx: tuple[torch.Tensor, torch.Tensor], lr: float, epochs: int, batch_size: int, seed: int,
                 test_size: float) -> DASResult:  # fmt: skip
    """DAS with a learned position selector; IIA and the controls are then measured at its argmax position."""
    train_idx, test_idx = split_idx
    weights, losses = train_selector(model, prepare_all(model, pairs, site, length, batch_size), A, train_idx, lr,
                                     epochs, batch_size, seed)  # fmt: skip
    pos = selector_positions(weights)
    prep = prepare(model, pairs, site, pos, batch_size)
    Q = _orient(model, orthonormal(A.detach()), prep, pairs, train_idx)
    test = evaluate(model, prep, test_idx, Q, batch_size)
    settings = {"k": A.shape[1], "positions": LEARNED, "epochs": epochs, "lr": lr, "batch_size": batch_size,
                "seed": seed, "test_size": test_size, "n_pairs": len(pairs), "model": model.name,
                "selector": weights.tolist()}  # fmt: skip
    return DASResult(site, pos, Q, test["iia"], evaluate(model, prep, train_idx, Q, batch_size)["iia"],
                     evaluate(model, prep, test_idx, None, batch_size)["iia"], _base_rate(model, prep, test_idx),
                     test["logit_diff"], losses, settings)  # fmt: skip


def _start(d: int, k: int, init: torch.Tensor | None, seed: int) -> torch.Tensor:
    """The starting [d, k] matrix with unit orthogonal columns: ``init``'s, or a seeded random one."""
    if init is None:
        A = torch.randn(d, k, generator=torch.Generator().manual_seed(seed))
    else:
        A = torch.as_tensor(init).detach().float().clone()
        if A.shape != (d, k) or not torch.isfinite(A).all():
            raise ValueError(f"init must be a finite [d, k] = [{d}, {k}] matrix, got shape {tuple(A.shape)}.")
    # Unit columns: an Adam step of ``lr`` then turns the subspace by about ``lr`` radians whatever d is
    # (as a step on a rotation's skew-symmetric generator does in pyvene).
    return orthonormal(A).contiguous()


def _train(
    model: Model, prep: Any, A: torch.Tensor, train_idx: torch.Tensor, job: ResumableJob, state: Any, lr: float,
    epochs: int, batch_size: int, seed: int, checkpoint_every: int, progress: bool,
) -> list[float]:  # fmt: skip
    """Adam on ``A`` in place over ``epochs`` seeded passes, from the job's ``state`` (None: the start), committed
    to ``job``; the losses."""
    A.requires_grad_(True)
    opt = torch.optim.Adam([A], lr=lr)
    step, losses = 0, list[float]()
    if state is not None:
        with torch.no_grad():
            A.copy_(state["A"])
        opt.load_state_dict(state["opt"])
        step, losses = int(state["step"]), [float(x) for x in state["losses"]]
    steps_per_epoch = math.ceil(len(train_idx) / batch_size)
    total = epochs * steps_per_epoch
    with job.progress(total, step, "DAS", progress, leave=False) as bar:
        while step < total:
            epoch, offset = divmod(step, steps_per_epoch)
            gen = torch.Generator().manual_seed(seed * 1000 + epoch)
            order = train_idx[torch.randperm(len(train_idx), generator=gen)]
            loss, grad, _ = run(model, prep, order[offset * batch_size : (offset + 1) * batch_size], None, A)
            opt.zero_grad()
            A.grad = grad
            opt.step()
            losses.append(loss)
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}")
            if job.due(step, checkpoint_every, total):
                job.commit({"A": A.detach(), "opt": opt.state_dict(), "step": step, "losses": losses})
    return losses


def _orient(model: Model, Q_DK: torch.Tensor, prep: Any, pairs: CounterfactualPairs, idx: torch.Tensor
            ) -> torch.Tensor:  # fmt: skip
    """Flip each column so the sources' mean coordinate along it is above the bases' (k = 1: a source-ward sign)."""
    base = source_values(model, prep.site, [pairs.base[int(i)] for i in idx], prep.positions)
    gap_D = (prep.source_NPD[idx].float() - base.float()).mean((0, 1))
    return Q_DK * torch.where(gap_D @ Q_DK >= 0, 1.0, -1.0)


def _base_rate(model: Model, prep: Any, idx: torch.Tensor) -> float:
    """Share of pairs whose label is already the top token with no intervention (a zero-dimensional swap)."""
    zero = torch.zeros(prep.source_NPD.shape[-1], 1)
    return evaluate(model, prep, idx, zero)["iia"]
