"""Transcoders: every activation interplab trains, as a transcoder (MLP input -> MLP output), with and
without the affine skip; the loss and gradients against plain autograd; training from one activation
pass of a tiny model (both sites from the same forward); SAELens transcoder files both ways, checked
against sae-lens 6.54.12's own transcoder classes.
"""

from __future__ import annotations

import json

import pytest
import torch
from interplab.core.saes import SAE, load_sae, train_saes

from tests.tiny import TEXTS, tiny_model

ARCHS = ["standard", "topk", "batchtopk", "jumprelu", "gated"]
D_IN, D_OUT, D_SAE, K = 12, 20, 40, 4
SITE_IN, SITE_OUT = "blocks.1.hook_mlp_in", "blocks.1.hook_mlp_out"
#: SAELens 6.54.12's class for each (architecture, skip) it has.
SAELENS = {
    ("standard", False): "Transcoder",
    ("standard", True): "SkipTranscoder",
    ("jumprelu", False): "JumpReLUTranscoder",
    ("jumprelu", True): "JumpReLUSkipTranscoder",
    ("batchtopk", False): "JumpReLUTranscoder",
    ("batchtopk", True): "JumpReLUSkipTranscoder",
}


def make(arch: str, skip: bool, seed: int = 0) -> SAE:
    tc = SAE.create(arch, d_in=D_IN, d_sae=D_SAE, k=K if "topk" in arch else None, site=SITE_IN, site_out=SITE_OUT,
                    d_out=D_OUT, skip=skip, model_name="tiny")  # fmt: skip
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in tc.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        if arch == "jumprelu":
            tc.set_threshold(torch.rand(D_SAE, generator=g) * 0.8 + 0.05)
        if arch == "batchtopk":
            tc.topk_threshold.fill_(0.35)
    return tc.eval()


def xs(n: int = 64, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, D_IN, generator=torch.Generator().manual_seed(seed)) * 2


@pytest.mark.parametrize("skip", [False, True])
@pytest.mark.parametrize("arch", ARCHS)
def test_transcoder_shapes_and_forward(arch, skip):
    tc = make(arch, skip)
    assert tc.is_transcoder and tc.d_out == D_OUT and tc.site_out == SITE_OUT
    assert tc.W_dec.shape == (D_SAE, D_OUT) and tc.b_dec.shape == (D_OUT,)
    assert not tc.cfg.apply_b_dec_to_input
    x = xs()
    with torch.no_grad():
        out = tc(x)
        expected = tc.encode(x) @ tc.W_dec + tc.b_dec + (x @ tc.W_skip if skip else 0)
    assert out.shape == (64, D_OUT)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("skip", [False, True])
@pytest.mark.parametrize("arch", ARCHS)
def test_transcoder_loss_compares_with_the_target_and_grads_match_autograd(arch, skip):
    """The fused loss of each activation, on a transcoder: its MSE is against the target (not the input),
    and every gradient equals plain autograd through encode/decode (the straight-through and auxiliary
    terms aside, which the SAE tests cover)."""
    tc = make(arch, skip).train()
    x, y = xs(), torch.randn(64, D_OUT, generator=torch.Generator().manual_seed(3))
    loss, info = tc.training_loss(x, target=y)
    with torch.no_grad():
        recon = tc.decode(tc.encode(x)) + tc.skip_out(x) if arch != "batchtopk" else info["recon"]
    assert info["recon"].shape == (64, D_OUT)
    torch.testing.assert_close(info["recon"].detach(), recon, atol=1e-4, rtol=1e-4)
    assert info["mse"] == pytest.approx(float((recon - y).pow(2).sum(-1).mean()), rel=1e-4)
    loss.backward()
    if skip:  # the skip's gradient is exactly that of the MSE through x @ W_skip
        W = tc.W_skip.detach().clone().requires_grad_(True)
        mse = (info["recon"].detach() - tc.skip_out(x).detach() + x @ W - y).pow(2).sum(-1).mean()
        (g,) = torch.autograd.grad(mse, [W])
        torch.testing.assert_close(tc.W_skip.grad, g, atol=1e-4, rtol=1e-4)
    b = tc.b_dec.detach().clone().requires_grad_(True)
    mse = (info["recon"].detach() - tc.b_dec.detach() + b - y).pow(2).sum(-1).mean()
    (g,) = torch.autograd.grad(mse, [b])
    torch.testing.assert_close(tc.b_dec.grad, g, atol=1e-4, rtol=1e-4)


def test_transcoder_needs_a_target_and_refuses_a_wrong_one():
    tc = make("topk", False).train()
    with pytest.raises(ValueError, match="needs target="):
        tc.training_loss(xs())
    with pytest.raises(ValueError, match="target must have shape"):
        tc.training_loss(xs(), target=torch.zeros(64, D_IN))


def test_bad_transcoder_configs_are_refused():
    with pytest.raises(ValueError, match="apply_b_dec_to_input must be False"):
        SAE.create("topk", d_in=4, d_sae=8, k=2, site_out=SITE_OUT, apply_b_dec_to_input=True)
    with pytest.raises(ValueError, match="skip=True is for transcoders"):
        SAE.create("topk", d_in=4, d_sae=8, k=2, skip=True)


