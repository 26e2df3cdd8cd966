"""Patching grids over image patches (``core/patching/images.py``): every cell against a brute-force patch made with
forward hooks on the Hugging Face modules, one cell at a time; a whole layer patched recovers the clean run; the
zero-shot metric against CLIP's own similarities."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from interplab.core.patching.images import collect_images, patched_embeddings

import interplab as ilab
from tests.vision.tiny_vision import images, tiny_clip, tiny_vit

BUILDERS = {"clip": tiny_clip, "vit": tiny_vit}
Edit = Callable[[torch.Tensor], torch.Tensor]


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def model(request):
    return ilab.load_model(BUILDERS[request.param]())


def _at(root: Any, path: str) -> Any:
    for part in filter(None, path.split(".")):
        root = root[int(part)] if part.isdigit() else getattr(root, part)
    return root


def _module(model: Any, kind: str, layer: int) -> torch.nn.Module:
    """The Hugging Face module whose input (resid_pre, heads) or output (the rest) is the site."""
    block = _at(model.hf, model.parts.layers)[layer]
    return {"resid_pre": block, "resid_post": block, "attn_out": _at(block, model.parts.attn), "mlp_out": block.mlp,
            "heads": _at(block, model.parts.o_proj)}[kind]  # fmt: skip


def _run(model: Any, pixels: torch.Tensor, kind: str, layer: int, edit: Edit | None = None):
    """The image embedding [1, E] and the site's value at ``layer``, edited by ``edit`` when given (torch hooks)."""
    module, seen = _module(model, kind, layer), {}

    def change(x: torch.Tensor) -> torch.Tensor:
        seen["x"] = edit(x.clone()) if edit is not None else x
        return seen["x"]

    if kind in ("resid_pre", "heads"):

        def pre(mod, args, kwargs):
            if args:
                return (change(args[0]), *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": change(kwargs["hidden_states"])}

        handle = module.register_forward_pre_hook(pre, with_kwargs=True)
    else:

        def post(mod, args, out):
            return (change(out[0]), *out[1:]) if isinstance(out, tuple) else change(out)

        handle = module.register_forward_hook(post)
    try:
        with torch.no_grad():
            emb = model.module(pixels)
    finally:
        handle.remove()
    return emb.float(), seen["x"]


def _cos_metric(emb, clean, corrupt) -> float:
    cos = torch.nn.functional.cosine_similarity
    return float(cos(emb, clean, dim=-1) - cos(emb, corrupt, dim=-1))


def _brute_force(model, clean, corrupt, kind: str, direction: str) -> np.ndarray:
    """The grid one patched forward at a time, hooks on the HF modules, averaged over the pairs."""
    cols = model.n_heads if kind == "heads" else len(model.to_str_tokens(None))
    out = np.zeros((model.n_layers, cols))
    for i in range(len(clean)):
        c, x = clean[i : i + 1], corrupt[i : i + 1]
        base, src = (x, c) if direction == "denoise" else (c, x)
        e_clean, e_corrupt = _run(model, c, kind, 0)[0], _run(model, x, kind, 0)[0]
        for layer in range(model.n_layers):
            src_value = _run(model, src, kind, layer)[1]
            for col in range(cols):

                def patch(v, col=col, src_value=src_value):
                    if kind == "heads":
                        sl = slice(col * model.d_head, (col + 1) * model.d_head)
                        v[..., sl] = src_value[..., sl]
                    else:
                        v[:, col] = src_value[:, col]
                    return v

                emb = _run(model, base, kind, layer, patch)[0]
                out[layer, col] += _cos_metric(emb, e_clean, e_corrupt) / len(clean)
    return out


@pytest.mark.parametrize(("kind", "direction"), [("resid_pre", "denoise"), ("attn_out", "denoise"),
                                                 ("mlp_out", "noise"), ("heads", "denoise")])  # fmt: skip
def test_grid_equals_one_hooked_patch_at_a_time(model, kind, direction):
    clean, corrupt = images(2, seed=3), images(2, seed=4)
    r = ilab.patching.grid(model, clean, corrupt, site=kind, direction=direction, progress=False)
    want = _brute_force(model, clean, corrupt, kind, direction)
    assert r.values.shape == want.shape == (model.n_layers, model.n_heads if kind == "heads" else 17)
    np.testing.assert_allclose(r.values, want, atol=2e-5)
    assert r.tokens[:2] == ["CLS", "p0"] and r.n_pairs == 2 and r.metric.startswith("embedding cosine")
    assert np.isclose(r.clean_baseline, -r.corrupt_baseline) and r.clean_baseline > 0


@pytest.mark.parametrize("kind", ["resid_pre", "resid_post"])
def test_patching_every_position_of_a_layer_recovers_the_clean_run(model, kind):
    """The residual stream at one layer carries everything: written whole from the clean image, the run is clean."""
    clean, corrupt = images(1, seed=5), images(1, seed=6)
    clean_acts, clean_emb = collect_images(model, clean, kind, batch=8)
    corrupt_acts, corrupt_emb = collect_images(model, corrupt, kind, batch=8)
    metric = ilab.patching.embedding_cosine()
    clean_value = float(metric(clean_emb, clean_emb[0], corrupt_emb[0])[0])
    for layer in range(model.n_layers):
        whole = clean_acts[0, layer][None]
        emb = patched_embeddings(model, corrupt, kind, layer, whole, corrupt_acts[0, layer], corrupt_emb[0], 8)
        torch.testing.assert_close(emb, clean_emb, atol=1e-5, rtol=1e-5)
        assert float(metric(emb, clean_emb[0], corrupt_emb[0])[0]) == pytest.approx(clean_value, abs=1e-5)


def test_only_the_class_token_reaches_the_embedding_after_the_last_block(model):
    r = ilab.patching.grid(model, images(1, seed=7), images(1, seed=8), site="resid_post", progress=False)
    last = r.normalized[-1]
    assert last[0] == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_allclose(last[1:], 0.0, atol=1e-5)


def test_zero_shot_metric_is_clips_logit_difference():
    model = ilab.load_model(tiny_clip())
    text_KE = torch.randn(3, 24, generator=torch.Generator().manual_seed(0))
    clean, corrupt = images(1, seed=9), images(1, seed=10)
    r = ilab.patching.grid(model, clean, corrupt, ilab.patching.zero_shot(text_KE, 2, 0), site="resid_pre",
                           positions=[0, 5], progress=False)  # fmt: skip
    unit = torch.nn.functional.normalize
    logits = 100 * unit(model.image_embeddings(torch.cat([clean, corrupt])), dim=-1) @ unit(text_KE, dim=-1).T
    assert r.clean_baseline == pytest.approx(float(logits[0, 2] - logits[0, 0]), abs=1e-3)
    assert r.corrupt_baseline == pytest.approx(float(logits[1, 2] - logits[1, 0]), abs=1e-3)
    assert r.values.shape == (model.n_layers, 2) and r.positions == [0, 5]
    assert r.metric == "zero-shot logit 2 - 0"
