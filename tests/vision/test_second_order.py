"""The second-order lens against brute force: ablate the neuron's write, rerun only the later heads (attention and
norm scales frozen at the clean run's) and read the change in the image embedding."""

from __future__ import annotations

import pytest
import torch

import interplab as ilab
from tests.vision.tiny_vision import images, tiny_clip, tiny_vit


def _frozen_norm(ln: torch.nn.LayerNorm, x: torch.Tensor, stream: torch.Tensor) -> torch.Tensor:
    """The LayerNorm with its mean taken from ``x`` and its scale frozen at ``stream``'s."""
    scale = (stream.var(-1, unbiased=False, keepdim=True) + ln.eps).sqrt()
    return (x - x.mean(-1, keepdim=True)) / scale * ln.weight + ln.bias


def brute_force(hf: torch.nn.Module, layer: int, index: int, pixels: torch.Tensor) -> torch.Tensor:
    """Per later head: the change in the image embedding when the neuron's write is removed from that head's input."""
    vision = hf.vision_model
    blocks = vision.encoder.layers
    seen = []
    handle = blocks[layer].mlp.fc2.register_forward_hook(lambda m, a, o: seen.append(a[0]))
    hf.set_attn_implementation("eager")
    with torch.no_grad():
        out = vision(pixel_values=pixels, output_hidden_states=True, output_attentions=True)
    hf.set_attn_implementation("sdpa")
    handle.remove()
    write = seen[0][..., index : index + 1] * blocks[layer].mlp.fc2.weight[:, index]
    final_cls = out.hidden_states[-1][:, 0]
    heads = vision.config.num_attention_heads
    rows = []
    with torch.no_grad():
        for j in range(layer + 1, len(blocks)):
            attn, x = blocks[j].self_attn, out.hidden_states[j]
            per_head = []
            for h in range(heads):
                keep = torch.zeros(heads * attn.head_dim)
                keep[h * attn.head_dim : (h + 1) * attn.head_dim] = 1

                def cls_out(stream, attn=attn, keep=keep, pattern=out.attentions[j], x=x, ln=blocks[j].layer_norm1):
                    v = attn.v_proj(_frozen_norm(ln, stream, x)).unflatten(-1, (heads, -1))
                    z = torch.einsum("bhqt,bthd->bqhd", pattern, v).flatten(-2)
                    return attn.out_proj(z * keep)[:, 0]

                delta = cls_out(x) - cls_out(x - write)
                post = vision.post_layernorm
                embed = hf.visual_projection(_frozen_norm(post, final_cls, final_cls))
                ablated = hf.visual_projection(_frozen_norm(post, final_cls - delta, final_cls))
                per_head.append(embed - ablated)
            rows.append(torch.stack(per_head, 1))
    return torch.stack(rows, 1)


@pytest.fixture(scope="module")
def clip():
    hf = tiny_clip()
    return hf, ilab.load_model(hf)


@pytest.mark.parametrize("neuron", [(0, 5), (1, 40)])
def test_second_order_matches_brute_force(clip, neuron):
    hf, model = clip
    pixels = images(5)
    so = ilab.vision.second_order(model, neuron, pixels)
    want = brute_force(hf, *neuron, pixels)
    assert so.per_head_NJHE.shape == want.shape == (5, 2 - neuron[0], 4, 24)
    torch.testing.assert_close(so.per_head_NJHE, want, atol=1e-5, rtol=1e-4)
    assert so.layers == list(range(neuron[0] + 1, 3))


def test_rank1_and_sparsity_on_a_planted_effect(clip):
    _, model = clip
    so = ilab.vision.second_order(model, (0, 5), images(8))
    planted = torch.zeros_like(so.per_head_NJHE)
    direction = torch.randn(24)
    planted[:2, 0, 0] = direction * torch.tensor([[3.0], [1.0]])  # two images carry one direction
    so.per_head_NJHE = planted
    so.embedding_norm = 1.0
    assert so.share_significant == 2 / 8
    assert so.top_share(0.25) == pytest.approx(1.0)
    r1 = so.rank1()
    assert r1.explained == pytest.approx(1.0)
    assert torch.cosine_similarity(r1.direction_E, direction, dim=0) == pytest.approx(1.0, abs=1e-5)


def test_sparse_decomposition_recovers_planted_terms():
    torch.manual_seed(0)
    texts = [f"t{i}" for i in range(12)]
    atoms = torch.randn(12, 24)
    unit = atoms / atoms.norm(dim=-1, keepdim=True)
    direction = 2.0 * unit[3] - 1.0 * unit[7]
    dec = ilab.vision.sparse_decomposition(direction, atoms, texts, k=2, center=False)
    assert [t for t, _ in dec.terms] == ["t3", "t7"]
    assert dec.cosine == pytest.approx(1.0)
    assert dec.terms[0][1] > 0 > dec.terms[1][1]


def test_vit_has_no_projection_but_a_lens():
    model = ilab.load_model(tiny_vit())
    so = ilab.vision.second_order(model, (0, 3), images(4))
    assert so.per_head_NJHE.shape == (4, 1, 4, 32)
    assert so.activations_NT.shape == (4, 17)
