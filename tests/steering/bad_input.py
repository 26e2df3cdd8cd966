"""Bad inputs of ilab.steering: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import interplab as ilab
from tests.contracts.rows import SITE, Ctx, I, Row, T, V, before_work
from tests.tiny import TEXTS


def _layer_sweep(c: Ctx, **kw: Any) -> Any:
    return ilab.steering.layer_sweep(c.model, ["a"], ["b"], len, ["c"], ["d"], **kw)


ROWS: list[Row] = [
    Row(
        "ilab.steering.typical_norm", lambda c: ilab.steering.typical_norm(c.model, "resid"), V, "Unknown site 'resid'"
    ),
    Row(
        "ilab.steering.scaled_range",
        lambda c: ilab.steering.scaled_range(0.0, 3.0),
        V,
        "site_norm and vector_norm must be > 0, got 0.0 and 3.0",
    ),
    Row(
        "ilab.steering.scaled_range",
        lambda c: ilab.steering.scaled_range(1.0, float("nan")),
        V,
        "vector_norm must be finite",
    ),
    Row(
        "ilab.steering.SteeringVector",
        lambda c: ilab.steering.SteeringVector(SITE, torch.tensor([1.0, np.nan])),
        V,
        "holds 1 NaN/inf values",
    ),
    Row(
        "ilab.steering.SteeringVector",
        lambda c: ilab.steering.SteeringVector("", torch.ones(2)),
        T,
        "site must be a site name",
    ),
    Row(
        "ilab.steering.SteeringVector.load",
        lambda c: ilab.steering.SteeringVector.load(c.tmp / "nope.safetensors"),
        FileNotFoundError,
        "No steering vector file at",
    ),
    Row(
        "ilab.steering.SteeringVector.save",
        lambda c: ilab.steering.SteeringVector(SITE, torch.ones(2), provenance={"f": object()}).save(
            c.tmp / "v.safetensors"
        ),
        T,
        "provenance must hold JSON values only",
    ),
    Row("ilab.steering.SteeringVector.at", lambda c: c.vec.at(None), T, "site must be a site name .*None"),
    Row(
        "ilab.steering.SteeringVector.check_fits",
        lambda c: ilab.steering.SteeringVector(SITE, torch.ones(5)).check_fits(c.model),
        V,
        "has d=5 .*has width 32",
    ),
    Row(
        "ilab.steering.Clamp",
        lambda c: ilab.steering.plan(c.model, ilab.steering.Clamp(c.sae, 1, 1.0, "x")),
        V,
        "reads 'x', which .* does not have",
    ),
    Row("ilab.steering.clamp", lambda c: ilab.steering.clamp(c.sae, 99, 1.0), I, "Latent 99 is out of range"),
    Row("ilab.steering.clamp", lambda c: ilab.steering.clamp(c.sae, 1, float("inf")), V, "clamp value must be finite"),
    Row("ilab.steering.plan", lambda c: ilab.steering.plan(c.model, "vec"), T, "steering is a SteeringVector"),
    Row(
        "ilab.steering.SitePlan",
        lambda c: ilab.steering.plan(c.model, [ilab.steering.SitePlan(None, None, "x")]),
        T,
        r"steering\[0\] is a SitePlan; expected a SteeringVector",
    ),
    Row("ilab.steering.logits", lambda c: ilab.steering.logits(c.model, TEXTS, c.vec, start=-99), V, "start=-99"),
    Row(
        "ilab.steering.generate",
        lambda c: ilab.steering.generate(c.model, TEXTS, c.vec, backend="gpu"),
        V,
        r"backend='gpu' is not one of",
    ),
    Row(
        "ilab.steering.generate",
        lambda c: ilab.steering.generate(c.model, TEXTS, c.vec, progress=2),
        T,
        r"progress must be True, False or a progress bar \(a tqdm bar\), got int: 2",
    ),
    Row(
        "ilab.steering.layer_sweep",
        lambda c: _layer_sweep(c, site_kind="resid"),
        V,
        r"Unknown site 'resid'\. Did you mean .*short form meaning every layer: embed, resid_pre",
    ),
    Row(
        "ilab.steering.diff_of_means",
        lambda c: ilab.steering.diff_of_means(c.model, "resid_post", ["the"], ["a"]),
        V,
        r"'resid_post' names 2 sites .*this takes one site",
    ),
    Row(
        "ilab.steering.generate_local",
        lambda c: ilab.steering.generate_local(c.model, TEXTS, c.vec, max_new_tokens=-1),
        V,
        "max_new_tokens must be a positive integer, got -1",
    ),
    Row(
        "ilab.steering.stream",
        lambda c: ilab.steering.stream(c.model, "the cat", c.vec, temperature=-1.0),
        V,
        "temperature must be >= 0",
    ),
    Row(
        "ilab.steering.apply", lambda c: ilab.steering.apply(c.model, 3).__enter__(), T, "steering is a SteeringVector"
    ),
    Row(
        "ilab.steering.contrast",
        lambda c: ilab.steering.contrast(c.model, SITE, ["a"], ["b"], method="svd"),
        V,
        "method='svd' is not one of",
    ),
    Row(
        "ilab.steering.diff_of_means",
        lambda c: ilab.steering.diff_of_means(c.model, SITE, ["the"], ["a"], position="last"),
        V,
        "position must be a token index .* or 'mean', got 'last'",
    ),
    Row(
        "ilab.steering.pca_direction",
        lambda c: ilab.steering.pca_direction(c.model, SITE, ["the", "a"], ["cat"]),
        V,
        "Paired differences need as many positive as negative texts: 2 vs 1",
    ),
    Row(
        "ilab.steering.from_probe",
        lambda c: ilab.steering.from_probe(torch.ones(3, 3), SITE),
        V,
        r"probe weight must have shape \[d\]",
    ),
    Row("ilab.steering.from_sae", lambda c: ilab.steering.from_sae(c.sae, 99), I, "Latent 99 is out of range"),
    Row(
        "ilab.steering.sweep",
        lambda c: ilab.steering.sweep(c.model, c.vec, [], lambda s: 0.0, neutral_texts=TEXTS),
        V,
        "scales must be a non-empty list of numbers",
    ),
    Row(
        "ilab.steering.SweepResult",
        lambda c: ilab.steering.sweep(c.model, "vec", [1.0], len, TEXTS),
        T,
        "vector must be a SteeringVector, got str",
    ),
    Row("ilab.steering.layer_sweep", lambda c: _layer_sweep(c, layers=[]), V, "layers is empty"),
    Row("ilab.steering.LayerSweep", lambda c: _layer_sweep(c, method="x"), V, "method='x' is not one of"),
    Row(
        "ilab.steering.generate",
        before_work(lambda c: ilab.steering.generate(c.model, "hi", (c.vec, 1.0), foo_bar=3)),
        T,
        r"generate got unknown keyword arguments \['foo_bar'\]",
    ),
    Row(
        "ilab.steering.diff_of_means",
        before_work(lambda c: ilab.steering.diff_of_means(c.model, SITE, ["a b"], ["c d"], position=100)),
        V,
        "position=100 is outside a text of 3 tokens",
    ),
    Row(
        "ilab.steering.sweep",
        before_work(lambda c: ilab.steering.sweep(c.model, c.vec, [1.0], lambda x: 0.0, TEXTS, TEXTS)),
        V,
        r"scales must hold at least two different numbers to fit a line",
    ),
    Row(
        "ilab.steering.generate",
        lambda c: ilab.steering.generate(c.model, "the \ud800 cat", c.vec, max_new_tokens=2),
        V,
        r"texts\[0\] is not valid Unicode: character 4 is a lone surrogate",
    ),
    Row(
        "ilab.steering.refine",
        lambda c: ilab.steering.refine(c.vec, c.sae, k=0),
        V,
        "k must be an integer in 1..24, got 0",
    ),
    Row(
        "ilab.steering.refine",
        lambda c: ilab.steering.refine(c.vec, "sae"),
        T,
        "sae must be an ilab.SAE .*got str",
    ),
    Row(
        "ilab.steering.refine",
        lambda c: ilab.steering.refine(ilab.steering.SteeringVector(SITE, torch.ones(5)), c.sae),
        V,
        "The vector has d=5, but this SAE's decoder writes d=32",
    ),
    Row(
        "ilab.steering.random_span",
        lambda c: ilab.steering.random_span(c.vec, c.sae, k=3, seed=-1),
        V,
        "seed must be an integer >= 0, got -1",
    ),
    Row(
        "ilab.steering.random_span",
        lambda c: ilab.steering.random_span("vec", c.sae),
        T,
        "vec must be a SteeringVector",
    ),
    Row(
        "ilab.steering.compare",
        before_work(
            lambda c: ilab.steering.compare(c.model, {"raw": c.vec.at("blocks.9.hook_resid_post")}, [0, 1], len, TEXTS)
        ),
        V,
        "blocks.9.hook_resid_post",
    ),
    Row(
        "ilab.steering.compare",
        before_work(lambda c: ilab.steering.compare(c.model, {}, [0, 1], len, TEXTS)),
        V,
        "vectors must be a non-empty dict",
    ),
    Row(
        "ilab.steering.compare",
        before_work(lambda c: ilab.steering.compare(c.model, {"raw": c.vec}, [1, 1], len, TEXTS)),
        V,
        "scales must hold at least two different numbers",
    ),
    Row(
        "ilab.steering.Comparison.more_linear",
        lambda c: ilab.steering.Comparison({}).more_linear("refined", than="raw"),
        KeyError,
        r"No vector named 'refined'; the comparison holds \[\]",
    ),
    Row(
        "ilab.steering.Comparison.as_linear",
        lambda c: ilab.steering.Comparison({}).as_linear("refined", than="raw", tolerance=2),
        V,
        r"tolerance must be in \[0, 1\), got 2",
    ),
]

EXEMPT: dict[str, str] = {
    "ilab.steering.Comparison": "a result built by compare (which has rows)",
}
