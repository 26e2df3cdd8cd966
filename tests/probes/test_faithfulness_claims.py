"""The faithfulness claim cell of nbs/06 fails with a random binding subspace in place of the learned one, on the
embedded model (the same domain probes, the same contexts and injection)."""

from __future__ import annotations

import pytest
import torch
from interplab.core.probes.binding import BindingResult, read_positions
from interplab.core.probes.propositions import DomainProbe, PropositionResult

import interplab as ilab
from tests.das.test_controls import claim_cell

SITE = "blocks.8.hook_resid_post"


@pytest.mark.embedded
def test_notebook_faithfulness_claims_fail_with_a_random_binding(embedded):
    probe_task = ilab.probes.binding_task(embedded, "occupations", n=32, seed=1)
    ent, att, _, _ = read_positions(embedded, probe_task, SITE)
    words = [probe_task.pairs(i) for i in range(len(probe_task))]
    names = DomainProbe.fit(ent.flatten(0, 1), [w for e, _ in words for w in e])
    values = DomainProbe.fit(att.flatten(0, 1), [w for _, a in words for w in a])
    mean = torch.cat([ent, att], 1).flatten(0, 1).mean(0)
    random_u = torch.randn(640, 8, generator=torch.Generator().manual_seed(3))
    stand_in = BindingResult(SITE, random_u, mean, *[float("nan")] * 4)
    props = PropositionResult({}, [], [], {}, (names, values), stand_in)
    ns = {"ilab": ilab, "model": embedded, "props": props}
    with pytest.raises(AssertionError):
        exec(claim_cell("claims-faithfulness"), ns)
    assert ns["faith"].exact < ns["faith"].random_exact + 0.4 or ns["faith"].exact < 0.4
