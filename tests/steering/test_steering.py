"""Steering: vectors, both execution paths, clamps, sweeps, save/load and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.saes import SAE

import interplab as ilab
from tests.tiny import TEXTS, tiny_model

S = ilab.steering
SITES = ("blocks.0.hook_resid_pre", "blocks.1.hook_resid_post", "blocks.0.hook_attn_out", "blocks.1.attn.hook_z",
         "blocks.0.hook_mlp_out")  # fmt: skip


def vector(model, site, seed=0, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    return S.SteeringVector(site, torch.randn(model.site_dim(site), generator=gen), scale)


def count_forwards(model):
    calls = []
    handle = model.module.register_forward_hook(lambda *_: calls.append(1))
    return calls, handle


# ----------------------------------------------------------------- applying
@pytest.mark.parametrize("site", SITES)
def test_scale_zero_is_exactly_unsteered(model, site):
    vec = vector(model, site)
    clean = model.logits(TEXTS, positions=None)
    assert torch.equal(S.logits(model, TEXTS, (vec, 0.0), positions=None), clean)
    steered = S.logits(model, TEXTS, (vec, 3.0), positions=None)
    assert (steered - clean).abs().max() > 1e-3


@pytest.mark.parametrize("site", SITES)
def test_hook_path_matches_nnsight_path(model, site):
    vec = vector(model, site, scale=3.0)
    steered = S.logits(model, TEXTS, vec, positions=None)
    enc = model.to_tokens(TEXTS)
    with torch.no_grad(), S.apply(model, vec):
        hooked = model.softcap(model.module(**enc).logits)
    mask = enc["attention_mask"].bool()
    torch.testing.assert_close(hooked[mask], steered[mask], rtol=0, atol=1e-6)
    # the hooks are gone afterwards
    with torch.no_grad():
        after = model.softcap(model.module(**enc).logits)
    torch.testing.assert_close(after[mask], model.logits(TEXTS, positions=None)[mask], rtol=0, atol=1e-6)


def test_hooks_steer_only_the_thread_that_applied_them(model):
    import threading

    vec = vector(model, "blocks.1.hook_resid_post", scale=3.0)
    enc = model.to_tokens(TEXTS)
    got = {}

    def other_thread():
        with torch.no_grad():
            got["other"] = model.module(**enc).logits

    with torch.no_grad(), S.apply(model, vec):
        mine = model.module(**enc).logits
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
    mask = enc["attention_mask"].bool()
    clean = model.logits(TEXTS, positions=None)
    torch.testing.assert_close(model.softcap(got["other"])[mask], clean[mask], rtol=0, atol=1e-6)
    assert (model.softcap(mine)[mask] - clean[mask]).abs().max() > 1e-3


def test_generation_paths_give_the_same_tokens(model):
    vec = vector(model, "blocks.1.hook_resid_pre", scale=4.0)
    nnsight_text = S.generate(model, TEXTS, vec, max_new_tokens=6)
    hook_text = S.generate_local(model, TEXTS, vec, max_new_tokens=6)
    assert nnsight_text == hook_text
    assert nnsight_text != model.generate(TEXTS, max_new_tokens=6)  # it does steer
    assert S.generate(model, TEXTS, (vec, 0.0), max_new_tokens=6) == model.generate(TEXTS, max_new_tokens=6)
    expected = S.logits(model, TEXTS, vec)
    with S.apply(model, vec):  # Model's own nnsight calls inside apply() are steered too
        assert model.generate(TEXTS, max_new_tokens=6) == nnsight_text
        torch.testing.assert_close(model.logits(TEXTS), expected, rtol=0, atol=1e-5)
    streamed = []
    ids = S.stream(model, TEXTS[0], vec, max_new_tokens=6, on_token=streamed.append)
    assert streamed == ids
    assert model.tokenizer.decode(ids, skip_special_tokens=True) == nnsight_text[0]


def _record_steps(model, run):
    """Block 0's output (before any steering hook) and block 1's input at every forward of ``run()``."""
    block0, block1 = model.module.transformer.h[0], model.module.transformer.h[1]
    outs, ins = [], []
    h0 = block0.register_forward_hook(lambda _m, _i, out: outs.append(out[0].detach().clone()))
    h1 = block1.register_forward_pre_hook(lambda _m, args: ins.append(args[0].detach().clone()))
    try:
        run()
    finally:
        h0.remove()
        h1.remove()
    return outs, ins


def test_steering_reaches_every_generated_token():
    model = tiny_model("gpt2")
    vec = vector(model, "blocks.0.hook_resid_post", scale=5.0)
    # hook path: the recorder on block 0 runs before the steering hook, so block 1 sees exactly +5 * direction
    outs, ins = _record_steps(model, lambda: S.stream(model, TEXTS[0], vec, max_new_tokens=4))
    assert len(outs) == len(ins) == 4  # the prompt, then one forward per further token
    assert ins[0].shape[1] > 1 and all(x.shape[1] == 1 for x in ins[1:])
    for before, after in zip(outs, ins, strict=True):
        torch.testing.assert_close(after - before, (5.0 * vec.direction).expand_as(after), rtol=0, atol=1e-5)
    # nnsight path: block 1 receives the same steered values at every step
    _, ins_nn = _record_steps(model, lambda: S.generate(model, TEXTS[0], vec, max_new_tokens=4))
    assert len(ins_nn) == 4
    for a, b in zip(ins, ins_nn, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_start_limits_steering_to_later_positions(model):
    vec = vector(model, "blocks.0.hook_resid_post", scale=5.0)
    clean = model.logits(TEXTS, positions=[0, 1, -1])
    steered = S.logits(model, TEXTS, vec, positions=[0, 1, -1], start=-1)
    assert torch.equal(steered[:, :2], clean[:, :2])  # before the start: untouched (causal model)
    assert (steered[:, 2] - clean[:, 2]).abs().max() > 1e-3
    from_one = S.logits(model, TEXTS, vec, positions=[0, 1], start=1)
    assert torch.equal(from_one[:, 0], clean[:, 0]) and not torch.equal(from_one[:, 1], clean[:, 1])


def test_several_vectors_at_a_site_add_up(model):
    site = "blocks.1.hook_resid_pre"
    a, b = vector(model, site, 1), vector(model, site, 2)
    both = S.logits(model, TEXTS, [(a, 2.0), (b, -1.0)])
    summed = S.SteeringVector(site, 2.0 * a.direction - b.direction)
    torch.testing.assert_close(both, S.logits(model, TEXTS, summed), rtol=1e-5, atol=1e-5)
    other = vector(model, "blocks.0.hook_mlp_out", 3)  # and at two sites at once (any order given)
    two = S.logits(model, TEXTS, [a * 2.0, other * 1.5])
    assert torch.equal(two, S.logits(model, TEXTS, [other * 1.5, a * 2.0]))


@pytest.mark.parametrize("remote_family", ["gpt2", "gemma3"])
def test_remote_local_path(remote_family):
    local, remote = tiny_model(remote_family), tiny_model(remote_family, remote="local")
    vec = vector(local, "blocks.1.hook_resid_post", scale=3.0)
    sae = SAE.create("topk", d_in=32, d_sae=64, k=4, site="blocks.0.hook_resid_post")
    steer = [vec, S.clamp(sae, 5, 2.0)]
    assert torch.equal(S.logits(remote, TEXTS, steer), S.logits(local, TEXTS, steer))
    assert S.generate(remote, TEXTS, steer, max_new_tokens=4) == S.generate(local, TEXTS, steer, max_new_tokens=4)


# -------------------------------------------------------------------- clamps
def _site_acts(model, site, texts, steering=None):
    """Activations at ``site`` after steering (a recorder hook registered after the steering hooks)."""
    got = []
    from interplab.core.model.sites import resolve, site_module_path

    (parsed,) = model.parse_sites(site)
    path, _ = site_module_path(model.family, parsed)
    enc = model.to_tokens(texts)
    with torch.no_grad(), S.apply(model, steering or []):
        module = resolve(model.module, path)
        handle = module.register_forward_hook(lambda _m, _i, out: got.append(out[0] if isinstance(out, tuple) else out))
        try:
            model.module(**enc)
        finally:
            handle.remove()
    return got[0], enc["attention_mask"].bool()


@pytest.mark.parametrize("arch", ["topk", "batchtopk", "standard", "jumprelu", "gated"])
def test_clamp_to_current_value_changes_nothing(model, arch):
    site = "blocks.0.hook_resid_post"
    kwargs = {"k": 4} if arch in ("topk", "batchtopk") else {}
    sae = SAE.create(arch, d_in=model.d_model, d_sae=48, site=site, **kwargs)
    acts = model.collect(TEXTS[0], sites=[site]).values[site][0]
    with torch.no_grad():
        latents = sae.encode(acts)
    latent = int(latents[-1].argmax())
    current = float(latents[-1, latent])
    clean = model.logits(TEXTS[0])
    same = S.logits(model, TEXTS[0], S.clamp(sae, latent, current), start=-1)
    torch.testing.assert_close(same, clean, rtol=0, atol=1e-4)
    moved = S.logits(model, TEXTS[0], S.clamp(sae, latent, current + 10.0), start=-1)
    assert (moved - clean).abs().max() > 1e-3


def test_clamp_sets_the_latent_and_keeps_the_error(model):
    site = "blocks.0.hook_resid_post"
    sae = SAE.create("topk", d_in=model.d_model, d_sae=48, site=site, k=8)
    x, mask = _site_acts(model, site, TEXTS)
    steered, _ = _site_acts(model, site, TEXTS, S.clamp(sae, 7, 3.5))
    with torch.no_grad():
        lat_x, lat_s = sae.encode(x), sae.encode(steered)
    # the steered activation = decode(latents with 7 set to 3.5) + (x - decode(latents))
    expected_lat = lat_x.clone()
    expected_lat[..., 7] = 3.5
    with torch.no_grad():
        expected = sae.decode(expected_lat) + (x - sae.decode(lat_x))
    torch.testing.assert_close(steered[mask], expected[mask], rtol=1e-4, atol=1e-4)
    assert not torch.allclose(lat_s, lat_x)


# ------------------------------------------------------------------ vectors
def test_diff_of_means_and_pca(model):
    site = "blocks.1.hook_resid_post"
    pos, neg = ["the happy cat", "the happy dog", "a happy bird"], ["the sad cat", "the sad dog", "a sad bird"]
    vec = S.diff_of_means(model, site, pos, neg)
    acts_p = model.collect(pos, sites=[site]).values[site][:, -1]
    acts_n = model.collect(neg, sites=[site]).values[site][:, -1]
    torch.testing.assert_close(vec.direction, acts_p.mean(0) - acts_n.mean(0), rtol=1e-5, atol=1e-6)
    assert vec.provenance["method"] == "diff_of_means" and vec.site == site
    mean_vec = S.diff_of_means(model, site, pos, neg, position="mean")
    assert not torch.equal(mean_vec.direction, vec.direction)
    pca = S.pca_direction(model, site, pos, neg)
    diffs = (acts_p - acts_n).double()
    assert float(diffs.mean(0) @ pca.direction.double()) > 0  # points from negative to positive
    _, _, vh = torch.linalg.svd(diffs, full_matrices=False)
    cos = torch.nn.functional.cosine_similarity(pca.direction.double(), vh[0], dim=0).abs()
    assert cos > 0.9999
    with pytest.raises(ValueError, match="as many positive as negative"):
        S.pca_direction(model, site, pos, neg[:2])


def test_pca_of_identical_differences_is_their_direction():
    model = tiny_model("gpt2")
    site = "blocks.0.hook_resid_pre"  # the embedding: same word swap gives related differences
    vec = S.pca_direction(model, site, ["happy"], ["sad"], position=-1)
    dom = S.diff_of_means(model, site, ["happy"], ["sad"])
    torch.testing.assert_close(vec.direction, dom.direction, rtol=1e-4, atol=1e-5)


def test_from_probe_and_from_sae(model):
    site = "blocks.1.hook_resid_post"
    linear = torch.nn.Linear(model.d_model, 1)
    vec = S.from_probe(linear, site)
    assert torch.allclose(vec.direction.norm(), torch.tensor(1.0)) and vec.provenance["method"] == "probe"
    two_class = np.stack([np.zeros(model.d_model), np.ones(model.d_model)]).astype(np.float32)
    assert torch.allclose(S.from_probe(two_class, site, normalize=False).direction, torch.ones(model.d_model))
    sae = SAE.create("standard", d_in=model.d_model, d_sae=40, site=site)
    lat = S.from_sae(sae, 3, scale=2.0)
    assert torch.equal(lat.direction, sae.W_dec[3].detach()) and lat.site == site and lat.scale == 2.0
    assert lat.provenance["latent"] == 3


def test_save_load_round_trip(tmp_path, model):
    vec = S.diff_of_means(model, "blocks.0.hook_mlp_out", ["the cat"], ["the dog"], scale=2.5)
    path = vec.save(tmp_path / "sub" / "v.safetensors")
    back = S.SteeringVector.load(path)
    assert back == vec and back.direction.dtype == torch.float32
    assert back != vec * 3.0
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["v.safetensors"]  # no temp file left
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(3)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not an interplab steering vector"):
        S.SteeringVector.load(tmp_path / "other.safetensors")
    with pytest.raises(FileNotFoundError):
        S.SteeringVector.load(tmp_path / "missing.safetensors")
    with pytest.raises(TypeError, match="JSON"):
        S.SteeringVector("blocks.0.hook_mlp_out", torch.ones(4), provenance={"f": object()}).save(tmp_path / "b")


# ------------------------------------------------------------------ sweeps
def test_sweep_records_metric_kl_and_loss():
    model = tiny_model("gemma3")
    vec = vector(model, "blocks.1.hook_resid_pre", scale=1.0)
    metric = S.logit_diff({"cat", "dog"}, "bird").on(model)  # a set: the mean logit of its tokens
    res = S.sweep(model, vec, [-2, -1, 0, 1, 2], metric, neutral_texts=TEXTS, prompts=TEXTS[:2])
    zero = list(res.scales).index(0)
    assert res.kl[zero] == 0.0 and res.loss[zero] == pytest.approx(res.baseline_loss, abs=1e-6)
    assert (res.kl[np.arange(5) != zero] > 0).all()
    clean = metric.score(model.logits(TEXTS[:2])[:, -1])
    assert res.metric[zero] == pytest.approx(clean, abs=1e-5)
    assert 0.0 <= res.r2 <= 1.0 and res.metric_name == "logit_diff"
    df = res.to_pandas()
    assert list(df.columns) == ["scale", "logit_diff", "kl", "loss"] and len(df) == 5
    spec = res.chart().to_dict()
    assert "hconcat" in spec
    # a metric on the steering itself (no prompts): it sees each (vector, scale) pair
    res2 = S.sweep(model, vec, [0, 1, 3], lambda steer: steer[1] * 2 + 1, neutral_texts=TEXTS[0])
    assert res2.r2 == pytest.approx(1.0) and res2.slope == pytest.approx(2.0)


def test_layer_sweep(model):
    metric = S.logit_diff("happy", "sad")
    res = S.layer_sweep(model, ["the happy cat"], ["the sad cat"], metric, prompts=["the cat"],
                        neutral_texts=TEXTS[:1], scale=2.0)  # fmt: skip
    assert list(res.layers) == [0, 1] and len(res.effect) == 2 and res.best_layer in (0, 1)
    assert [v.site for v in res.vectors] == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    assert (res.kl >= 0).all() and "layer" in res.to_pandas().columns
    with pytest.raises(ValueError, match="Unknown site"):
        S.layer_sweep(model, ["a"], ["b"], metric, ["the"], ["the"], layers=[5])


# ----------------------------------------------------------------- bad input
def test_bad_input_raises_before_running(model):
    calls, handle = count_forwards(model)
    try:
        wide = S.SteeringVector("blocks.0.hook_resid_post", torch.ones(model.d_model + 1))
        with pytest.raises(ValueError, match=f"d={model.d_model + 1}.*width {model.d_model}"):
            S.logits(model, TEXTS, wide)
        with pytest.raises(ValueError, match=r"Unknown site 'blocks\.7\.hook_resid_post'.*Valid sites"):
            S.generate(model, TEXTS, S.SteeringVector("blocks.7.hook_resid_post", torch.ones(model.d_model)))
        with pytest.raises(ValueError, match="Unknown site"):
            S.logits(model, TEXTS, S.SteeringVector("blocks.0.resid", torch.ones(model.d_model)))
        with pytest.raises(ValueError, match="NaN"):
            S.SteeringVector("blocks.0.hook_resid_post", torch.tensor([1.0, float("nan")] * (model.d_model // 2)))
        vec = vector(model, "blocks.0.hook_resid_post")
        vec.direction[3] = float("nan")  # written in after creation: still caught
        with pytest.raises(ValueError, match="NaN"):
            S.stream(model, TEXTS[0], vec)
        with pytest.raises(ValueError, match=r"scale of steering\[0\] must be finite"):
            S.logits(model, TEXTS, (vector(model, "blocks.0.hook_resid_post"), float("inf")))
        sae = SAE.create("standard", d_in=model.d_model, d_sae=16, site="blocks.0.hook_resid_post")
        with pytest.raises(IndexError, match=r"Latent 16 is out of range.*0\.\.15"):
            S.clamp(sae, 16, 1.0)
        with pytest.raises(IndexError, match="out of range"):
            S.from_sae(sae, -1)
        with pytest.raises(ValueError, match="d_in=8"):
            narrow = SAE.create("standard", d_in=8, d_sae=16, site="blocks.0.hook_resid_post")
            S.logits(model, TEXTS, S.clamp(narrow, 1, 0))
        good = vector(model, "blocks.0.hook_resid_post")
        for run in (S.logits, S.generate, S.generate_local, S.stream):
            with pytest.raises(ValueError, match="empty"):
                run(model, "   ", good)
        with pytest.raises(ValueError, match="empty"):
            S.logits(model, [], good)
        with pytest.raises(TypeError, match="steering is"):
            S.logits(model, TEXTS, "blocks.0.hook_resid_post")
        with pytest.raises(ValueError, match="max_new_tokens"):
            S.generate(model, TEXTS, good, max_new_tokens=0)
        with pytest.raises(ValueError, match="start=-99"):
            S.logits(model, TEXTS, good, start=-99)
        with pytest.raises(ValueError, match="temperature"):
            S.stream(model, TEXTS[0], good, temperature=-1.0)
        with pytest.raises(ValueError, match="'the cat' is 2 tokens, not one"):
            S.logit_diff("the cat", "dog").on(model)
        with pytest.raises(ValueError, match="scales"):
            S.sweep(model, good, [], lambda s: 0.0, neutral_texts=TEXTS)
        assert calls == []  # nothing ran
    finally:
        handle.remove()


# ------------------------------------------------------- the embedded model
@pytest.mark.embedded
def test_known_vector_moves_the_logit_difference(embedded):
    model = embedded
    prompt = "When Mary and John went to the store, John gave a drink to"
    metric = S.logit_diff(" Mary", " John").on(model).score
    clean = metric(model.logits(prompt)[:, -1])
    assert clean > 0  # the model already prefers Mary (about +5)
    # a diff-of-means vector from contexts ending in " Mary" vs " John", at a late layer
    site = "blocks.14.hook_resid_post"
    mary, john = ["I saw Mary", "This is Mary", "We met Mary"], ["I saw John", "This is John", "We met John"]
    vec = S.diff_of_means(model, site, mary, john)
    up = metric(S.logits(model, prompt, vec * 1.0)[:, -1])
    down = metric(S.logits(model, prompt, vec * -1.0)[:, -1])
    assert down < clean < up
    assert torch.equal(S.logits(model, prompt, vec * 0.0), model.logits(prompt))
    # greedy generation: the nnsight and hook paths agree on the real model
    a = S.generate(model, prompt, vec * -2.0, max_new_tokens=4)
    assert a == S.generate_local(model, prompt, vec * -2.0, max_new_tokens=4)
