"""Random-subspace controls: the baseline's maths on tiny models, and the claim cells of nbs/06 and nbs/06b failing
with a random direction in place of the learned one on the embedded model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import interplab as ilab
from tests.das.test_das import SITE, pairs_for
from tests.tiny import no_forward

NBS = Path(__file__).resolve().parents[2] / "nbs"
NOTEBOOKS = (NBS / "06_probes_and_das.ipynb", NBS / "06b_knob_and_dictionaries.ipynb")


def test_random_subspaces_are_orthonormal_and_seeded():
    Q = ilab.das.random_subspaces(16, 3, 5, seed=2)
    assert Q.shape == (5, 16, 3)
    assert torch.allclose(Q.mT @ Q, torch.eye(3).expand(5, 3, 3), atol=1e-5)
    assert torch.equal(Q, ilab.das.random_subspaces(16, 3, 5, seed=2))
    assert not torch.equal(Q, ilab.das.random_subspaces(16, 3, 5, seed=3))


def test_control_percentile_counts_strictly_lower_random_values():
    ctrl = ilab.das.Control("iia", 0.5, np.array([0.0, 0.25, 0.5, 0.75]), SITE, 1)
    assert ctrl.percentile == 50.0  # a tie with 0.5 is not below it
    assert not ctrl.exceeds(95) and ctrl.exceeds(40)
    assert ctrl.to_dict()["random_max"] == 0.75
    assert "percentile 50" in repr(ctrl)
    assert ctrl.chart() is not None


def test_random_baseline_reuses_the_held_out_split(gpt2):
    pairs = pairs_for(gpt2)
    das = ilab.das.fit(gpt2, pairs, SITE, k=2, epochs=1, batch_size=4, test_size=0.5, progress=False)
    ctrl = ilab.das.random_baseline(gpt2, pairs, das, n=4)
    assert ctrl.random.shape == (4,) and ctrl.k == 2 and ctrl.site == das.site
    assert math.isclose(ctrl.learned, das.iia)  # the same held-out pairs as fit's
    full = ilab.das.DASResult(das.site, das.positions, torch.eye(das.Q_DK.shape[0]), 0, 0, 0, 0, 0, [],
                              das.settings)  # fmt: skip
    assert math.isclose(ilab.das.random_baseline(gpt2, pairs, full, n=2).learned, das.full_iia)


def test_random_das_keeps_the_site_and_size(gpt2):
    pairs = pairs_for(gpt2)
    das = ilab.das.fit(gpt2, pairs, SITE, k=1, epochs=1, batch_size=4, progress=False)
    rnd = ilab.das.random_das(das, seed=3)
    assert rnd.site == das.site and rnd.Q_DK.shape == das.Q_DK.shape and rnd.positions == das.positions
    assert abs(float(rnd.direction.norm()) - 1) < 1e-5 and math.isnan(rnd.iia)
    assert not torch.allclose(rnd.Q_DK.abs(), das.Q_DK.abs())


def test_knob_control_refuses_bad_input_before_any_forward(gpt2):
    pairs = pairs_for(gpt2)
    das2 = ilab.das.fit(gpt2, pairs, SITE, k=2, epochs=1, batch_size=4, progress=False)
    task = ilab.das.KnobTask([("Paris", "France", "Spain")])
    with no_forward(gpt2):
        with pytest.raises(ValueError, match="k=2"):
            ilab.das.knob_control(gpt2, das2, task)
        with pytest.raises(ValueError, match="scale must be positive"):
            ilab.das.knob_control(gpt2, _k1(das2), task, -1)
        with pytest.raises(ValueError, match="metric='bits'"):
            ilab.das.random_baseline(gpt2, pairs, das2, metric="bits")
        with pytest.raises(ValueError, match="pairs has 2 pairs but das was fitted on 8"):
            ilab.das.random_baseline(gpt2, pairs[:2], das2)


def _k1(das: ilab.das.DASResult) -> ilab.das.DASResult:
    return ilab.das.DASResult(das.site, das.positions, das.Q_DK[:, :1], 0, 0, 0, 0, 0, [], das.settings)


def claim_cell(tag: str) -> str:
    """The source of the code cell tagged ``tag`` in nbs/06 or nbs/06b."""
    cells = [c for path in NOTEBOOKS for c in json.loads(path.read_text())["cells"]]
    found = [c for c in cells if tag in c.get("metadata", {}).get("tags", [])]
    assert len(found) == 1, f"nbs/06 and 06b have {len(found)} cells tagged {tag!r}"
    return "".join(found[0]["source"])


def stand_in(site: str, d: int, settings: dict, seed: int = 1) -> ilab.das.DASResult:
    """A random direction where the notebook has its learned one (the notebook's fit settings)."""
    nan = float("nan")
    template = ilab.das.DASResult(site, [-1], torch.zeros(d, 1), nan, nan, nan, nan, nan, [], settings)
    return ilab.das.random_das(template, seed)


@pytest.mark.embedded
def test_notebook_das_claims_fail_with_a_random_direction(embedded):
    two_names = ilab.patching.ioi(embedded, n=20, corruption="flip", names=["Mary", "John"],
                                  templates=ilab.patching.IOI_TEMPLATES)  # fmt: skip
    pairs = ilab.das.as_pairs(embedded, two_names)
    pairs = pairs[sorted({base: i for i, base in enumerate(pairs.base)}.values())]
    das = stand_in("blocks.14.hook_resid_post", 640, {"test_size": 0.4, "seed": 0, "n_pairs": len(pairs)})
    ns = {"ilab": ilab, "model": embedded, "pairs": pairs, "das": das}
    with pytest.raises(AssertionError):
        exec(claim_cell("claims-das"), ns)
    assert not ns["das_control"].exceeds(95)


#: The notebook's finetune_intents call (nbs/06b): its shipped job in nbs/jobs/knob_tuning is found at once.
TUNING = {"blocks": 6, "rank": 1, "steps": 20, "lr": 0.01, "batch_items": 8, "test_size": 0.25,
          "snapshots": [4, 6, 8], "path": NBS / "jobs" / "knob_tuning", "progress": False}  # fmt: skip
#: The site where the notebook fits the knob (the last layer before the tuned blocks).
KNOB_SITE = "blocks.10.hook_resid_post"


@pytest.mark.embedded
def test_notebook_knob_claims_fail_with_a_random_direction(embedded):
    task = ilab.das.knob_task(embedded, n=40)
    tuning = ilab.das.finetune_intents(embedded, task, **TUNING)
    pairs = task.pairs()
    knob = stand_in(KNOB_SITE, 640, {"test_size": 0.25, "seed": 0, "n_pairs": len(pairs)})
    ns = {"ilab": ilab, "model": embedded, "task": task, "tuning": tuning, "pairs": pairs, "knob": knob}
    with pytest.raises(AssertionError):
        exec(claim_cell("claims-knob"), ns)
    assert not ns["knob_iia"].exceeds(95)


@pytest.mark.embedded
def test_notebook_transfer_claims_fail_with_a_random_direction(embedded):
    task = ilab.das.knob_task(embedded, n=40)
    tuning = ilab.das.finetune_intents(embedded, task, **TUNING)
    pairs = task.pairs()
    knob = stand_in(KNOB_SITE, 640, {"test_size": 0.25, "seed": 0, "n_pairs": len(pairs)}, seed=2)
    ns = {"ilab": ilab, "model": embedded, "task": task, "tuning": tuning, "pairs": pairs, "knob": knob}
    with pytest.raises(AssertionError):
        exec(claim_cell("claims-transfer"), ns)
    assert not ns["base_iia"].exceeds(95)


@pytest.mark.embedded
def test_notebook_separation_claims_fail_with_a_random_direction(embedded):
    task = ilab.das.knob_task(embedded, n=40)
    tuning = ilab.das.finetune_intents(embedded, task, **TUNING)
    knob = stand_in(KNOB_SITE, 640, {"test_size": 0.25, "seed": 0, "n_pairs": 80}, seed=3)
    ns = {"ilab": ilab, "model": embedded, "task": task, "tuning": tuning, "knob": knob}
    with pytest.raises(AssertionError):
        exec(claim_cell("claims-separation"), ns)
    assert ns["separation"].separation.min() <= ns["separation"].random_separation.max()


def test_knob_control_takes_a_steering_vector_as_its_unit_direction(gpt2):
    task = ilab.das.KnobTask([("cat", "mat", "house"), ("dog", "tree", "store")])  # the tiny vocabulary's words
    direction = ilab.das.random_subspaces(32, 1, 1, seed=5)[0]
    das = ilab.das.DASResult(SITE, [-1], direction, 0, 0, 0, 0, 0, [], {})
    vec = ilab.steering.SteeringVector(SITE, 3 * direction[:, 0])
    a = ilab.das.knob_control(gpt2, das, task, scale=2.0, n=3)
    b = ilab.das.knob_control(gpt2, vec, task, scale=2.0, n=3)
    assert a.learned == pytest.approx(b.learned, rel=1e-5) and np.allclose(a.random, b.random)

    # The effect is the move between -scale and +scale, measured against brute-force steered logits.
    def mean_diff(scale: float) -> float:
        diffs = [task.logit_diffs(gpt2, task.prompts(intent), (vec, scale / 3)) for intent in ("context", "prior")]
        return float(torch.cat(diffs).mean())

    assert a.learned == pytest.approx(abs(mean_diff(2.0) - mean_diff(-2.0)), rel=1e-4, abs=1e-5)
    assert a.random.shape == (3,)
    with pytest.raises(TypeError, match=r"das must be a DASResult \(ilab.das.fit\) or a SteeringVector, got str"):
        ilab.das.knob_control(gpt2, "direction", task)
