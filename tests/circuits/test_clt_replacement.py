"""A cross-layer transcoder that only writes to its own layer is a set of per-layer transcoders: the graph and the
replacement model's quality must be the same by either road (the CLT's cross-layer paths, checked against
circuit-tracer in test_reference_clt.py, then differ only by what later layers receive)."""

from __future__ import annotations

import copy

import pytest
import torch
from interplab.core.circuits import attribute, transcoder_quality
from interplab.core.saes.clt import CrossLayerTranscoder

from tests.circuits.test_attribute import PROMPT, transcoders
from tests.tiny import TEXTS, tiny_model


def clt_of(tcs) -> CrossLayerTranscoder:
    """The per-layer JumpReLU transcoders ``tcs`` written as one CLT (decoders to later layers zero)."""
    d, n = tcs[0].d_in, len(tcs)
    clt = CrossLayerTranscoder(n, d, tcs[0].d_sae, "jumprelu", skip=True)
    with torch.no_grad():
        for layer, tc in enumerate(tcs):
            p = tc.trace_tensors()
            clt.W_enc[layer].copy_(p["W_enc"])
            clt.b_enc[layer].copy_(p["b_enc"] - p["b_in"] @ p["W_enc"])
            clt.set_threshold(torch.stack([t.threshold for t in tcs]))
            clt.W_dec[layer][:, 0].copy_(tc.W_dec)
            clt.b_dec[layer].copy_(tc.b_dec)
            clt.W_skip[layer].copy_(tc.W_skip if tc.cfg.skip else torch.zeros(d, d))
    return clt.eval()


@pytest.fixture(scope="module")
def setup():
    model = tiny_model("gemma3")
    tcs = transcoders(model.d_model)
    return model, tcs, clt_of(tcs)


def test_a_clt_of_per_layer_transcoders_gives_their_graph(setup):
    model, tcs, clt = setup
    ours = attribute(model, clt, PROMPT, batch_size=16, progress=False)
    theirs = attribute(model, tcs, PROMPT, batch_size=16, progress=False)
    assert torch.equal(ours.features, theirs.features) and ours.n_features > 20
    scale = float(theirs.adjacency.abs().max())
    torch.testing.assert_close(ours.adjacency, theirs.adjacency, atol=1e-5 * scale, rtol=0)
    assert ours.transcoders == [clt.fingerprint()]


def test_a_clt_of_per_layer_transcoders_gives_their_quality(setup):
    model, tcs, clt = setup
    ours = transcoder_quality(model, clt, TEXTS[:3], progress=False)
    theirs = transcoder_quality(model, tcs, TEXTS[:3], progress=False)
    assert ours["ce_replacement"] == pytest.approx(theirs["ce_replacement"], rel=1e-4)
    assert ours["ce_replacement"] != pytest.approx(ours["ce_clean"], rel=1e-3)  # the replacement changes the loss
    for a, b in zip(ours["layers"], theirs["layers"], strict=True):
        assert a == pytest.approx(b, rel=1e-4)
    clt = copy.deepcopy(clt)
    with torch.no_grad():  # writing to a later layer changes the replacement model: the cross-layer paths count
        clt.W_dec[0][:, 1].normal_(generator=torch.Generator().manual_seed(0))
    moved = transcoder_quality(model, clt, TEXTS[:3], progress=False)
    assert moved["layers"][0] == pytest.approx(ours["layers"][0], rel=1e-6)
    assert moved["ce_replacement"] != pytest.approx(ours["ce_replacement"], rel=1e-3)
