"""Controls for causal claims: the same intervention with random subspaces, and where the learned one falls.

A learned subspace or direction proves little on its own: a random direction at the same site may move the
answer as much. :func:`random_baseline` repeats a DAS result's interchange intervention with ``n`` random
orthonormal subspaces of the same dimension at the same site and positions, on the same held-out pairs;
:func:`knob_control` adds a direction at ``±scale`` to the knob task's prompts for the learned direction and
``n`` random unit ones. Each returns a :class:`Control`: the learned value, the random values, the learned
value's percentile among them, and :meth:`Control.exceeds` (above the random values' ``q``-th percentile).

Example
-------
>>> das = ilab.das.fit(model, pairs, "blocks.14.hook_resid_post", k=1)
>>> ctrl = ilab.das.random_baseline(model, pairs, das, n=32)
>>> ctrl.percentile, ctrl.exceeds(95), ctrl.chart()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nnsight
import numpy as np
import torch

from ..checks import check_int, check_number
from ..model.trace_ops import read_site, write_site
from ..steering import SteeringVector
from ..views.charts import offline
from .fit import DASResult, split
from .intervene import evaluate, prepare
from .knob import KnobTask
from .pairs import as_pairs, label_ids

if TYPE_CHECKING:
    from ..model.model import Model

METRICS = ("iia", "logit_diff")


def random_subspaces(d: int, k: int, n: int, seed: int = 1) -> torch.Tensor:
    """``n`` random subspaces [n, d, k], each with orthonormal columns (QR of a seeded Gaussian matrix).

    >>> random_subspaces(640, 1, 32).shape
    torch.Size([32, 640, 1])
    """
    d, k, n = check_int("d", d, minimum=1), check_int("k", k, minimum=1), check_int("n", n, minimum=1)
    if k > d:
        raise ValueError(f"k={k} is larger than the width d={d}: a subspace has 1..{d} dimensions.")
    gauss = torch.randn(n, d, k, generator=torch.Generator().manual_seed(seed))
    return torch.linalg.qr(gauss).Q


@dataclass(repr=False)
class Control:
    """A learned object's effect beside the same measure for ``n`` random subspaces or directions."""

    measure: str
    learned: float
    random: np.ndarray
    site: str
    k: int

    @property
    def percentile(self) -> float:
        """Share of random values strictly below the learned one, in percent (a tie does not count)."""
        return float(100 * np.mean(self.random < self.learned))

    def quantile(self, q: float) -> float:
        """The random values' ``q``-th percentile (0..100)."""
        return float(np.percentile(self.random, check_number(q, "q")))

    def exceeds(self, q: float = 95) -> bool:
        """Whether the learned value is above the random values' ``q``-th percentile."""
        return bool(self.learned > self.quantile(q))

    def to_dict(self) -> dict[str, Any]:
        return {"measure": self.measure, "site": self.site, "k": self.k, "learned": self.learned,
                "percentile": self.percentile, "random_p95": self.quantile(95), "random_max": float(self.random.max()),
                "n_random": len(self.random)}  # fmt: skip

    def chart(self) -> Any:
        """Altair: a histogram of the random values and a rule at the learned one."""
        import altair as alt
        import pandas as pd

        hist = alt.Chart(pd.DataFrame({self.measure: self.random})).mark_bar(opacity=0.6).encode(
            x=alt.X(f"{self.measure}:Q", bin=alt.Bin(maxbins=20)), y=alt.Y("count():Q", title="random"))  # fmt: skip
        rule = alt.Chart(pd.DataFrame({"learned": [self.learned]})).mark_rule(color="crimson", size=2).encode(
            x="learned:Q")  # fmt: skip
        title = (f"{self.measure} at {self.site}: learned {self.learned:.3g} is at the {self.percentile:.0f}th "
                 f"percentile of {len(self.random)} random")  # fmt: skip
        return offline((hist + rule).properties(title=title, width=380, height=180))

    def __repr__(self) -> str:
        return (f"Control({self.measure} at {self.site}, k={self.k}: learned {self.learned:.3f}, percentile "
                f"{self.percentile:.0f} of {len(self.random)} random (95th {self.quantile(95):.3f}, "
                f"max {float(self.random.max()):.3f}))")  # fmt: skip


