"""SAE architectures and training: every check against an independent computation.

The sparse TopK/BatchTopK training path is compared with plain dense autograd; each encoder
with its formula written out by hand; the JumpReLU straight-through estimator with the
rectangle-kernel gradient of Rajamanoharan et al.; training runs on a real on-disk
ActivationStore holding activations with planted sparse features.
"""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
from pathlib import Path
from typing import Any

import interplab.core.saes.training.trainer as train_mod
import numpy as np
import pytest
import torch
from interplab.core.data.store import ActivationStore
from interplab.core.saes import SAE, BatchTopKSAE, GatedSAE, JumpReLUSAE, StandardSAE, TopKSAE, train_sae
from interplab.core.saes.kernels.sparse import _batch_topk, select_active
from interplab.core.saes.topk import AUX_COEFFICIENT
from interplab.core.saes.training.trainer import train_saes
from interplab.core.storage.atomic import leftover_target
from safetensors.torch import save_file

from tests.faults import FileOps, Killed
from tests.tiny import WORDS, tiny_model

ARCHS = ["standard", "topk", "batchtopk", "jumprelu", "gated"]
CLASSES = {
    "standard": StandardSAE,
    "topk": TopKSAE,
    "batchtopk": BatchTopKSAE,
    "jumprelu": JumpReLUSAE,
    "gated": GatedSAE,
}
SITE_A, SITE_B = "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"
D_A, D_B = 32, 16
N_STORE = 8192
BATCH = 256
RAW_SCALE = 25.0  # far from the training scale E||x|| = sqrt(d), so an unfolded scale shows up


# ------------------------------------------------------------------ helpers
def planted(n: int, d: int, m: int = 64, active: int = 3, seed: int = 100) -> torch.Tensor:
    """``n`` tokens, each a nonnegative combination of ``active`` of ``m`` unit directions, plus an offset.

    The seed must differ from the SAE initialisation seeds (0, 1, ...): with seed 0 the planted
    directions would be exactly the initial decoder rows and training would have nothing to find.
    """
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(m, d, generator=g)
    feats /= feats.norm(dim=1, keepdim=True)
    idx = torch.rand(n, m, generator=g).argsort(1)[:, :active]
    coef = torch.rand(n, active, generator=g) + 0.5
    x = torch.zeros(n, m).scatter_(1, idx, coef) @ feats
    offset = torch.randn(d, generator=g) * 0.3
    return RAW_SCALE * (x + offset)


def write_store(path: Path, data: dict[str, torch.Tensor], shard: int = 2048) -> ActivationStore:
    """A real activation store folder written the way core/store.py writes one (manifest + shards)."""
    path.mkdir(parents=True)
    n = len(next(iter(data.values())))
    shards = []
    for i, start in enumerate(range(0, n, shard)):
        name = f"shard_{i:05d}.safetensors"
        tensors = {k: v[start : start + shard].contiguous() for k, v in data.items()}
        tensors["tokens"] = torch.arange(start, min(n, start + shard))
        save_file(tensors, str(path / name))
        shards.append({"file": name, "n_tokens": len(tensors["tokens"])})
    manifest = {
        "format": "interplab-activations",
        "version": 1,
        "model": "planted",
        "sites": list(data),
        "d": {k: v.shape[1] for k, v in data.items()},
        "dtype": "float32",
        "context_size": 16,
        "skipped_prefix": 1,
        "n_tokens": n,
        "windows_done": 0,
        "shards": shards,
        "complete": True,
    }
    (path / "manifest.json").write_text(json.dumps(manifest))
    return ActivationStore(path)


def fvu(recon: torch.Tensor, x: torch.Tensor) -> float:
    """Fraction of variance unexplained."""
    return float((recon - x).pow(2).sum(-1).mean() / (x - x.mean(0)).pow(2).sum(-1).mean())


