"""What to apply (``core/steering/plans.py``): SAE-latent clamps, and bad input refused before any forward pass."""

from __future__ import annotations

import pytest
import torch
from interplab.core.saes import SAE

from tests.steering.common import S, count_forwards, vector
from tests.tiny import TEXTS


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