@pytest.mark.parametrize("skip", [False, True])
@pytest.mark.parametrize("arch", ARCHS)
def test_transcoder_round_trip_through_our_files(tmp_path, arch, skip):
    tc = make(arch, skip)
    tc.save(tmp_path / "tc")
    cfg = json.loads((tmp_path / "tc" / "cfg.json").read_text())
    assert cfg["d_out"] == D_OUT and cfg["metadata"]["hook_name_out"] == SITE_OUT
    assert cfg["architecture"].endswith("skip_transcoder" if skip else "transcoder")
    back = load_sae(tmp_path / "tc")
    assert type(back) is type(tc) and back.is_transcoder and back.cfg.skip is skip
    assert (back.site, back.site_out, back.d_out) == (SITE_IN, SITE_OUT, D_OUT)
    with torch.no_grad():
        torch.testing.assert_close(back(xs()), tc(xs()), atol=1e-5, rtol=1e-5)
    assert back.fingerprint() == tc.fingerprint()


@pytest.mark.parametrize("arch,skip", sorted(SAELENS))
def test_our_transcoder_loads_in_saelens_with_equal_outputs(tmp_path, arch, skip):
    from sae_lens import SAE as SLSAE

    tc = make(arch, skip)
    tc.save(tmp_path / "tc")
    sl = SLSAE.load_from_disk(tmp_path / "tc", device="cpu")
    assert type(sl).__name__ == SAELENS[(arch, skip)]
    assert sl.cfg.d_out == D_OUT and sl.cfg.metadata.hook_name_out == SITE_OUT
    x = xs()
    with torch.no_grad():
        torch.testing.assert_close(sl.encode(x), tc.encode(x), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(sl(x), tc(x), atol=1e-5, rtol=1e-5)
        assert (tc.encode(x) != 0).any() and (tc.encode(x) == 0).any()


@pytest.mark.parametrize("name", sorted(set(SAELENS.values())))
def test_saelens_transcoder_loads_here_with_equal_outputs(tmp_path, name):
    import sae_lens.saes.transcoder as slt
    from sae_lens.saes.sae import SAEMetadata

    cfg = getattr(slt, f"{name}Config")(d_in=D_IN, d_sae=D_SAE, d_out=D_OUT, apply_b_dec_to_input=False,
                                        metadata=SAEMetadata(hook_name=SITE_IN, hook_name_out=SITE_OUT,
                                                             model_name="tiny"))  # fmt: skip
    sl = getattr(slt, name)(cfg)
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for pname, p in sl.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            if pname == "threshold":
                p.copy_(torch.rand(p.shape, generator=g) * 0.8 + 0.05)
    sl.save_model(tmp_path / "sl")
    tc = load_sae(tmp_path / "sl")
    assert tc.is_transcoder and (tc.site, tc.site_out, tc.d_out) == (SITE_IN, SITE_OUT, D_OUT)
    assert tc.cfg.skip is ("Skip" in name) and tc.arch == ("jumprelu" if "JumpReLU" in name else "standard")
    x = xs()
    with torch.no_grad():
        torch.testing.assert_close(tc.encode(x), sl.encode(x), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(tc(x), sl(x), atol=1e-5, rtol=1e-5)
    # and back out: what we write, sae-lens reads with the same outputs
    from sae_lens import SAE as SLSAE

    tc.save(tmp_path / "again")
    with torch.no_grad():
        torch.testing.assert_close(SLSAE.load_from_disk(tmp_path / "again", device="cpu")(x), sl(x), atol=1e-5,
                                   rtol=1e-5)  # fmt: skip


@pytest.mark.parametrize("arch", ARCHS)
def test_transcoders_train_from_one_pass_of_a_model(arch):
    """Every activation trains as a transcoder straight from a model: the input and output sites come
    from the same forward passes, and the result predicts the MLP output better than its mean."""
    model = tiny_model("gemma3")
    spec = {"arch": arch, "width": 64, "site_out": SITE_OUT, "skip": arch == "jumprelu"}
    if "topk" in arch:
        spec["k"] = 8
    calls = []
    real = model.run_sites

    def counted(enc, parsed):
        calls.append([p.name for p in parsed])
        return real(enc, parsed)

    model.run_sites = counted
    (tc,) = train_saes(model, [spec], site=SITE_IN, corpus=TEXTS * 800, n_tokens=8192, batch_size=64,
                           progress=False)  # fmt: skip
    assert calls and all(c == [SITE_IN, SITE_OUT] for c in calls)  # one pass gives both sites
    assert tc.is_transcoder and tc.site == SITE_IN and tc.site_out == SITE_OUT and tc.d_out == 32
    # explained variance of the MLP output (not of the input) over the last steps of the stream
    assert tc.cfg.metadata["explained_variance"] > 0.1, tc.cfg.metadata
    assert tc.cfg.metadata["output_scale"] > 0
    x = torch.randn(5, 32)
    with torch.no_grad():  # the scales are folded in: raw input in, raw output out
        assert tc(x).shape == (5, 32)