def randomize(sae: SAE, seed: int = 0, scale: float = 1.0) -> SAE:
    """Random values in every parameter (non-zero biases), so no term of a formula can hide."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in sae.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return sae


def weights(sae: SAE) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in sae.state_dict().items()}


def assert_same_weights(a: SAE, b: SAE) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key


@pytest.fixture(scope="module")
def x_a() -> torch.Tensor:
    return planted(N_STORE, D_A, seed=100)


@pytest.fixture(scope="module")
def x_b() -> torch.Tensor:
    return planted(N_STORE, D_B, m=32, active=2, seed=101)


@pytest.fixture(scope="module")
def store(tmp_path_factory, x_a) -> ActivationStore:
    return write_store(tmp_path_factory.mktemp("store") / "acts", {SITE_A: x_a})


@pytest.fixture(scope="module")
def store2(tmp_path_factory, x_a, x_b) -> ActivationStore:
    return write_store(tmp_path_factory.mktemp("store2") / "acts", {SITE_A: x_a, SITE_B: x_b})


@pytest.fixture(scope="module")
def gpt2():
    return tiny_model("gpt2")


# ------------------------------------------------ sparse path = dense autograd
def dense_reference(sae: TopKSAE, x: torch.Tensor, batch_topk: bool):
    """Loss and gradients with plain autograd: dense pre-activations, a mask of the selection, relu, dense decode."""
    p = {n: getattr(sae, n).detach().clone().requires_grad_(True) for n in ("W_enc", "b_enc", "W_dec", "b_dec")}
    b_in = p["b_dec"] if sae.cfg.apply_b_dec_to_input else torch.zeros_like(p["b_dec"])
    pre = (x - b_in) @ p["W_enc"] + p["b_enc"]
    k = sae.cfg.k
    mask = torch.zeros_like(pre, dtype=torch.bool)
    if batch_topk:
        mask.view(-1)[pre.detach().flatten().topk(k * len(x)).indices] = True
    else:
        mask.scatter_(1, pre.detach().topk(k, dim=1).indices, True)
    acts = pre.relu() * mask
    recon = acts @ p["W_dec"] + p["b_dec"]
    loss = (recon - x).pow(2).sum(-1).mean()
    loss.backward()
    return loss.detach(), {n: t.grad for n, t in p.items()}, mask, acts.detach()


@pytest.mark.parametrize("case", ["random", "negative", "dominant"])
@pytest.mark.parametrize("apply_b_dec", [True, False])
@pytest.mark.parametrize("arch", ["topk", "batchtopk"])
def test_sparse_training_path_equals_dense_autograd(arch, apply_b_dec, case):
    k, d, m, b = 2, 16, 64, 8
    sae = SAE.create(arch, d_in=d, d_sae=m, k=k, apply_b_dec_to_input=apply_b_dec)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        sae.W_enc.copy_(torch.randn(d, m, generator=g))
        sae.W_dec.copy_(torch.randn(m, d, generator=g))
        sae.b_enc.copy_(torch.randn(m, generator=g) * 0.1)
        sae.b_dec.copy_(torch.randn(d, generator=g))
    x = torch.randn(b, d, generator=g)
    if case == "dominant":
        x[0] *= 100.0  # row 0 holds most of the batch's top entries
    if case == "negative":  # shift so about half the selected pre-activations are negative: relu must zero them
        with torch.no_grad():
            pre = pre_by_hand(sae, x)
            chosen = pre.flatten().topk(k * b).values if arch == "batchtopk" else pre.topk(k, dim=1).values
            sae.b_enc.sub_(float(chosen.median()))

    loss, info = sae.training_loss(x)
    sae.zero_grad(set_to_none=True)
    loss.backward()
    ref_loss, ref_grads, mask, ref_acts = dense_reference(sae, x, arch == "batchtopk")

    scale = float(ref_loss.abs()) + 1.0
    torch.testing.assert_close(loss.detach(), ref_loss, rtol=1e-5, atol=1e-6 * scale)
    for name, ref in ref_grads.items():
        got = getattr(sae, name).grad
        assert got is not None, name
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()) + 1e-7, msg=name)
    if not apply_b_dec:  # b_dec then only enters through the decoder: its gradient is the summed residual
        torch.testing.assert_close(
            ref_grads["b_dec"], 2 * (info["recon"] - x).detach().sum(0) / b, rtol=1e-4, atol=1e-3
        )
    # the reported statistics describe the same selection
    fired_ref = (ref_acts > 0).any(0)
    assert torch.equal(info["fired"], fired_ref)
    assert info["l0"] == pytest.approx(float((ref_acts > 0).sum()) / b)
    assert mask.sum() == k * b
    if case == "negative":
        assert (ref_acts > 0).sum() < mask.sum(), "the case must select some negative pre-activations"
    if arch == "batchtopk" and case == "dominant":
        # row 0 holds far more than k of the batch's top entries
        b_in = sae.b_dec if apply_b_dec else torch.zeros(d)
        _, rows, _ = select_active(x, sae.W_enc, sae.b_enc, b_in, k, True)
        assert int(torch.bincount(rows, minlength=b)[0]) > 4 * k
        assert int(mask[0].sum()) > 4 * k


@pytest.mark.parametrize("case", ["random", "dominant", "ties"])
def test_batch_topk_sampled_cutoff_selects_exactly_the_flat_top_entries(case):
    g = torch.Generator().manual_seed(3)
    pre = torch.randn(1024, 512, generator=g)
    if case == "dominant":
        pre[:40] *= 50.0  # like Gemma's massive-activation tokens: a few rows hold most of the top entries
    if case == "ties":
        pre = pre.round(decimals=1)
    k = 8
    vals, rows, cols = _batch_topk(pre, k)
    assert len(vals) == k * 1024
    assert bool((rows[1:] >= rows[:-1]).all()), "pairs come out in row order"
    torch.testing.assert_close(vals, pre[rows, cols])
    want = pre.flatten().topk(k * 1024).values
    assert torch.equal(vals.sort().values, want.sort().values)
    assert len(set(zip(rows.tolist(), cols.tolist()))) == k * 1024, "no pair twice"


# ------------------------------------------- fused dense steps = plain autograd
def _ref_kernel(u: torch.Tensor) -> torch.Tensor:
    return ((u > -0.5) & (u < 0.5)).to(u.dtype)


class _RefJumpReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, pre: torch.Tensor, log_t: torch.Tensor, bw: float) -> torch.Tensor:  # type: ignore[override]
        t = log_t.exp()
        ctx.save_for_backward(pre, t)
        ctx.bw = bw
        return pre * (pre > t)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        pre, t = ctx.saved_tensors
        g_pre = g * (pre > t)
        g_t = (-(t / ctx.bw) * _ref_kernel((pre - t) / ctx.bw) * g).sum(0)
        return g_pre, g_t * t, None  # chain rule through t = exp(log_t)


class _RefStep(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, pre: torch.Tensor, log_t: torch.Tensor, bw: float) -> torch.Tensor:  # type: ignore[override]
        t = log_t.exp()
        ctx.save_for_backward(pre, t)
        ctx.bw = bw
        return (pre > t).to(pre.dtype)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        pre, t = ctx.saved_tensors
        g_t = (-(1.0 / ctx.bw) * _ref_kernel((pre - t) / ctx.bw) * g).sum(0)
        return None, g_t * t, None


def plain_dense_loss(sae, x: torch.Tensor):
    """The standard / JumpReLU loss written with plain autograd (no fused functions)."""
    b_in = sae.b_dec if sae.cfg.apply_b_dec_to_input else torch.zeros_like(sae.b_dec)
    pre = (x - b_in) @ sae.W_enc + sae.b_enc
    if sae.arch == "standard":
        acts = pre.relu()
        penalty = sae.cfg.l1_coefficient * acts.abs().sum(-1).mean()
    else:
        bw = sae.cfg.bandwidth
        acts = _RefJumpReLU.apply(pre, sae.log_threshold, bw)
        penalty = sae.cfg.l0_coefficient * _RefStep.apply(pre, sae.log_threshold, bw).sum(-1).mean()
    recon = acts @ sae.W_dec + sae.b_dec
    return (recon - x).pow(2).sum(-1).mean() + penalty


@pytest.mark.parametrize("apply_b_dec", [True, False])
@pytest.mark.parametrize("arch", ["standard", "jumprelu"])
def test_fused_dense_training_step_equals_plain_autograd(arch, apply_b_dec):
    d, m, b = 16, 64, 32
    extra = {"l1_coefficient": 0.3} if arch == "standard" else {"l0_coefficient": 0.7, "bandwidth": 0.5}
    sae = SAE.create(arch, d_in=d, d_sae=m, apply_b_dec_to_input=apply_b_dec, **extra)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        sae.W_enc.copy_(torch.randn(d, m, generator=g))
        sae.W_dec.copy_(torch.randn(m, d, generator=g))
        sae.b_enc.copy_(torch.randn(m, generator=g))
        sae.b_dec.copy_(torch.randn(d, generator=g))
        if arch == "jumprelu":
            sae.log_threshold.copy_(torch.rand(m, generator=g).add(0.2).log())
    x = torch.randn(b, d, generator=g) * 0.3
    loss, info = sae.training_loss(x)
    sae.zero_grad(set_to_none=True)
    loss.backward()
    got = {n: p.grad.clone() for n, p in sae.named_parameters()}
    sae.zero_grad(set_to_none=True)
    ref = plain_dense_loss(sae, x)
    ref.backward()
    torch.testing.assert_close(loss.detach(), ref.detach())
    for name, p in sae.named_parameters():
        torch.testing.assert_close(got[name], p.grad, rtol=1e-5, atol=1e-5 * float(p.grad.abs().max()) + 1e-7, msg=name)
    if arch == "jumprelu":
        assert (got["log_threshold"] != 0).sum() > m // 4, "the case must put pre-activations inside the kernel"
    fired = sae.encode(x) > 0
    assert torch.equal(info["fired"], fired.any(0))
    assert info["l0"] == pytest.approx(float(fired.sum()) / b)


# ------------------------------------------------------- encoders by formula
@pytest.mark.parametrize("arch", ARCHS)
def test_shapes_and_class_for_every_arch(arch):
    sae = randomize(SAE.create(arch, d_in=8, d_sae=24, k=3 if "topk" in arch else None), scale=0.5)
    assert type(sae) is CLASSES[arch] and sae.arch == arch
    x2, x3 = torch.randn(5, 8), torch.randn(2, 7, 8)
    assert sae.encode(x2).shape == (5, 24)
    assert sae.encode(x3).shape == (2, 7, 24)
    assert sae.decode(torch.randn(4, 24)).shape == (4, 8)
    assert sae(x3).shape == (2, 7, 8)
    torch.testing.assert_close(sae(x2), sae.encode(x2) @ sae.W_dec + sae.b_dec)
    # a 3-d input gives the same latents as its rows flattened
    torch.testing.assert_close(sae.encode(x3).reshape(-1, 24), sae.encode(x3.reshape(-1, 8)))
    assert (sae.encode(x2) >= 0).all()


def pre_by_hand(sae: SAE, x: torch.Tensor) -> torch.Tensor:
    b_in = sae.b_dec if sae.cfg.apply_b_dec_to_input else 0
    return (x - b_in) @ sae.W_enc + sae.b_enc


@pytest.mark.parametrize("apply_b_dec", [True, False])
def test_standard_is_relu_of_affine(apply_b_dec):
    sae = randomize(SAE.create("standard", d_in=8, d_sae=24, apply_b_dec_to_input=apply_b_dec))
    x = torch.randn(10, 8)
    pre = pre_by_hand(sae, x)
    torch.testing.assert_close(sae.encode(x), pre.clamp_min(0))
    assert (pre < 0).any() and (pre > 0).any()


def test_topk_keeps_exactly_k_nonnegative_per_row():
    k = 4
    sae = randomize(SAE.create("topk", d_in=8, d_sae=32, k=k))
    x = torch.randn(200, 8)
    with torch.no_grad():  # about half the rows then have fewer than k positive pre-activations
        sae.b_enc.sub_(float(pre_by_hand(sae, x).topk(k, dim=-1).values[:, -1].median()))
    acts = sae.encode(x)
    pre = pre_by_hand(sae, x)
    nz = (acts != 0).sum(-1)
    assert (acts >= 0).all() and (nz <= k).all()
    assert (nz == k).any() and (nz < k).any()
    # exactly the k largest pre-activations, relu'd
    top = pre.topk(k, dim=-1)
    want = torch.zeros_like(pre).scatter_(-1, top.indices, top.values.clamp_min(0))
    torch.testing.assert_close(acts, want)
    assert torch.equal(nz, (top.values > 0).sum(-1))


def test_batchtopk_inference_uses_its_threshold():
    sae = randomize(SAE.create("batchtopk", d_in=8, d_sae=32, k=4))
    with torch.no_grad():
        sae.topk_threshold.fill_(0.7)
    x = torch.randn(100, 8)
    pre = pre_by_hand(sae, x)
    acts = sae.encode(x)
    torch.testing.assert_close(acts, pre * (pre > 0.7))
    nz = (acts != 0).sum(-1)
    assert nz.min() != nz.max(), "the number firing varies per token at inference (no per-row top-k)"
    assert torch.equal(sae.threshold, torch.full((32,), 0.7))


def test_batchtopk_threshold_estimate_tracks_smallest_selected_activation():
    sae = randomize(SAE.create("batchtopk", d_in=8, d_sae=32, k=3))
    x1, x2 = torch.randn(16, 8), torch.randn(16, 8)
    assert float(sae.topk_threshold) == 0.0
    sae.training_loss(x1)
    pre = pre_by_hand(sae, x1).detach()
    top = pre.flatten().topk(3 * 16).values
    first = float(top[top > 0].min())
    assert float(sae.topk_threshold) == pytest.approx(first, rel=1e-6)
    sae.training_loss(x2)
    top2 = pre_by_hand(sae, x2).detach().flatten().topk(3 * 16).values
    second = float(top2[top2 > 0].min())
    assert float(sae.topk_threshold) == pytest.approx(first + 0.01 * (second - first), rel=1e-5)


def test_jumprelu_fires_iff_pre_exceeds_threshold():
    sae = SAE.create("jumprelu", d_in=4, d_sae=4, apply_b_dec_to_input=False)
    t = torch.tensor([0.5, 1.0, 1.5, 2.0])
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(4))
        sae.b_enc.zero_()
        sae.set_threshold(t)
    thr = sae.threshold.detach()
    torch.testing.assert_close(thr, t)
    eps = 1e-3
    x = torch.stack([thr, thr + eps, thr - eps, -thr, thr * 3])
    acts = sae.encode(x)
    assert torch.equal(acts[0], torch.zeros(4)), "pre == threshold does not fire"
    torch.testing.assert_close(acts[1], thr + eps)  # the value is pre itself, not pre - threshold
    assert torch.equal(acts[2], torch.zeros(4))
    assert torch.equal(acts[3], torch.zeros(4))
    torch.testing.assert_close(acts[4], thr * 3)
    # and with random weights: pre * (pre > threshold)
    sae2 = randomize(SAE.create("jumprelu", d_in=8, d_sae=24))
    with torch.no_grad():
        sae2.set_threshold(torch.rand(24) + 0.1)
    xr = torch.randn(50, 8)
    pre = pre_by_hand(sae2, xr)
    torch.testing.assert_close(sae2.encode(xr), pre * (pre > sae2.threshold))


@pytest.mark.parametrize("apply_b_dec", [True, False])
def test_gated_is_gate_times_magnitude(apply_b_dec):
    sae = randomize(SAE.create("gated", d_in=8, d_sae=24, apply_b_dec_to_input=apply_b_dec), scale=0.7)
    x = torch.randn(40, 8)
    x_in = x - sae.b_dec if apply_b_dec else x
    gate = (x_in @ sae.W_enc + sae.b_enc) > 0
    magnitude = (x_in @ (sae.W_enc * sae.r_mag.exp()[None, :]) + sae.b_mag).relu()
    acts = sae.encode(x)
    torch.testing.assert_close(acts, gate * magnitude)
    # the gate matters: some latents have a positive magnitude but a closed gate
    assert ((magnitude > 0) & ~gate).any()


def test_direction_is_decoder_row_and_bad_index_names_range():
    sae = randomize(SAE.create("topk", d_in=8, d_sae=16, k=2))
    for i in (0, 7, 15):
        assert torch.equal(sae.direction(i), sae.W_dec[i].detach())
    v = sae.direction(3)
    v.zero_()
    assert sae.W_dec[3].abs().sum() > 0, "direction returns a copy"
    for bad in (16, -1, 100):
        with pytest.raises(IndexError, match=r"0\.\.15"):
            sae.direction(bad)
    for bad in (2.0, "3"):
        with pytest.raises(TypeError, match="latent id is an integer"):
            sae.direction(bad)
    assert torch.equal(sae.direction(np.int64(3)), sae.W_dec[3].detach())


@pytest.mark.parametrize("arch", ARCHS)
def test_d_in_mismatch_names_both_widths(arch):
    sae = SAE.create(arch, d_in=8, d_sae=16, k=2 if "topk" in arch else None, site=SITE_A)
    for call in (sae.encode, sae.forward, sae.training_loss):
        with pytest.raises(ValueError, match=r"d_in=8.*7|7.*d_in=8") as err:
            call(torch.randn(3, 7))
        assert SITE_A in str(err.value)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (("topk", 8, 16), {"k": 17}, r"k of a topk SAE of width=16 must be an integer in 1\.\.16, got 17"),
        (("topk", 8, 16), {"k": 0}, r"k of a topk SAE .* must be .*got 0"),
        (("batchtopk", 8, 16), {}, r"k of a batchtopk SAE .* must be .*None"),
        (("batchtopk", 8, 16), {"k": 2.0}, r"k of a batchtopk SAE .* must be"),
        (("standard", 8, 0), {}, r"width must be a positive integer, got 0"),
        (("standard", 0, 16), {}, r"d_in must be a positive integer, got 0"),
        (("gated", 8, -4), {}, r"width.*-4"),
    ],
)
def test_size_validation(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        SAE.create(*args, **kwargs)


def test_unknown_arch_lists_valid_ones():
    with pytest.raises(ValueError, match="transcoder") as err:
        SAE.create("transcoder", d_in=8, d_sae=16)
    for arch in ARCHS:
        assert repr(arch) in str(err.value)


def test_check_fits(gpt2):
    sae = SAE.create("topk", d_in=32, d_sae=64, k=4, site=SITE_A)
    assert sae.check_fits(gpt2) == SITE_A
    assert sae.check_fits(gpt2, site="blocks.1.hook_mlp_out") == "blocks.1.hook_mlp_out"
    with pytest.raises(ValueError, match=r"blocks\.7\.hook_resid_post.*blocks\.0\.\.1"):
        sae.check_fits(gpt2, site="blocks.7.hook_resid_post")
    no_site = SAE.create("topk", d_in=32, d_sae=64, k=4)
    with pytest.raises(ValueError, match="site="):
        no_site.check_fits(gpt2)
    narrow = SAE.create("topk", d_in=16, d_sae=64, k=4, site=SITE_A)
    with pytest.raises(ValueError, match=r"d_in=16.*width 32"):
        narrow.check_fits(gpt2)


def test_sae_train_is_the_torch_mode_switch_and_train_sae_trains():
    sae = SAE.create("standard", d_in=8, d_sae=16)
    assert sae.train(False) is sae and not sae.training
    assert sae.train() is sae and sae.training
    with pytest.raises(TypeError, match="ActivationStore"):
        train_sae(42, arch="topk", width=16, k=2)


# ------------------------------------------------- JumpReLU straight-through
BW = 0.1


def _jumprelu_identity(l0: float) -> JumpReLUSAE:
    """pre == x: identity encoder, no bias, thresholds 0.5, 1, 1.5, 2; random decoder."""
    sae = SAE.create("jumprelu", d_in=4, d_sae=4, bandwidth=BW, l0_coefficient=l0, apply_b_dec_to_input=False)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(4))
        sae.b_enc.zero_()
        sae.W_dec.copy_(torch.randn(4, 4, generator=g))
        sae.b_dec.copy_(torch.randn(4, generator=g))
        sae.set_threshold(torch.tensor([0.5, 1.0, 1.5, 2.0]))
    return sae


# offsets from each latent's threshold: |offset| < BW/2 is inside the kernel window
OFFSETS = torch.tensor(
    [
        [0.30, 0.04, -0.04, 0.06],
        [-0.2, 0.20, -0.06, 0.0],
        [0.06, -0.3, 0.049, 0.5],
    ]
)
IN_WINDOW = OFFSETS.abs() < BW / 2  # latent 0: never; 1: row 0; 2: rows 0, 2; 3: row 1


def test_jumprelu_threshold_gradient_only_within_half_bandwidth():
    sae = _jumprelu_identity(l0=0.0)
    t = sae.threshold.detach()
    x = t + OFFSETS
    loss, _ = sae.training_loss(x)
    loss.backward()
    g_log_t = sae.log_threshold.grad
    # dLoss/dacts with plain autograd, then the rectangle-kernel estimator by hand:
    # d acts / d t = -(t / bw) K((pre - t) / bw), and d t / d log_t = t.
    acts = (x * (x > t)).requires_grad_(True)
    ref = ((acts @ sae.W_dec.detach() + sae.b_dec.detach()) - x).pow(2).sum(-1).mean()
    (g_acts,) = torch.autograd.grad(ref, acts)
    want = (-(t / BW) * IN_WINDOW * g_acts).sum(0) * t
    torch.testing.assert_close(g_log_t, want)
    assert g_log_t[0] == 0 and (g_log_t[1:] != 0).all()
    # the pre-activation gradient passes only where the latent fires
    assert sae.W_enc.grad is not None
    fired = x > t
    assert torch.equal(sae.b_enc.grad != 0, fired.any(0))


def test_jumprelu_l0_term_pushes_thresholds_up_near_the_threshold():
    sae = _jumprelu_identity(l0=1.0)
    t = sae.threshold.detach().clone()
    x = t + OFFSETS
    before = sae.log_threshold.detach().clone()
    with_l0, _ = sae.training_loss(x)
    sae.cfg.l0_coefficient = 0.0
    without, _ = sae.training_loss(x)
    opt = torch.optim.SGD([sae.log_threshold], lr=0.01)
    opt.zero_grad()
    (with_l0 - without).backward()  # the L0 term alone
    # d/dlog_t of mean_rows sum_j step(pre - t) = -(1 / bw) * (rows in window) / n_rows * t
    want = -(1 / BW) * IN_WINDOW.sum(0) / len(x) * t
    torch.testing.assert_close(sae.log_threshold.grad, want)
    opt.step()
    after = sae.log_threshold.detach()
    near = IN_WINDOW.any(0)
    assert (after[near] > before[near]).all()
    assert torch.equal(after[~near], before[~near])


# ------------------------------------------------------------------- training
def first_batch(store: ActivationStore, site: str = SITE_A, seed: int = 0) -> torch.Tensor:
    return next(store.batches(BATCH, site=site, seed=seed))


def fvu_at_init(trained: SAE, k: int, first: torch.Tensor, x: torch.Tensor) -> float:
    """FVU before training: a TopK SAE of the same shape as training initialises it, on the scaled data."""
    sae = SAE.create("topk", d_in=trained.d_in, d_sae=trained.d_sae, k=k)
    scale = math.sqrt(trained.d_in) / float(first.norm(dim=-1).mean())
    with torch.no_grad():
        sae.b_dec.copy_(first.mean(0) * scale)  # what training starts from
        return fvu(sae(x * scale), x * scale)


def test_train_topk_on_planted_features(store, x_a, monkeypatch):
    norms_seen = []
    original = TopKSAE.training_loss

    def spy(self, x, dead=None):
        norms_seen.append(self.W_dec.detach().norm(dim=1).clone())
        return original(self, x, dead=dead)

    monkeypatch.setattr(TopKSAE, "training_loss", spy)
    k = 3
    x0 = first_batch(store)
    scale = math.sqrt(D_A) / float(x0.norm(dim=-1).mean())
    sae = train_saes(
        store,
        [{"arch": "topk", "width": 64, "k": k, "lr": 1e-2}],
        n_tokens=BATCH * 150,
        batch_size=BATCH,
        progress=False,
    )[0]
    assert type(sae) is TopKSAE and sae.site == SITE_A and sae.d_in == D_A and sae.d_sae == 64
    assert sae.cfg.model_name == "planted" and not sae.training
    before = fvu_at_init(sae, k, x0, x_a)
    with torch.no_grad():
        after = fvu(sae(x_a), x_a)  # RAW activations: the input scale is folded into the weights
        acts = sae.encode(x_a)
    assert before > 0.5 and after < 0.3 and after < before / 2, (before, after)
    l0 = (acts != 0).sum(-1)
    assert l0.max() <= k and float(l0.float().mean()) > k - 0.05
    # decoder rows were unit norm at every step of training...
    assert len(norms_seen) == 150
    for n in norms_seen:
        torch.testing.assert_close(n, torch.ones(64))
    # ...and the folded scale is the one measured on the first batch: rows now have norm 1/scale
    assert sae.cfg.metadata["input_scale"] == pytest.approx(scale, rel=1e-5)
    assert sae.cfg.metadata["training_tokens"] == BATCH * 150
    torch.testing.assert_close(sae.W_dec.detach().norm(dim=1), torch.full((64,), 1 / scale), rtol=1e-4, atol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_returned_sae_reads_raw_activations(store, x_a, monkeypatch, arch):
    """Folding the input scale changes the weights, not the behaviour: sae(x) == unfolded(x * s) / s."""
    import copy

    unfolded = []
    original = SAE.fold_input_scale

    def keep_copy(self, scale):
        unfolded.append((copy.deepcopy(self), scale))
        return original(self, scale)

    monkeypatch.setattr(SAE, "fold_input_scale", keep_copy)
    spec = {"arch": arch, "width": 32, "lr": 1e-2, **({"k": 3} if "topk" in arch else {})}
    sae = train_saes(store, [spec], n_tokens=BATCH * 10, batch_size=BATCH, progress=False)[0]
    ((before, scale),) = unfolded
    assert scale == pytest.approx(math.sqrt(D_A) / float(first_batch(store).norm(dim=-1).mean()), rel=1e-6)
    x = x_a[:512]
    with torch.no_grad():
        acts = sae.encode(x)
        torch.testing.assert_close(acts, before.encode(x * scale), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(sae(x), before(x * scale) / scale, rtol=1e-4, atol=1e-3)
    assert (acts != 0).any() and (acts == 0).any()


def test_train_batchtopk_average_l0_is_k(store, x_a):
    k = 4
    sae = train_sae(
        store, arch="batchtopk", width=64, k=k, lr=1e-2, n_tokens=BATCH * 150, batch_size=BATCH, progress=False
    )
    assert type(sae) is BatchTopKSAE
    with torch.no_grad():
        acts = sae.encode(x_a)
        pre = sae.pre_acts(x_a)
    # inference is the threshold rule, with a threshold on the raw scale
    assert float(sae.topk_threshold) > 0
    torch.testing.assert_close(acts, pre * (pre > sae.topk_threshold))
    l0 = (acts != 0).sum(-1).float()
    assert abs(float(l0.mean()) - k) < 0.4 * k, float(l0.mean())
    assert l0.max() > l0.min(), "BatchTopK lets the count vary per token"
    assert fvu(sae(x_a).detach(), x_a) < 0.3


def test_train_many_two_widths_two_sites(store2, x_a, x_b, monkeypatch):
    specs = [
        {"arch": "topk", "width": 64, "k": 3, "lr": 1e-2, "site": SITE_A},
        {"arch": "topk", "width": 48, "k": 3, "lr": 1e-2, "site": SITE_A},
        {"arch": "batchtopk", "width": 48, "k": 2, "lr": 1e-2, "site": SITE_B},
    ]
    kw = {"n_tokens": BATCH * 100, "batch_size": BATCH, "progress": False}
    saes = train_saes(store2, specs, **kw)
    assert [(s.arch, s.d_sae, s.site, s.d_in) for s in saes] == [
        ("topk", 64, SITE_A, D_A),
        ("topk", 48, SITE_A, D_A),
        ("batchtopk", 48, SITE_B, D_B),
    ]
    for sae, spec, x in zip(saes, specs, [x_a, x_a, x_b], strict=True):
        first = first_batch(store2, spec["site"])
        assert fvu(sae(x).detach(), x) < fvu_at_init(sae, spec["k"], first, x) / 2
        # each site's scale is measured on that site's data
        scale = math.sqrt(sae.d_in) / float(first.norm(dim=-1).mean())
        assert sae.cfg.metadata["input_scale"] == pytest.approx(scale, rel=1e-5)
    # one stream, no interference: each equals its spec trained alone (given the same initialisation seed)
    original = SAE.init_weights
    for i, spec in enumerate(specs):
        monkeypatch.setattr(SAE, "init_weights", lambda self, seed=0, i=i: original(self, i))
        alone = train_saes(store2, [spec], **kw)[0]
        assert_same_weights(saes[i], alone)


def test_train_from_tiny_model(gpt2):
    import random

    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(30)) for _ in range(120)]
    kw = {
        "arch": "topk",
        "width": 64,
        "k": 4,
        "lr": 1e-2,
        "site": SITE_A,
        "corpus": corpus,
        "batch_size": 128,
        "progress": False,
    }
    sae = train_sae(gpt2, n_tokens=128 * 24, **kw)
    one_step = train_sae(gpt2, n_tokens=128, **kw)
    assert type(sae) is TopKSAE and sae.site == SITE_A and sae.d_in == 32 and sae.cfg.model_name == gpt2.name
    assert sae.cfg.metadata["training_tokens"] == 128 * 24
    acts = gpt2.collect(corpus[:4], sites=[SITE_A])
    x = acts[SITE_A][:, 1:][acts.mask[:, 1:]]  # real tokens after BOS, as in training
    assert x.shape == (4 * 30, 32)
    with torch.no_grad():
        assert fvu(sae(x), x) < 0.6 and fvu(sae(x), x) < fvu(one_step(x), x) - 0.1
        assert (sae.encode(x) != 0).sum(-1).max() <= 4
    with pytest.raises(ValueError, match="site="):
        train_saes(gpt2, [{"arch": "topk", "width": 16, "k": 2}], n_tokens=256, batch_size=128)


def test_model_stream_running_out_says_how_large_the_corpus_was(gpt2):
    """Issue 12: "the corpus ran out" now gives the corpus's own size, not only what training used."""
    corpus = ["the cat sat on the mat and the dog ran to the house"] * 5  # 13 tokens + EOS each
    with pytest.raises(ValueError, match=r"The corpus ran out: it holds 70 tokens in 5 documents \(0 windows of 128\)"):
        train_saes(gpt2, [{"arch": "topk", "width": 16, "k": 2}], site=SITE_A, corpus=corpus, n_tokens=256,
                   batch_size=128, progress=False)  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ({"arch": "relu2", "width": 16}, r"relu2.*batchtopk"),
        ({"arch": "topk", "width": 16, "k": 0}, r"k of a topk SAE"),
    ],
)
def test_architecture_and_k_are_checked_before_n_tokens(store, spec, match):
    """Issue 12: n_tokens < batch_size used to hide a wrong architecture or k behind its own error."""
    with pytest.raises(ValueError, match=match):
        train_saes(store, [spec], n_tokens=100, batch_size=BATCH, progress=False)


