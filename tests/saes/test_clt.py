"""The cross-layer transcoder: its rule, its size, its files."""

from __future__ import annotations

import pytest
import torch
from interplab.core.memory.budget import MemoryBudgetError, set_memory_budget
from interplab.core.saes.clt import CrossLayerTranscoder
from interplab.core.saes.clt_io import load_clt, save_clt


def random_clt(activation: str = "jumprelu", skip: bool = True, k: int | None = None) -> CrossLayerTranscoder:
    clt = CrossLayerTranscoder(n_layers=3, d_model=8, d_sae=12, activation=activation, k=k, skip=skip)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in clt.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        clt.log_threshold.fill_(-2.0)
    return clt


def test_each_layer_predicts_from_its_own_and_earlier_latents_only():
    clt = random_clt()
    x_LPD = torch.randn(3, 5, 8)
    acts = clt.encode(x_LPD)
    pred = clt.decode(acts)
    for m in range(3):
        manual = clt.b_dec[m] + sum(acts[layer] @ clt.W_dec[layer][:, m - layer] for layer in range(m + 1))
        torch.testing.assert_close(pred[m], manual)
    later = acts.clone()
    later[2] = 0  # layer 2's latents do not reach layers 0 and 1
    torch.testing.assert_close(clt.decode(later)[:2], pred[:2])
    assert not torch.allclose(clt.decode(later)[2], pred[2])
    with_skip = clt(x_LPD)
    torch.testing.assert_close(with_skip[1], pred[1] + x_LPD[1] @ clt.W_skip[1])


def test_jumprelu_keeps_pre_activations_over_the_threshold_and_topk_keeps_k():
    clt = random_clt()
    x = torch.randn(4, 8)
    pre = clt.pre_acts(x, 1)
    torch.testing.assert_close(clt.encode_layer(x, 1), pre * (pre > clt.threshold[1]))
    topk = random_clt("topk", k=3)
    assert int((topk.encode_layer(x, 0) != 0).sum(-1).max()) <= 3


def test_the_size_is_known_before_allocating():
    clt = random_clt()
    assert clt.nbytes == CrossLayerTranscoder.estimate_bytes(3, 8, 12, skip=True)
    assert clt.decoder_bytes == 12 * (3 + 2 + 1) * 8 * 4
    assert CrossLayerTranscoder.estimate_bytes(18, 640, 1024) == (1024 * 171 * 640 + 18 * (640 * 1024 + 2048 + 640)) * 4
    try:
        set_memory_budget("100MB")
        with pytest.raises(MemoryBudgetError, match=r"CrossLayerTranscoder\(n_layers=18, d_model=640, d_sae=1024\)"):
            CrossLayerTranscoder(18, 640, 1024)
    finally:
        set_memory_budget(None)


def test_save_and_load_give_the_same_transcoder(tmp_path):
    for clt in (random_clt(), random_clt("relu", skip=False), random_clt("topk", k=2)):
        folder = save_clt(clt, tmp_path / clt.activation)
        back = load_clt(folder)
        assert back.fingerprint() == clt.fingerprint() and back.activation == clt.activation and back.k == clt.k


def test_bad_settings_are_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"activation must be one of \['jumprelu', 'relu', 'topk'\], got 'gelu'"):
        CrossLayerTranscoder(2, 8, 4, activation="gelu")
    with pytest.raises(ValueError, match="k of a topk"):
        CrossLayerTranscoder(2, 8, 4, activation="topk")
    with pytest.raises(ValueError, match="This CLT has 3 layers; got 2"):
        random_clt().encode(torch.zeros(2, 1, 8))