def _check_das(das: Any, steering: bool = False) -> DASResult:
    if not isinstance(das, DASResult):
        what = "a DASResult (ilab.das.fit) or a SteeringVector" if steering else "a DASResult (ilab.das.fit)"
        raise TypeError(f"das must be {what}, got {type(das).__name__}.")
    return das


def random_baseline(model: Model, pairs: Any, das: DASResult, n: int = 32, metric: str = "iia", seed: int = 1,
                    batch_size: int = 32) -> Control:  # fmt: skip
    """``das``'s held-out ``metric`` (``"iia"`` or ``"logit_diff"``) beside ``n`` random ``das.k``-dimensional
    subspaces swapped at the same site and positions on the same held-out pairs (``das.settings``' split).

    >>> random_baseline(model, pairs, das, n=32).exceeds(95)
    """
    das = _check_das(das)
    if metric not in METRICS:
        raise ValueError(f"metric={metric!r} is not one of {METRICS}.")
    n = check_int("n", n, minimum=2)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    pairs = as_pairs(model, pairs)
    if len(pairs) != das.settings.get("n_pairs", len(pairs)):
        raise ValueError(f"pairs has {len(pairs)} pairs but das was fitted on {das.settings['n_pairs']}: give the "
                         f"pairs das was fitted on (its held-out split is reused).")  # fmt: skip
    if metric == "logit_diff" and pairs.base_labels is None:
        raise ValueError("metric='logit_diff' needs pairs with base_labels; use metric='iia'.")
    d = model.site_dim(model.parse_site(das.site).name)
    if das.Q_DK.shape[0] != d:
        raise ValueError(f"das.Q_DK has {das.Q_DK.shape[0]} rows but {das.site} is {d} wide in {model.name!r}.")
    _, test_idx = split(len(pairs), das.settings.get("test_size", 0.25), das.settings.get("seed", 0))
    prep = prepare(model, pairs[test_idx], das.site, das.positions, batch_size)
    every = torch.arange(len(test_idx))
    learned = evaluate(model, prep, every, das.Q_DK, batch_size)[metric]
    values = [evaluate(model, prep, every, Q, batch_size)[metric] for Q in random_subspaces(d, das.k, n, seed)]
    return Control(f"held-out {metric}", float(learned), np.array(values), das.site, das.k)


