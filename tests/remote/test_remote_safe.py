"""Every engine operation through nnsight's remote path with interplab absent where the trace runs.

Each test runs an operation twice on the same tiny weights, locally and with ``remote="local"``
inside :func:`tests.remote.isolation.interplab_absent` (interplab cannot be imported while the
trace body is deserialised and run, as on an NDIF server without it), and asserts the results
are equal. A body that names an SAE, a Model or any interplab helper fails there with
``ModuleNotFoundError``; the first test shows the harness does catch that.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from interplab.core.model.trace_ops import read_site, sae_decode, sae_encode

import interplab as ilab
from tests.remote.isolation import interplab_absent
from tests.tiny import TEXTS, tiny_model

S = ilab.steering
CLEAN = "Mary and John went to the store and John gave a drink to"
CORRUPT = "Mary and John went to the store and Mary gave a drink to"
ARCHS = ("standard", "topk", "batchtopk", "jumprelu", "gated")
SITE = "blocks.0.hook_resid_post"


def random_sae(model, arch: str, site: str = SITE, seed: int = 1) -> ilab.SAE:
    extra = {"k": 6} if arch in ("topk", "batchtopk") else {}
    sae = ilab.SAE.create(arch, d_in=model.site_dim(site), d_sae=48, site=site, **extra)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in sae.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
        if arch == "batchtopk":
            sae.topk_threshold.fill_(0.2)
    return sae


@pytest.fixture(params=["gpt2", "gemma3"])
def pair(request):
    """The same tiny weights twice: run locally, and through the remote path (interplab absent)."""
    local = tiny_model(request.param)
    remote = ilab.load_model(local.module, tokenizer=local.tokenizer, remote="local")
    with interplab_absent() as counts:
        yield local, remote
    assert counts["traces"] > 0, "no trace went through the isolated remote path"


def test_the_harness_catches_an_interplab_object_in_a_trace_body():
    model = tiny_model("gpt2", remote="local")
    sae = random_sae(model, "topk")
    envoy, io = model.envoy(SITE)
    inputs = model.to_tokens(TEXTS[0])
    with (
        interplab_absent(),
        pytest.raises(ModuleNotFoundError, match="interplab"),
        torch.no_grad(),
        model.nn.trace(inputs, **model.trace_kwargs),
    ):
        nnsight.save(sae.encode(read_site(envoy, io)))
    # The same math on the SAE's tensors runs, and equals the SAE's own encode.
    p = sae.trace_params()
    with interplab_absent(), torch.no_grad(), model.nn.trace(inputs, **model.trace_kwargs):
        x = nnsight.save(read_site(envoy, io))
        recon = nnsight.save(sae_decode(p, sae_encode(p, read_site(envoy, io))))
    torch.testing.assert_close(recon, sae.decode(sae.encode(x)))


@pytest.mark.parametrize("arch", ARCHS)
def test_trace_params_encode_like_the_sae(arch):
    model = tiny_model("gpt2")
    sae = random_sae(model, arch)
    x = torch.randn(3, 5, model.d_model)
    p = sae.trace_params()
    acts = sae_encode(p, x)
    assert torch.equal(acts, sae.encode(x))
    assert int((acts != 0).sum()) > 0
    torch.testing.assert_close(sae_decode(p, acts), sae.decode(acts))
    small = sae.trace_params([7, 2])  # what a clamp of latents 7 and 2 sends: no decoder, their columns if it can
    assert "W_dec" not in small
    cols = [7, 2] if sae.per_latent else slice(None)
    assert small["W_enc"].shape[-1] == (2 if sae.per_latent else 48)
    # two columns of W_enc against all of them: another matmul blocking, equal up to float32 rounding
    torch.testing.assert_close(sae_encode(small, x), acts[..., cols], atol=1e-6, rtol=1e-5)


def test_model_operations(pair):
    local, remote = pair
    sites = ["blocks.0.hook_resid_pre", "blocks.1.attn.hook_z", "blocks.1.hook_mlp_out"]
    a, b = local.collect(TEXTS, sites, batch_size=2), remote.collect(TEXTS, sites, batch_size=2)
    for site in sites:
        assert torch.equal(a[site], b[site])
    assert torch.equal(local.logits(TEXTS, positions=[0, -1]), remote.logits(TEXTS, positions=[0, -1]))
    assert torch.equal(ilab.logit_lens(local, TEXTS), ilab.logit_lens(remote, TEXTS))
    assert local.generate(TEXTS[:2], max_new_tokens=3) == remote.generate(TEXTS[:2], max_new_tokens=3)


def test_patchscope(pair):
    local, remote = pair
    target = "cat cat dog dog bird and"
    a = ilab.patchscope(local, CLEAN, target, position=3, placeholder="bird", n_tokens=2)
    b = ilab.patchscope(remote, CLEAN, target, position=3, placeholder="bird", n_tokens=2)
    assert torch.equal(a.logits, b.logits) and (a.generated_ids == b.generated_ids).all()


def test_cache(pair, tmp_path):
    local, remote = pair
    a = local.cache(TEXTS * 4, SITE, tmp_path / "a", n_tokens=60, context_size=8, batch_size=4)
    b = remote.cache(TEXTS * 4, SITE, tmp_path / "b", n_tokens=60, context_size=8, batch_size=4)
    assert torch.equal(a.read(), b.read()) and torch.equal(a.tokens(), b.tokens())


@pytest.mark.parametrize("arch", ["topk", "gated"])
def test_evaluate(pair, arch):
    local, remote = pair
    sae = random_sae(local, arch)
    a, b = ilab.evaluate(sae, local, TEXTS), ilab.evaluate(sae, remote, TEXTS)
    for key, value in a.to_dict().items():
        assert b.to_dict()[key] == pytest.approx(value, rel=1e-6, abs=1e-7), key


def test_patching(pair):
    local, remote = pair
    metric = ilab.metrics.logit_diff(" Mary", " John")
    for site in ("resid_pre", "heads"):
        a = ilab.patching.grid(local, CLEAN, CORRUPT, metric, site=site, positions=[-1, -3])
        b = ilab.patching.grid(remote, CLEAN, CORRUPT, metric, site=site, positions=[-1, -3])
        torch.testing.assert_close(torch.as_tensor(a.values), torch.as_tensor(b.values), rtol=0, atol=1e-5)
    for steps in (1, 2):
        a = ilab.patching.attribution(local, CLEAN, CORRUPT, metric, steps=steps)
        b = ilab.patching.attribution(remote, CLEAN, CORRUPT, metric, steps=steps)
        for site in a:
            torch.testing.assert_close(torch.as_tensor(a[site].values), torch.as_tensor(b[site].values),
                                       rtol=1e-5, atol=1e-5)  # fmt: skip
    sae = random_sae(local, "topk")
    a = ilab.patching.latents(local, sae, CLEAN, CORRUPT, metric, top=4, positions=[-1, -2])
    b = ilab.patching.latents(remote, sae, CLEAN, CORRUPT, metric, top=4, positions=[-1, -2])
    for method in ("attribution", "exact"):
        assert a[method].rows == b[method].rows
        torch.testing.assert_close(torch.as_tensor(a[method].values), torch.as_tensor(b[method].values),
                                   rtol=1e-5, atol=1e-5)  # fmt: skip


@pytest.mark.parametrize("arch", ARCHS)
def test_steering_with_clamps(pair, arch):
    local, remote = pair
    sae = random_sae(local, arch)
    direction = torch.randn(local.d_model, generator=torch.Generator().manual_seed(3))
    vec = S.SteeringVector("blocks.1.hook_resid_pre", direction)
    steer = [(vec, 2.0), S.clamp(sae, 5, 4.0), S.clamp(sae, 7, 0.0)]
    a, b = S.logits(local, TEXTS, steer, positions=None), S.logits(remote, TEXTS, steer, positions=None)
    assert torch.equal(a, b)
    assert (a - local.logits(TEXTS, positions=None)).abs().max() > 1e-3  # the steering did something
    assert S.generate(local, TEXTS[:2], steer, max_new_tokens=3, start=-1) == S.generate(
        remote, TEXTS[:2], steer, max_new_tokens=3, start=-1
    )


def test_feature_scans(pair):
    local, remote = pair
    sae = random_sae(local, "topk")
    a = ilab.feature_data(sae, local, TEXTS * 3, seq_len=8, batch_size=4, n_top=3, n_quantile=2, context=4,
                          progress=False)  # fmt: skip
    b = ilab.feature_data(sae, remote, TEXTS * 3, seq_len=8, batch_size=4, n_top=3, n_quantile=2, context=4,
                          progress=False)  # fmt: skip
    for key in ("density", "top_acts", "top_tokens", "hist_counts"):
        assert torch.equal(torch.as_tensor(getattr(a, key)), torch.as_tensor(getattr(b, key))), key
    x, y = ilab.features.active_latents(sae, local, TEXTS[1]), ilab.features.active_latents(sae, remote, TEXTS[1])
    assert torch.equal(torch.as_tensor(x.ids), torch.as_tensor(y.ids))


def test_das_and_probes(pair):
    """DAS training (loss and gradient computed inside the trace), IIA and probes: the same on both sides."""
    local, remote = pair
    base = ["the cat sat on the mat", "the dog ran to the house", "Mary gave a drink to John", "a big red bird sat"]
    source = ["the dog sat on the mat", "the cat ran to", "John gave a drink to Mary", "a small blue bird sat"]
    pairs = ilab.das.counterfactual_pairs(local, base, source, ["mat", "house", "Mary", "tree"], ["on"] * 4)
    kw = dict(k=2, epochs=2, lr=0.05, batch_size=2, test_size=0.25, progress=False)
    a, b = ilab.das.fit(local, pairs, SITE, **kw), ilab.das.fit(remote, pairs, SITE, **kw)
    torch.testing.assert_close(a.Q_DK, b.Q_DK, rtol=1e-5, atol=1e-5)
    assert a.losses == pytest.approx(b.losses, rel=1e-5) and a.iia == b.iia and a.full_iia == b.full_iia
    labels = [i % 2 for i in range(len(TEXTS) * 2)]
    p, q = (ilab.probes.train(m, TEXTS * 2, labels, test_size=0.34, cv=0, progress=False) for m in (local, remote))
    assert p.accuracy == q.accuracy


def test_learned_positions_and_controls(pair):
    """The position selector's training, the random-subspace baseline and the knob control's steered runs."""
    local, remote = pair
    base = ["the cat sat on the mat", "the dog ran to the house", "Mary gave a drink to John", "a big red bird sat"]
    source = ["the dog sat on the mat", "the cat ran to the tree", "John gave a drink to Mary", "a small blue bird ran"]
    pairs = ilab.das.counterfactual_pairs(local, base, source, ["mat", "house", "Mary", "tree"], ["on"] * 4)
    pairs = pairs[[i for i, b in enumerate(base) if len(local.to_tokens(b)["input_ids"][0]) == 7]]
    kw = dict(k=2, epochs=2, lr=0.05, batch_size=2, test_size=0.5, positions="learned", progress=False)
    a, b = ilab.das.fit(local, pairs, SITE, **kw), ilab.das.fit(remote, pairs, SITE, **kw)
    torch.testing.assert_close(a.Q_DK, b.Q_DK, rtol=1e-5, atol=1e-5)
    assert a.selector == pytest.approx(b.selector, rel=1e-4, abs=1e-6) and a.positions == b.positions
    x, y = (ilab.das.random_baseline(m, pairs, a, n=3) for m in (local, remote))
    assert x.learned == y.learned and list(x.random) == list(y.random)
    task = ilab.das.KnobTask([("cat", "mat", "house")])  # answers of the tiny vocabulary
    d = ilab.das.DASResult(SITE, [-1], a.Q_DK[:, :1], 0, 0, 0, 0, 0, [], {})
    p, q = (ilab.das.knob_control(m, d, task, scale=2.0, n=3) for m in (local, remote))
    assert p.learned == pytest.approx(q.learned, rel=1e-5) and p.random == pytest.approx(q.random, rel=1e-5)


def test_circuit_interventions(pair):
    """Turning transcoder features off and the replacement model's edit run the same remotely."""
    from interplab.core.circuits import intervene
    from interplab.core.circuits.quality import replacement_edit

    from tests.circuits.test_attribute import transcoders

    local, remote = pair
    tcs = transcoders(local.d_model, arch="topk")
    changes = {(1, 2, 3): 0.0, **{(0, None, j): 3.0 for j in range(40)}}  # some of them fire
    a = intervene(local, tcs, TEXTS[0], changes, max_new_tokens=3)
    b = intervene(remote, tcs, TEXTS[0], changes, max_new_tokens=3)
    assert torch.equal(a.logits_after, b.logits_after) and a.generated_after == b.generated_after
    assert not torch.equal(a.logits_after, a.logits_before)
    ea, eb = replacement_edit(local, tcs), replacement_edit(remote, tcs)
    assert torch.equal(local.logits(TEXTS[0], edit=ea), remote.logits(TEXTS[0], edit=eb))


def test_eval_suites(pair):
    """The evaluation suites' traces (site reads, surprisal, ablation, attention drift) with interplab absent."""
    local, remote = pair
    sae = random_sae(local, "topk")
    texts = ["the cat sat on the mat", "the dog ran to the house", "a big red bird sat", "the fox ran"]
    outs = []
    for model in (local, remote):
        corr = ilab.evals.correlate(sae, model, TEXTS, "surprisal")
        causal = corr.causal_check(sae, model, TEXTS, n_latents=2, n_random=1)
        probe = ilab.evals.pooled_activations(sae, model, texts, SITE)
        drift = ilab.evals.attention_drift(model, CLEAN, ["John"], steer=(SITE, torch.ones(model.d_model)))
        outs.append((corr.latents.r.to_numpy(), causal.mean_change.to_numpy(), probe[0], drift.after.patterns))
    for a, b in zip(*outs, strict=True):
        assert torch.allclose(torch.as_tensor(a), torch.as_tensor(b), atol=1e-5)