def test_auxk_term_reconstructs_residual_with_dead_latents():
    sae = randomize(SAE.create("topk", d_in=16, d_sae=64, k=2), seed=5, scale=0.5)
    x = torch.randn(32, 16)
    dead = torch.zeros(64, dtype=torch.bool)
    dead[::2] = True
    loss_plain, info_plain = sae.training_loss(x)
    loss, info = sae.training_loss(x, dead=dead)
    assert info_plain["aux"] == 0 and info["aux"] > 0
    assert float(loss.detach()) == pytest.approx(info["mse"] + AUX_COEFFICIENT * info["aux"], rel=1e-5)
    # AuxK by hand: the top k_aux dead latents reconstruct the main reconstruction's error
    with torch.no_grad():
        recon = info["recon"]
        err = x - recon
        idx = dead.nonzero().flatten()
        pre = pre_by_hand(sae, x)[:, idx]
        top = pre.topk(8, dim=1)  # k_aux = min(d_in // 2, n_dead)
        err_hat = (
            torch.zeros(32, 64).index_copy_(
                1, idx, torch.zeros(32, len(idx)).scatter_(1, top.indices, top.values.relu())
            )
            @ sae.W_dec
        )
        want = (err_hat - err).pow(2).sum(-1).mean() / (err - err.mean(0)).pow(2).sum(-1).mean()
    assert info["aux"] == pytest.approx(float(want), rel=1e-4)
    # dead latents receive encoder gradient only through AuxK
    sae.zero_grad(set_to_none=True)
    loss_plain.backward()
    plain_grad = sae.W_enc.grad.clone()
    sae.zero_grad(set_to_none=True)
    sae.training_loss(x, dead=dead)[0].backward()
    never_selected = ~info_plain["fired"] & dead
    assert never_selected.any()
    assert (plain_grad[:, never_selected] == 0).all()
    assert (sae.W_enc.grad[:, never_selected] != 0).any()