def _knob_batch(model: Model, texts: list[str]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Right-padded tokens of ``texts`` and their lengths."""
    rows = [model.to_tokens(t)["input_ids"][0] for t in texts]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), model.tokenizer.pad_token_id or 0, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for r, row in enumerate(rows):
        ids[r, : len(row)], mask[r, : len(row)] = row, 1
    return {"input_ids": ids, "attention_mask": mask}, mask.sum(1)


def steered_answer_diffs(model: Model, site: str, texts: list[str], add_ND: torch.Tensor, ids_N2: torch.Tensor
                         ) -> torch.Tensor:  # fmt: skip
    """Logit of ``ids_N2[:, 0]`` minus ``ids_N2[:, 1]`` at each text's last token with ``add_ND[i]`` added to
    ``site`` there ([N] float32; one no-grad pass, only the two answers' unembedding rows read)."""
    enc, lengths = _knob_batch(model, texts)
    device = model.device
    last_N = (lengths - 1).to(device)
    arange_N = torch.arange(len(texts), device=device)
    add_ND, ids_N2 = add_ND.to(device), ids_N2.to(device)
    envoy, io = model.envoy(site)
    last, (norm, unembed, cap) = model.block(model.n_layers - 1), model.readout_parts
    inputs = {k: v.to(device) for k, v in enc.items()}
    with torch.no_grad(), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
        x = read_site(envoy, io)
        write_site(envoy, io, x.index_put((arange_N, last_N), x[arange_N, last_N] + add_ND.to(x.dtype)))
        h_ND = norm(read_site(last, "output")[arange_N, last_N]).float()
        logits_N2 = torch.einsum("nd,ncd->nc", h_ND, unembed.weight[ids_N2].float())
        if cap:
            logits_N2 = torch.tanh(logits_N2 / cap) * cap
        out = nnsight.save(logits_N2[:, 0] - logits_N2[:, 1])
        tracer.stop()
    return out.detach().to("cpu")


def knob_effects(model: Model, site: str, task: KnobTask, directions_RD: torch.Tensor, scale: float,
                 batch_size: int = 32) -> np.ndarray:  # fmt: skip
    """Per direction: the mean context-minus-prior logit difference over both intents' prompts at ``+scale``
    minus at ``-scale`` (the direction added at each prompt's last token)."""
    texts = task.prompts("context") + task.prompts("prior")
    answers = label_ids(model, task.answers("context")), label_ids(model, task.answers("prior"))
    ids_T2 = torch.stack(answers, 1).repeat(2, 1)
    rows = [(r, sign, t) for r in range(len(directions_RD)) for sign in (1.0, -1.0) for t in range(len(texts))]
    diffs = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        add_ND = torch.stack([sign * scale * directions_RD[r] for r, sign, _ in chunk]).float()
        diffs.append(steered_answer_diffs(model, site, [texts[t] for *_, t in chunk], add_ND,
                                          ids_T2[[t for *_, t in chunk]]))  # fmt: skip
    per_row = torch.cat(diffs).reshape(len(directions_RD), 2, len(texts)).mean(-1)
    return (per_row[:, 0] - per_row[:, 1]).numpy()


def knob_control(model: Model, das: DASResult | SteeringVector, task: KnobTask, scale: float = 40.0, n: int = 32,
                 seed: int = 1, batch_size: int = 32) -> Control:  # fmt: skip
    """How far a direction moves the knob task's answer (|Δ context - prior logit| between ``±scale``) beside
    ``n`` random unit directions at the same site, measured in the same batches. ``das`` is a k = 1 DAS result or
    a steering vector (its direction made unit: the scale is ``scale`` for every direction).

    >>> knob_control(model, knob, task, scale=40, n=32).exceeds(95)
    >>> knob_control(model, ilab.steering.diff_of_means(model, site, ctx, prior), task).percentile
    """
    if isinstance(das, SteeringVector):
        site_name, direction = das.site, das.direction.float() / das.direction.float().norm().clamp_min(1e-12)
    else:
        site_name, direction = (
            _check_das(das, steering=True).site,
            das.direction,
        )  # k = 1 is checked here, before any forward pass
    if not isinstance(task, KnobTask):
        raise TypeError(f"task must be a KnobTask (ilab.das.knob_task), got {type(task).__name__}.")
    scale = check_number(scale, "scale")
    if scale <= 0:
        raise ValueError(f"scale must be positive (the direction is added at +scale and -scale), got {scale}.")
    n = check_int("n", n, minimum=2)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    site = model.parse_site(site_name).name
    d = model.site_dim(site)
    if direction.shape != (d,):
        raise ValueError(f"The direction has shape {tuple(direction.shape)} but {site} is {d} wide.")
    dirs = torch.cat([direction[None].float(), random_subspaces(d, 1, n, seed)[:, :, 0]])
    effects = np.abs(knob_effects(model, site, task, dirs, scale, batch_size))
    return Control(f"knob effect at ±{scale:g}", float(effects[0]), effects[1:], site, 1)


def random_das(das: DASResult, seed: int = 1) -> DASResult:
    """``das`` with its subspace replaced by a random one of the same size (a control's stand-in; scores unset).

    >>> ilab.das.knob_control(model, random_das(knob), task).exceeds(95)     # expected False
    """
    das = _check_das(das)
    Q = random_subspaces(das.Q_DK.shape[0], das.k, 1, seed)[0]
    nan = float("nan")
    return DASResult(das.site, list(das.positions), Q, nan, nan, das.full_iia, das.base_rate, nan, [],
                     {**das.settings, "random_seed": seed})  # fmt: skip
