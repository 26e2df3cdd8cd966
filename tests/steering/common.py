"""What the steering tests share: a random vector at a site, a counter of forward passes."""

from __future__ import annotations

import torch

import interplab as ilab

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