def test_auxk_used_in_training_when_latents_are_dead(store, monkeypatch):
    calls = []
    original = TopKSAE._auxk

    def spy(self, x, recon, dead):
        calls.append(int(dead.sum()))
        return original(self, x, recon, dead)

    monkeypatch.setattr(TopKSAE, "_auxk", spy)
    sae = train_saes(
        store,
        [{"arch": "topk", "width": 128, "k": 1}],
        n_tokens=BATCH * 12,
        batch_size=BATCH,
        dead_tokens=BATCH,
        progress=False,
    )[0]
    assert calls and max(calls) > 0
    assert 0.0 <= sae.cfg.metadata["dead_fraction"] <= 1.0
    calls.clear()
    train_saes(
        store,
        [{"arch": "topk", "width": 128, "k": 1}],
        n_tokens=BATCH * 12,
        batch_size=BATCH,
        dead_tokens=10**9,
        progress=False,
    )
    assert calls == [], "no latent is dead when dead_tokens is never reached"


def test_standard_resamples_dead_latents(store, monkeypatch):
    records = []
    original = train_mod._resample

    def spy(sae, opt, dead, x, recon, seed):
        before_dec = sae.W_dec.detach().clone()
        n = original(sae, opt, dead, x, recon, seed)
        records.append(
            (
                n,
                dead.clone(),
                before_dec,
                sae.W_dec.detach().clone(),
                sae.W_enc.detach().clone(),
                sae.b_enc.detach().clone(),
                opt.state[sae.W_dec]["exp_avg"].clone(),
            )
        )
        return n

    monkeypatch.setattr(train_mod, "_resample", spy)
    train_saes(
        store,
        [{"arch": "standard", "width": 64, "l1_coefficient": 5.0, "lr": 3e-2}],
        n_tokens=BATCH * 30,
        batch_size=BATCH,
        dead_tokens=BATCH,
        resample_every=3,
        progress=False,
    )
    assert records and all(step_n == int(dead.sum()) for step_n, dead, *_ in records)
    resampled = [r for r in records if r[0] > 0]
    assert resampled, "a large L1 penalty kills latents, and they get resampled"
    n, dead, before, after, W_enc, b_enc, exp_avg = resampled[0]
    assert not torch.allclose(after[dead], before[dead])
    assert torch.equal(after[~dead], before[~dead])
    torch.testing.assert_close(after[dead].norm(dim=1), torch.ones(n))
    cos = torch.nn.functional.cosine_similarity(W_enc[:, dead].T, after[dead], dim=1)
    torch.testing.assert_close(cos, torch.ones(n))
    assert (b_enc[dead] == 0).all()
    assert (exp_avg[dead] == 0).all()


