"""What every architecture shares through the base class: shapes, decoder directions, input and size
checks, fitting a model's sites, the registry, and no architecture named outside its own file.
"""

from __future__ import annotations

import re

import interplab.core.saes.training.trainer as train_mod
import numpy as np
import pytest
import torch
from interplab.core.saes import SAE, StandardSAE, TopKSAE

from tests.saes.helpers import ARCHS, CLASSES, SITE_A, randomize


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


@pytest.mark.parametrize("arch", ARCHS)
def test_encode_outside_training_gives_plain_tensors(arch):
    """Encoding, decoding and the forward pass of plain activations build no autograd graph (``float()`` of a latent
    does not warn); activations that require grad keep theirs, so attribution through an SAE still gets gradients;
    training's loss still reaches every parameter."""
    sae = randomize(SAE.create(arch, d_in=8, d_sae=24, k=3 if "topk" in arch else None), scale=0.5)
    assert all(p.requires_grad for p in sae.parameters())  # the control: the weights are trainable
    x = torch.randn(5, 8)
    latents = sae.encode(x)
    assert not latents.requires_grad and latents.grad_fn is None
    assert not sae.decode(latents).requires_grad and not sae(x).requires_grad
    x_grad = x.clone().requires_grad_(True)
    sae.encode(x_grad).sum().backward()
    assert x_grad.grad is not None and x_grad.grad.abs().sum() > 0
    with torch.no_grad():
        assert not sae.encode(x_grad).requires_grad
    loss, _ = sae.training_loss(torch.randn(64, 8) * 3)
    loss.backward()
    assert sae.W_enc.grad is not None and sae.W_dec.grad is not None


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


def test_two_architectures_under_one_name_are_refused():
    """A second class under a registered architecture name is refused; the first one stays."""
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
