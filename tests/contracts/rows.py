"""The parts of the bad-input table: a :class:`Row` and the :class:`Ctx` every row calls into.

Each capability keeps its rows in ``tests/<capability>/bad_input.py``: ``ROWS`` (one bad call of one
public function each, with the error it must give) and ``EXEMPT`` (public functions without bad input,
each with its reason). ``tests/contracts/test_bad_input.py`` gathers them all. A row::

    Row("ilab.patching.grid", lambda c: ilab.patching.grid(c.model, c.pairs, site="blocks"), V, "site='blocks'")
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from interplab.core.model.model import Model

import interplab as ilab
from tests.tiny import TEXTS, tiny_model

SITE = "blocks.1.hook_resid_post"
V = ValueError
T = TypeError
I = (IndexError, ValueError)  # noqa: E741  (OutOfRangeError is both)


@dataclass
class Ctx:
    """What the rows call into: tiny models, an SAE, a store, results and widgets, built once."""

    tmp: Path
    model: Model
    sae: Any
    acts: Any
    store: Any
    data: Any
    result: Any
    pairs: Any
    vec: Any
    heatmap: Any
    dashboard: Any


def make_ctx(tmp: Path) -> Ctx:
    """The context of every row, with its files in ``tmp`` (INTERPLAB_CACHE set by the caller)."""
    model = tiny_model("gpt2")
    sae = ilab.SAE.create("topk", d_in=32, d_sae=24, k=4, site=SITE)
    acts = model.collect(TEXTS, SITE)
    store = model.cache(TEXTS * 20, SITE, tmp / "store", n_tokens=256, context_size=16)
    data = ilab.feature_data(sae, model, TEXTS, n_top=2, n_quantile=2, context=4, seq_len=8, progress=False)
    pairs = ilab.patching.prompt_pairs(model, ["the cat sat"], ["the dog sat"], ["on"], ["to"])
    result = ilab.patching.grid(model, pairs, site="resid_pre")
    vec = ilab.steering.SteeringVector(SITE, torch.ones(32))
    heatmap = ilab.widgets.FeatureHeatmap(acts, features=[0, 1, 2])
    dashboard = ilab.widgets.FeatureDashboard(data, n_cards=2)
    return Ctx(tmp, model, sae, acts, store, data, result, pairs, vec, heatmap, dashboard)


@dataclass
class Row:
    """One bad call of one public function and the error it must give."""

    target: str  # the public name it covers
    call: Callable[[Ctx], Any]
    exc: type[BaseException] | tuple[type[BaseException], ...]
    match: str  # a regex the message must contain: the bad value, the valid choices


def before_work(call: Callable[[Ctx], Any]) -> Callable[[Ctx], Any]:
    """``call`` with every forward pass of the context's model failing: the row's refusal must come first."""
    from tests.tiny import no_forward

    def refused_first(c: Ctx) -> Any:
        with no_forward(c.model):
            return call(c)

    return refused_first


def a_file(tmp: Path) -> Path:
    """An existing file where a call wants a folder."""
    file = tmp / "a-file"
    file.write_text("not a folder")
    return file
