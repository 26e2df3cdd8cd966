"""Matryoshka BatchTopK: the nested loss against a plain dense computation and against sae-lens 6.54.12's own
MatryoshkaBatchTopKTrainingSAE, SAELens files both ways, widths saved and checked."""

from __future__ import annotations

import json

import pytest
import torch
from interplab.core.saes import SAE, JumpReLUSAE, MatryoshkaSAE, load_sae
from interplab.core.saes.training.in_memory import fit_tensor

D_IN, D_SAE, K, WIDTHS = 16, 48, 4, [6, 20, 48]
SITE = "blocks.2.hook_resid_post"


def make(seed: int = 0) -> MatryoshkaSAE:
    sae = SAE.create("matryoshka", d_in=D_IN, d_sae=D_SAE, k=K, matryoshka_widths=WIDTHS, site=SITE,
                     model_name="gpt2")  # fmt: skip
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in sae.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        sae.topk_threshold.fill_(0.3)
    return sae


def x(n: int = 64, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, D_IN, generator=torch.Generator().manual_seed(seed)) * 2


def dense_reference(sae: MatryoshkaSAE, x_BD: torch.Tensor) -> torch.Tensor:
    """The loss written densely: BatchTopK over the batch, then every prefix's reconstruction error."""
    pre = (x_BD - sae.b_dec) @ sae.W_enc + sae.b_enc
    flat = pre.relu().flatten()
    top = torch.topk(flat, K * len(x_BD)).indices
    acts = torch.zeros_like(flat).scatter(0, top, flat[top]).reshape(pre.shape)
    loss = 0
    for w in WIDTHS:
        loss = loss + ((acts[:, :w] @ sae.W_dec[:w] + sae.b_dec - x_BD) ** 2).sum(-1).mean()
    return loss


def test_nested_loss_and_gradients_equal_the_dense_computation():
    a, b = make(), make()
    xb = x()
    loss_a, info = a.training_loss(xb)
    loss_b = dense_reference(b, xb)
    torch.testing.assert_close(loss_a, loss_b, rtol=1e-5, atol=1e-5)
    assert set(info["inner_mse"]) == {6, 20}
    loss_a.backward(), loss_b.backward()
    for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
        torch.testing.assert_close(getattr(a, name).grad, getattr(b, name).grad, rtol=1e-4, atol=1e-5)


def _saelens_training_sae(ours: MatryoshkaSAE):
    from sae_lens import MatryoshkaBatchTopKTrainingSAE, MatryoshkaBatchTopKTrainingSAEConfig

    cfg = MatryoshkaBatchTopKTrainingSAEConfig(d_in=D_IN, d_sae=D_SAE, k=K, matryoshka_widths=list(WIDTHS),
                                               apply_b_dec_to_input=True,
                                               rescale_acts_by_decoder_norm=False)  # fmt: skip
    sl = MatryoshkaBatchTopKTrainingSAE(cfg)
    with torch.no_grad():
        for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
            getattr(sl, name).copy_(getattr(ours, name))
    return sl


def test_loss_equals_saelens_matryoshka_training_forward_pass():
    from sae_lens.saes.sae import TrainStepInput

    ours = make()
    sl = _saelens_training_sae(ours)
    xb = x()
    out = sl.training_forward_pass(TrainStepInput(sae_in=xb, coefficients={}, dead_neuron_mask=None,
                                                  n_training_steps=0, is_logging_step=False))  # fmt: skip
    loss, info = ours.training_loss(xb)
    torch.testing.assert_close(loss, out.loss, rtol=1e-5, atol=1e-5)
    for w in (6, 20):
        assert info["inner_mse"][w] == pytest.approx(float(out.losses[f"inner_mse_loss_{w}"]), rel=1e-5)