# -------------------------------------------------------------------- resume
RESUME_SPECS = [
    {"arch": "topk", "width": 32, "k": 3, "lr": 3e-3},
    {"arch": "batchtopk", "width": 48, "k": 2, "lr": 3e-3},
    {"arch": "jumprelu", "width": 32, "lr": 3e-3, "l0_coefficient": 0.01},
]
RESUME_KW = {"n_tokens": BATCH * 20, "batch_size": BATCH, "checkpoint_every": 5, "progress": False, "seed": 3}


class _Stop(KeyboardInterrupt):
    pass


def _interrupt_after(monkeypatch, at_step: int) -> None:
    original = train_mod._save_checkpoint

    def saving_then_stop(path, inputs, state):
        original(path, inputs, state)
        if state["step"] == at_step:
            raise _Stop

    monkeypatch.setattr(train_mod, "_save_checkpoint", saving_then_stop)


def test_resume_gives_the_same_weights_as_an_uninterrupted_run(store, tmp_path, monkeypatch, caplog):
    reference = train_saes(store, RESUME_SPECS, **RESUME_KW)
    ckpt_dir = tmp_path / "ckpt"
    with monkeypatch.context() as m:
        _interrupt_after(m, 10)
        with pytest.raises(_Stop):
            train_saes(store, RESUME_SPECS, checkpoint_dir=ckpt_dir, **RESUME_KW)
    assert sorted(p.name for p in ckpt_dir.iterdir()) == [train_mod.CHECKPOINT]
    assert train_mod.read_checkpoint(ckpt_dir / train_mod.CHECKPOINT)["step"] == 10
    with caplog.at_level(logging.WARNING, logger="interplab.core.saes.training.trainer"):
        resumed = train_saes(store, RESUME_SPECS, checkpoint_dir=ckpt_dir, **RESUME_KW)
    assert "at step 10 of 20" in caplog.text
    for a, b in zip(resumed, reference, strict=True):
        assert type(a) is type(b)
        assert_same_weights(a, b)
        assert a.cfg.metadata == b.cfg.metadata
    # a finished checkpoint: running again returns the same SAEs without training
    assert train_mod.read_checkpoint(ckpt_dir / train_mod.CHECKPOINT)["step"] == 20
    again = train_saes(store, RESUME_SPECS, checkpoint_dir=ckpt_dir, **RESUME_KW)
    for a, b in zip(again, reference, strict=True):
        assert_same_weights(a, b)


