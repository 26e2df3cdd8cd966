"""Gemma Scope 2's cross-layer transcoders by repo and id, checked offline against sae-lens's own loader.

A Gemma Scope 2 CLT folder (``clt/width_16k_l0_small_affine/``) holds one ``params_layer_L.safetensors`` per
layer: ``w_enc`` [d_model, d_sae], ``w_dec`` [d_sae, n_layers, d_model] (what layer L's latents write to every
layer; the slices before L unused), ``b_enc``, ``b_dec``, ``threshold`` and ``affine_skip_connection``.
sae-lens 6.54.12's ``gemma_3`` loader reads one layer of it as a per-layer transcoder whose decoder is the sum
over the layers written to; interplab reads the whole CLT from the same cached files, and every layer's encoder,
threshold, biases and skip must equal sae-lens's, and its decoders must add up to sae-lens's decoder.
The fixture is small (4 layers, d_model 16) in the release's exact layout, names and dtypes.
"""

from __future__ import annotations

import pytest
import torch
from interplab.core.saes.clt_io import load_clt
from safetensors.torch import save_file

from tests.saes.test_releases import COMMIT, REPO, hub_cache  # noqa: F401  (the offline hub cache fixture)

SAE_ID = "clt/width_16k_l0_small_affine"
N_LAYERS, D, D_SAE = 4, 16, 24


def write_clt_fixture(cache) -> list[dict[str, torch.Tensor]]:
    repo = cache / f"models--{REPO.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    target = repo / "snapshots" / COMMIT / SAE_ID
    target.mkdir(parents=True)
    layers = []
    for layer in range(N_LAYERS):
        g = torch.Generator().manual_seed(layer)
        w_dec = torch.randn(D_SAE, N_LAYERS, D, generator=g)
        w_dec[:, :layer] = 0
        params = {"w_enc": torch.randn(D, D_SAE, generator=g) * 0.3, "w_dec": w_dec,
                  "b_enc": torch.randn(D_SAE, generator=g) * 0.1, "b_dec": torch.randn(D, generator=g),
                  "threshold": torch.rand(D_SAE, generator=g) * 0.3 + 0.01,
                  "affine_skip_connection": torch.randn(D, D, generator=g) * 0.1}  # fmt: skip
        save_file(params, str(target / f"params_layer_{layer}.safetensors"))
        layers.append(params)
    return layers


def test_gemma_scope_2_clt_loads_like_saelens_gemma3_loader(hub_cache):  # noqa: F811
    import sae_lens
    from sae_lens.loading.pretrained_sae_loaders import gemma_3_sae_huggingface_loader

    assert sae_lens.__version__ == "6.54.12"
    params = write_clt_fixture(hub_cache)
    clt = load_clt(REPO, SAE_ID)
    assert (clt.n_layers, clt.d_model, clt.d_sae, clt.activation, clt.skip) == (N_LAYERS, D, D_SAE, "jumprelu", True)
    for layer in range(N_LAYERS):
        cfg, sl, _ = gemma_3_sae_huggingface_loader(REPO, f"{SAE_ID}/params_layer_{layer}", device="cpu")
        assert (cfg["hook_name"], cfg["hook_name_out"]) == (
            f"blocks.{layer}.hook_mlp_in",
            f"blocks.{layer}.hook_mlp_out",
        )
        assert cfg["architecture"] == "jumprelu_skip_transcoder"
        assert torch.equal(clt.W_enc[layer].detach(), sl["W_enc"])
        assert torch.equal(clt.b_enc[layer].detach(), sl["b_enc"]) and torch.equal(
            clt.b_dec[layer].detach(), sl["b_dec"]
        )
        torch.testing.assert_close(clt.threshold[layer].detach(), sl["threshold"], rtol=1e-6, atol=0)
        assert torch.equal(clt.W_skip[layer].detach().T, sl["W_skip"])
        torch.testing.assert_close(clt.W_dec[layer].detach().sum(1), sl["W_dec"], rtol=1e-6, atol=1e-6)
        assert torch.equal(clt.W_dec[layer].detach(), params[layer]["w_dec"][:, layer:])


def test_a_clt_missing_from_the_cache_offline_says_what_to_download(hub_cache):  # noqa: F811
    with pytest.raises(FileNotFoundError, match=r"google/gemma-scope-2-270m-pt/clt/width_1m is not in the Hugging"):
        load_clt(REPO, "clt/width_1m")
