"""CLIP and ViT image towers in the engine: sites against Hugging Face's own hidden states, attentions and module
outputs on tiny random configs; image batches through collect and probes."""

from __future__ import annotations

import pytest
import torch

import interplab as ilab
from tests.vision.tiny_vision import IMAGE, PATCH, images, tiny_clip, tiny_vit

BUILDERS = {"clip": tiny_clip, "vit": tiny_vit}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def tower(request):
    hf = BUILDERS[request.param]()
    return request.param, hf, ilab.load_model(hf)


def _vision(name: str, hf: torch.nn.Module) -> torch.nn.Module:
    return hf.vision_model if name == "clip" else hf.vit


def _hooked(module: torch.nn.Module, run, take) -> torch.Tensor:
    seen = []
    handle = module.register_forward_hook(lambda m, args, out: seen.append(take(args, out)))
    try:
        run()
    finally:
        handle.remove()
    return seen[0]


def test_residual_stream_matches_hidden_states(tower):
    name, hf, model = tower
    pixels = images()
    with torch.no_grad():
        hidden = _vision(name, hf)(pixel_values=pixels, output_hidden_states=True).hidden_states
    acts = model.collect(pixels, sites=["resid_pre", "resid_post"])
    n_tokens = (IMAGE // PATCH) ** 2 + 1
    for layer in range(model.n_layers):
        assert acts[f"blocks.{layer}.hook_resid_pre"].shape == (3, n_tokens, 32)
        torch.testing.assert_close(acts[f"blocks.{layer}.hook_resid_pre"], hidden[layer])
        torch.testing.assert_close(acts[f"blocks.{layer}.hook_resid_post"], hidden[layer + 1])
    assert acts.str_tokens[0][:3] == ["CLS", "p0", "p1"] and len(acts.str_tokens[0]) == n_tokens


def test_attention_and_mlp_sites_match_the_modules(tower):
    name, hf, model = tower
    pixels = images()
    block = model.module.get_submodule(model.family.layers)[1]
    attn = block.get_submodule(model.family.attn)
    run = lambda: hf(pixel_values=pixels) if name == "vit" else hf.get_image_features(pixel_values=pixels)  # noqa: E731
    with torch.no_grad():
        attn_out = _hooked(attn, run, lambda a, o: o[0])
        neurons = _hooked(block.mlp.fc2, run, lambda a, o: a[0])
        mlp_out = _hooked(block.mlp, run, lambda a, o: o)
        hidden = _vision(name, hf)(pixel_values=pixels, output_hidden_states=True, output_attentions=True)
    acts = model.collect(pixels, sites=["blocks.1.hook_attn_out", "blocks.1.mlp.hook_post", "blocks.1.hook_mlp_out",
                                        "blocks.1.attn.hook_pattern", "blocks.1.hook_resid_mid"])  # fmt: skip
    torch.testing.assert_close(acts["blocks.1.hook_attn_out"], attn_out)
    torch.testing.assert_close(acts["blocks.1.mlp.hook_post"], neurons)
    torch.testing.assert_close(acts["blocks.1.hook_mlp_out"], mlp_out)
    torch.testing.assert_close(acts["blocks.1.hook_resid_mid"], hidden.hidden_states[1] + attn_out)
    assert model.d_mlp == acts["blocks.1.mlp.hook_post"].shape[-1] == 64


def test_patterns_match_output_attentions():
    hf = tiny_clip()
    model = ilab.load_model(hf)
    pixels = images(2)
    hf.set_attn_implementation("eager")
    with torch.no_grad():
        attentions = hf.vision_model(pixel_values=pixels, output_attentions=True).attentions
    hf.set_attn_implementation("sdpa")
    acts = model.collect(pixels, sites="pattern")
    for layer in range(model.n_layers):
        torch.testing.assert_close(acts[f"blocks.{layer}.attn.hook_pattern"], attentions[layer])


def test_image_embeddings_are_clips_image_features():
    hf = tiny_clip()
    model = ilab.load_model(hf)
    pixels = images()
    with torch.no_grad():
        want = hf.get_image_features(pixel_values=pixels)
    torch.testing.assert_close(model.image_embeddings(pixels), getattr(want, "pooler_output", want))


def test_probe_reads_a_planted_brightness_from_images():
    model = ilab.load_model(tiny_clip())
    pixels = images(24, seed=3)
    labels = [i % 2 for i in range(24)]
    pixels[1::2] += 2.0  # odd images brighter
    result = ilab.probes.train(model, pixels, labels, sites="resid_post", position=0, progress=False, cv=0)
    assert result.accuracy[result.best_site] == 1.0
    shuffled = ilab.probes.train(model, images(24, seed=3), labels, sites="resid_post", position=0, progress=False,
                                 cv=0)  # fmt: skip
    assert max(shuffled.accuracy.values()) < 1.0  # the control: the same images without the planted brightness


def test_single_image_and_patch_names():
    model = ilab.load_model(tiny_vit())
    acts = model.collect(images(1)[0], sites="blocks.0.hook_resid_post")
    assert acts["blocks.0.hook_resid_post"].shape == (1, 17, 32)
    assert model.to_str_tokens(images(1))[-1] == "p15"


def test_a_saved_clip_folder_loads_as_a_vision_model(tmp_path):
    hf = tiny_clip()
    hf.save_pretrained(tmp_path)
    model = ilab.load_model(str(tmp_path))
    assert model.n_layers == 3 and model.sites[1] == "blocks.0.hook_resid_pre"
    torch.testing.assert_close(model.image_embeddings(images()), ilab.load_model(hf).image_embeddings(images()))