def test_resume_with_resampling_matches_uninterrupted(store, tmp_path, monkeypatch):
    """Resampling draws random inputs: a resumed run must still equal the uninterrupted one (same seed)."""
    specs = [{"arch": "standard", "width": 64, "l1_coefficient": 5.0, "lr": 3e-2}]
    kw = {**RESUME_KW, "n_tokens": BATCH * 30, "dead_tokens": BATCH, "resample_every": 3}
    resampled = []
    original = train_mod._resample

    def spy(*args):
        resampled.append(original(*args))
        return resampled[-1]

    monkeypatch.setattr(train_mod, "_resample", spy)
    torch.manual_seed(123)
    reference = train_saes(store, specs, **kw)[0]
    assert sum(resampled[3:]) > 0, "latents are resampled after the interruption point (step 10)"
    with monkeypatch.context() as m:
        _interrupt_after(m, 10)
        with pytest.raises(_Stop):
            train_saes(store, specs, checkpoint_dir=tmp_path, **kw)
    torch.manual_seed(456)  # whatever the global RNG holds, the seed argument decides the result
    resumed = train_saes(store, specs, checkpoint_dir=tmp_path, **kw)[0]
    assert_same_weights(resumed, reference)


def test_checkpoint_of_another_run_is_refused(store, tmp_path, monkeypatch):
    with monkeypatch.context() as m:
        _interrupt_after(m, 5)
        with pytest.raises(_Stop):
            train_saes(store, RESUME_SPECS, checkpoint_dir=tmp_path, **RESUME_KW)
    before = (tmp_path / train_mod.CHECKPOINT).read_bytes()
    other = [dict(RESUME_SPECS[0], width=64), *RESUME_SPECS[1:]]
    with pytest.raises(
        ValueError,
        match=r"checkpoint\.safetensors.*other inputs than this call's "
        r"\(specs\[0\]\.width: 32 there, 64",
    ):
        train_saes(store, other, checkpoint_dir=tmp_path, **RESUME_KW)
    with pytest.raises(ValueError, match=r"other inputs than this call's \(.*n_tokens: 5120 there, 7680 now"):
        train_saes(store, RESUME_SPECS, checkpoint_dir=tmp_path, **{**RESUME_KW, "n_tokens": BATCH * 30})
    with pytest.raises(ValueError, match=r"other inputs than this call's \(seed: 3 there, 4 now"):
        train_saes(store, RESUME_SPECS, checkpoint_dir=tmp_path, **{**RESUME_KW, "seed": 4})
    assert (tmp_path / train_mod.CHECKPOINT).read_bytes() == before