def test_saelens_matryoshka_inference_file_loads_here_with_equal_outputs(tmp_path):
    from sae_lens import SAE as SLSAE

    ours = make()
    sl = _saelens_training_sae(ours)
    with torch.no_grad():
        sl.topk_threshold = torch.tensor(0.3)
    sl.save_inference_model(str(tmp_path / "sl"))
    here = load_sae(tmp_path / "sl")
    assert type(here) is JumpReLUSAE  # sae-lens saves a Matryoshka SAE as JumpReLU and keeps no widths
    back = SLSAE.load_from_disk(tmp_path / "sl", device="cpu")
    xb = x()
    with torch.no_grad():
        torch.testing.assert_close(here.encode(xb), back.encode(xb), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(here.encode(xb), ours.encode(xb), atol=1e-5, rtol=1e-5)
        assert (ours.encode(xb) > 0).any() and (ours.encode(xb) == 0).any()


def test_our_file_loads_in_saelens_and_back_here_as_matryoshka(tmp_path):
    from sae_lens import SAE as SLSAE

    ours = make()
    ours.save(tmp_path / "sae")
    cfg = json.loads((tmp_path / "sae" / "cfg.json").read_text())
    assert cfg["architecture"] == "jumprelu"
    assert cfg["metadata"]["interplab"]["matryoshka_widths"] == WIDTHS
    sl = SLSAE.load_from_disk(tmp_path / "sae", device="cpu")
    assert type(sl).__name__ == "JumpReLUSAE"
    back = load_sae(tmp_path / "sae")
    assert type(back) is MatryoshkaSAE and back.widths == WIDTHS and back.cfg.k == K
    xb = x()
    with torch.no_grad():
        for other in (sl, back):
            torch.testing.assert_close(ours.encode(xb), other.encode(xb), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(ours.decode(ours.encode(xb)), other.decode(ours.encode(xb)), atol=1e-5,
                                       rtol=1e-5)  # fmt: skip


def test_bad_widths_are_refused_before_allocation(tmp_path):
    with pytest.raises(ValueError, match=r"strictly increasing, got \[20, 6, 48\]"):
        SAE.create("matryoshka", d_in=D_IN, d_sae=D_SAE, k=K, matryoshka_widths=[20, 6, 48])
    with pytest.raises(ValueError, match=r"last matryoshka width must be the width of the SAE \(48\), got \[6, 20\]"):
        SAE.create("matryoshka", d_in=D_IN, d_sae=D_SAE, k=K, matryoshka_widths=[6, 20])
    make().save(tmp_path / "sae")
    cfg_path = tmp_path / "sae" / "cfg.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["metadata"]["interplab"]["matryoshka_widths"] = [6, 20.5, 48]
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"matryoshka_widths must be a list of positive integers"):
        load_sae(tmp_path / "sae")
    cfg["metadata"]["interplab"]["matryoshka_widths"] = [6, 20, 40]
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"cfg\.json.*last matryoshka width"):
        load_sae(tmp_path / "sae")


def test_early_latents_reconstruct_on_their_own_after_training():
    """Nested training makes the first prefix a usable small SAE; a plain BatchTopK's first latents are not."""
    g = torch.Generator().manual_seed(0)
    truth = torch.nn.functional.normalize(torch.randn(64, D_IN, generator=g), dim=1)
    freq = torch.linspace(0.3, 0.01, 64)
    codes = torch.rand(4000, 64, generator=g) * (torch.rand(4000, 64, generator=g) < freq)
    data = codes @ truth
    kw = dict(width=48, k=4, steps=500, batch_size=256, lr=3e-3, progress=False)
    mat = fit_tensor(data, "matryoshka", matryoshka_widths=[8, 48], **kw)
    plain = fit_tensor(data, "batchtopk", **kw)

    def prefix_mse(sae):
        with torch.no_grad():
            acts = sae.encode(data)
            return float(((acts[:, :8] @ sae.W_dec[:8] + sae.b_dec - data) ** 2).sum(-1).mean())

    assert prefix_mse(mat) < 0.8 * prefix_mse(plain)
