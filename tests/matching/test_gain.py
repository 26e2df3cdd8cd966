"""Folding's gain: gap-1 approximation with folded, unfolded and random pairings, and SAE Match's claim.

The claim (Balagansky et al., SAE Match): folding thresholds into the weights improves matching, seen as
a higher explained variance of the next layer's hidden state. ``nbs/07_feature_evolution.ipynb`` measures
it on the embedded model; here it holds on a constructed pair where folding matters, and fails when a
random pairing takes the folded matching's place.
"""

from __future__ import annotations

import numpy as np
import torch
from interplab.core.matching import gain as gain_module
from interplab.core.matching.folding import Match

import interplab as ilab
from tests.matching.test_matching import jumprelu, permuted_rescaled, x_TD


def twins_and_copy() -> tuple[dict[str, torch.Tensor], list[ilab.SAE], np.ndarray]:
    """An SAE whose latents come in near-identical pairs (other thresholds), and a noisy permuted rescaled copy.

    Without folding a twin and its partner look alike; folded, their thresholds tell them apart.
    """
    a = jumprelu(0)
    gen = torch.Generator().manual_seed(100)
    with torch.no_grad():
        first = a.W_dec[::2].clone()
        a.W_dec[1::2] = torch.nn.functional.normalize(first + 0.005 * torch.randn(first.shape, generator=gen), dim=1)
        a.W_enc.copy_(a.W_dec.T * 1.5)
    b, where = permuted_rescaled(a, seed=1)
    with torch.no_grad():
        b.W_dec.add_(0.02 * torch.randn(b.W_dec.shape, generator=torch.Generator().manual_seed(7)))
    x = x_TD()
    return {a.site: x, b.site: b(x).detach()}, [a, b], where


def test_folded_matching_explains_the_most_where_thresholds_tell_twins_apart():
    acts, saes, where = twins_and_copy()
    gain = ilab.matching.folding_gain(acts, saes, n_random=2)
    assert gain.means() == ilab.matching.folding_gain(acts, saes, n_random=2, dense=True).means()
    ev = gain.means()
    assert ev["folded"] > ev["unfolded"] > ev["random"], gain.table
    assert gain.folded_wins()
    folded, raw = ilab.matching.match(*saes, progress=False), ilab.matching.match(*saes, progress=False, folded=False)
    assert (folded.perm == where).mean() > (raw.perm == where).mean()  # without folding, more twins swap
    same = dict(zip(gain.table.pairing, gain.table.same_as_folded, strict=True))
    assert same["folded"] == 1.0 and same["unfolded"] < 1.0 and same["random"] < 0.05
    assert list(gain.wide().columns) == ["folded", "unfolded", "random"] and len(gain.wide()) == 1
    assert gain.chart().to_dict()["mark"]["type"] == "bar"
    assert "folded" in repr(gain)


def test_random_pairing_in_place_of_the_folded_matching_fails_the_claim(monkeypatch):
    acts, saes, _ = twins_and_copy()
    real_match = gain_module.match
    rng = np.random.default_rng(3)

    def random_when_folded(a, b, dense=False, progress=False, folded=True):
        if not folded:
            return real_match(a, b, dense=dense, progress=progress, folded=False)
        return Match(rng.permutation(a.d_sae), np.zeros(a.d_sae, np.float32), a.site, b.site)

    monkeypatch.setattr(gain_module, "match", random_when_folded)
    gain = ilab.matching.folding_gain(acts, saes, n_random=2)
    assert not gain.folded_wins(), gain.table


def test_folding_gain_covers_every_consecutive_pair():
    acts, (a, b), _ = twins_and_copy()
    c, _ = permuted_rescaled(b, seed=4, site="blocks.3.hook_resid_post")
    acts[c.site] = c(x_TD()).detach()
    gain = ilab.matching.folding_gain(acts, [a, b, c], n_random=1)
    assert gain.wide().index.tolist() == [(a.site, b.site), (b.site, c.site)]
    assert len(gain.table) == 6 and gain.n_random == 1