def test_checkpoint_is_written_atomically(store, tmp_path, monkeypatch):
    """A kill half-way through writing a checkpoint keeps the previous one, and the resume cleans up."""
    reference = train_saes(store, RESUME_SPECS, **RESUME_KW)
    ckpt_dir = tmp_path / "a"
    with monkeypatch.context() as m:
        _interrupt_after(m, 10)
        with pytest.raises(_Stop):
            train_saes(store, RESUME_SPECS, checkpoint_dir=ckpt_dir, **RESUME_KW)
    good = (ckpt_dir / train_mod.CHECKPOINT).read_bytes()
    shutil.copytree(ckpt_dir, tmp_path / "b")
    ops = FileOps()
    with ops.counting():
        train_saes(store, RESUME_SPECS, checkpoint_dir=tmp_path / "b", **RESUME_KW)
    first_write = next(i for i, op in enumerate(ops.log, 1) if op.startswith("write"))
    with ops.kill_at(first_write), pytest.raises(Killed):
        train_saes(store, RESUME_SPECS, checkpoint_dir=ckpt_dir, **RESUME_KW)
    assert (ckpt_dir / train_mod.CHECKPOINT).read_bytes() == good, "a killed write never replaces the checkpoint"
    assert [p for p in ckpt_dir.iterdir() if leftover_target(p.name)], "the torn temporary file is there"
    resumed = train_saes(store, RESUME_SPECS, checkpoint_dir=ckpt_dir, **RESUME_KW)
    for a, b in zip(resumed, reference, strict=True):
        assert_same_weights(a, b)
    assert sorted(p.name for p in ckpt_dir.iterdir()) == [train_mod.CHECKPOINT], "leftovers are cleaned"


