"""Every engine operation on a real NDIF server (self-hosted on 127.0.0.1), equal to the local run.

The server process has no interplab; it runs nnsight 0.8.0 (ndif 0.1.2's pin) while this client
runs the project's nnsight 0.8.1. Requests are kept small: the point is that each operation's
traces run there and come back equal, not throughput (``bench/bench_remote.py`` measures that).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import interplab as ilab

pytestmark = [pytest.mark.ndif, pytest.mark.embedded]
S = ilab.steering
TEXTS = ["When Mary and John went to the store, John gave a drink to", "The capital of France is"]
SITE = "blocks.6.hook_resid_post"
TOL = dict(rtol=2e-3, atol=2e-3)  # float32 on another process: sums may run in another order


@pytest.fixture(scope="module")
def remote(ndif_server):
    before = os.environ.get("NDIF_API_KEY")
    os.environ["NDIF_API_KEY"] = ndif_server.api_key
    try:
        yield ilab.load_model(remote=ndif_server.host)
    finally:
        if before is None:
            os.environ.pop("NDIF_API_KEY", None)
        else:
            os.environ["NDIF_API_KEY"] = before


@pytest.fixture(scope="module")
def sae():
    return ilab.load_sae("embedded", layer=6)


def close(a, b, **tol):
    torch.testing.assert_close(torch.as_tensor(np.asarray(a)), torch.as_tensor(np.asarray(b)), **(tol or TOL))


def test_the_embedded_model_is_found_under_the_servers_name(remote, ndif_server, embedded):
    assert remote.remote == ndif_server.host and remote.name == embedded.name
    assert remote.nn.to_model_key() == ndif_server.model_key  # the server's folder, not this client's
    assert next(remote.module.parameters()).device.type == "meta"  # no weights here
    assert remote.sites == embedded.sites and remote.d_model == embedded.d_model


def test_collect_logits_lens_generate(remote, embedded):
    sites = ["blocks.2.hook_resid_pre", "blocks.8.attn.hook_z", SITE]
    a, b = remote.collect(TEXTS, sites), embedded.collect(TEXTS, sites)
    assert torch.equal(a.tokens, b.tokens)
    for site in sites:
        close(a[site], b[site])
    close(remote.logits(TEXTS, positions=[-1, -2]), embedded.logits(TEXTS, positions=[-1, -2]), rtol=1e-3, atol=1e-2)
    close(ilab.logit_lens(remote, TEXTS), ilab.logit_lens(embedded, TEXTS), rtol=1e-3, atol=1e-2)
    assert remote.generate(TEXTS, max_new_tokens=4) == embedded.generate(TEXTS, max_new_tokens=4)


def test_cache(remote, embedded, tmp_path):
    kwargs = dict(n_tokens=240, context_size=32, batch_size=4)
    a = remote.cache(TEXTS * 20, SITE, tmp_path / "remote", **kwargs)
    b = embedded.cache(TEXTS * 20, SITE, tmp_path / "local", **kwargs)
    assert a.n_tokens == b.n_tokens == 240 and torch.equal(a.tokens(), b.tokens())
    close(a.read(), b.read())


def test_evaluate(remote, embedded, sae):
    a, b = ilab.evaluate(sae, remote, TEXTS).to_dict(), ilab.evaluate(sae, embedded, TEXTS).to_dict()
    for key, value in b.items():
        assert a[key] == pytest.approx(value, rel=1e-3, abs=1e-4), key


def test_patching(remote, embedded, sae):
    pairs = ilab.patching.ioi(embedded, n=1)
    a = ilab.patching.grid(remote, pairs, site="resid_pre", positions=[-1])
    b = ilab.patching.grid(embedded, pairs, site="resid_pre", positions=[-1])
    close(a.values, b.values, rtol=1e-3, atol=1e-3)
    a, b = ilab.patching.attribution(remote, pairs), ilab.patching.attribution(embedded, pairs)
    for site in b:
        close(a[site].values, b[site].values, rtol=1e-3, atol=1e-3)
    a = ilab.patching.latents(remote, sae, pairs, top=2, positions=[-1])
    b = ilab.patching.latents(embedded, sae, pairs, top=2, positions=[-1])
    assert a["exact"].rows == b["exact"].rows
    close(a["exact"].values, b["exact"].values, rtol=1e-3, atol=1e-3)


def test_steering_generate_and_clamp(remote, embedded, sae):
    vec = S.SteeringVector(SITE, sae.direction(10))
    steer = [(vec, 20.0), S.clamp(sae, 3, 30.0)]
    a = S.logits(remote, TEXTS, steer)
    close(a, S.logits(embedded, TEXTS, steer), rtol=1e-3, atol=1e-2)
    assert (a - embedded.logits(TEXTS)).abs().max() > 0.1
    assert S.generate(remote, TEXTS[1], steer, max_new_tokens=4) == S.generate(embedded, TEXTS[1], steer,
                                                                               max_new_tokens=4)  # fmt: skip


def test_a_local_folder_and_the_servers_name_are_accepted(ndif, embedded):
    from interplab.core.loading.embedded import embedded_model_dir

    by_folder = ilab.load_model(embedded_model_dir(), remote=ndif.host)  # this client's folder of the model
    by_name = ilab.load_model(ndif.model_name, remote=ndif.host)  # the folder the server loads it from
    for model in (by_folder, by_name):
        assert model.nn.to_model_key() == ndif.model_key
        close(model.logits(TEXTS[1]), embedded.logits(TEXTS[1]), rtol=1e-3, atol=1e-2)