# ------------------------------------------------------------------ bad data
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_activations_stop_training_naming_batch_and_row(tmp_path, x_a, monkeypatch, bad):
    data = x_a.clone()
    token = 5000
    data[token, 7] = bad
    store = write_store(tmp_path / "acts", {SITE_A: data})
    where = [
        (b, int(r))
        for b, batch in enumerate(store.batches(BATCH, seed=0))
        for r in (~torch.isfinite(batch)).any(-1).nonzero().flatten()
    ]
    assert len(where) == 1 and where[0][0] > 0, where  # training has taken steps before it arrives
    batch_i, row = where[0]
    created = []
    original = SAE.create

    def record(*args, **kwargs):
        created.append(original(*args, **kwargs))
        return created[-1]

    monkeypatch.setattr(SAE, "create", staticmethod(record))
    with pytest.raises(ValueError, match=rf"{re.escape(SITE_A)}.*batch {batch_i}, row {row}\b"):
        train_saes(
            store,
            [{"arch": "topk", "width": 32, "k": 2}, {"arch": "standard", "width": 32}],
            n_tokens=BATCH * 32,
            batch_size=BATCH,
            checkpoint_dir=tmp_path / "ckpt",
            checkpoint_every=1,
            progress=False,
        )
    assert len(created) == 2
    for sae in created:
        for name, p in sae.named_parameters():
            assert torch.isfinite(p).all(), name
        assert not torch.equal(sae.b_dec, torch.zeros(D_A)), "training ran before the bad batch"
    state = train_mod.read_checkpoint(tmp_path / "ckpt" / train_mod.CHECKPOINT)
    assert state["step"] == batch_i
    for sd in state["saes"]:
        for name, t in sd.items():
            assert torch.isfinite(t).all(), name


@pytest.mark.parametrize(
    ("source", "specs", "kwargs", "exc", "match"),
    [
        (
            "store",
            [{"arch": "topk", "width": 16, "k": 2}],
            {"n_tokens": 100, "batch_size": BATCH},
            ValueError,
            r"n_tokens \(at least one batch: >= batch_size=256\) must be an integer >= 256, got 100",
        ),
        ("store", [{"arch": "topk", "widht": 16}], {}, ValueError, r"'widht'.*'width'"),
        (
            "store",
            [{"arch": "topk", "width": 16, "k": 2, "site": "blocks.9.hook_resid_post"}],
            {},
            ValueError,
            r"blocks\.9\.hook_resid_post.*blocks\.0\.hook_resid_post",
        ),
        ("store", [], {}, ValueError, r"at least one SAE spec"),
        ("store", [{"arch": "relu2", "width": 16}], {}, ValueError, r"relu2.*batchtopk"),
        ("store", [{"arch": "topk", "width": 16, "k": 0}], {}, ValueError, r"k of a topk SAE .* must be"),
        (
            "store",
            [{"arch": "topk", "width": 16, "k": 2}],
            {"n_tokens": 16384, "batch_size": 16384},
            ValueError,
            r"8192 tokens, fewer than one batch of 16384",
        ),
        ("tensor", [{"arch": "topk", "width": 16, "k": 2}], {}, TypeError, r"ActivationStore.*Tensor"),
        ("missing", [{"arch": "topk", "width": 16, "k": 2}], {}, FileNotFoundError, r"no-such-store"),
    ],
)
def test_bad_training_inputs(store, tmp_path, source, specs, kwargs, exc, match):
    src = {"store": store, "tensor": torch.randn(100, D_A), "missing": tmp_path / "no-such-store"}[source]
    kwargs = {"n_tokens": BATCH * 4, "batch_size": BATCH, "progress": False, **kwargs}
    with pytest.raises(exc, match=match):
        train_saes(src, specs, checkpoint_dir=tmp_path / "ckpt", **kwargs)
    assert not (tmp_path / "ckpt").exists(), "nothing is written for a refused call"


def test_two_site_store_needs_a_site(store2):
    with pytest.raises(ValueError, match=r"several sites; pass site=.*blocks\.0\.hook_resid_post.*blocks\.1\."):
        train_saes(store2, [{"arch": "topk", "width": 16, "k": 2}], n_tokens=BATCH, batch_size=BATCH)


def test_two_architectures_under_one_name_are_refused():
    """The registry used to let a second class silently replace the first under the same arch name."""
    with pytest.raises(ValueError, match=r"Two SAE architectures are named 'topk'"):

        class AnotherTopK(TopKSAE):  # defining it is the test
            arch = "topk"

    from interplab.core.saes import REGISTRY

    assert REGISTRY["topk"] is TopKSAE


def test_the_trainer_and_base_class_name_no_architecture():
    """Architecture knowledge lives in each class: defaults, validation, resampling, extra tensors."""
    import inspect

    import interplab.core.saes.base as base_mod

    for module in (train_mod, base_mod):
        source = inspect.getsource(module)
        assert not re.search(r"\barch\s*(==|!=|in\b)|\.arch\s*(==|!=|in\b)", source), module.__name__
    assert TopKSAE.with_defaults({}) == {"k": 32} and StandardSAE.resample_dead and not TopKSAE.resample_dead
