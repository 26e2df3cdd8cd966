"""SAELens releases by name and id (Gemma Scope 2), checked offline against sae-lens's own loader.

The hub cannot be reached here, so fixture folders are written in the release's exact layout
(``resid_post/layer_5_width_16k_l0_medium/params.safetensors`` + ``config.json``) into a Hugging
Face cache; sae-lens 6.54.12's ``gemma_3`` loader and ours read the same files, and weights,
thresholds and hook names must be equal. Widths are small (the layout, names and dtypes are the
release's); d_in is the embedded model's (640; 1024 for attention's hook_z).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from interplab.core.saes import JumpReLUSAE, load_sae
from interplab.core.saes.releases import RELEASES, release_ids
from safetensors.torch import save_file

REPO = "google/gemma-scope-2-270m-pt"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
D_SAE = 48
CASES = [  # release, id, folder in the repo, d_in, hook name
    ("gemma-scope-2-270m-pt-res", "layer_5_width_16k_l0_medium", "resid_post", 640, "blocks.5.hook_resid_post"),
    ("gemma-scope-2-270m-pt-mlp", "layer_12_width_65k_l0_small", "mlp_out", 640, "blocks.12.hook_mlp_out"),
    ("gemma-scope-2-270m-pt-att", "layer_9_width_16k_l0_big", "attn_out", 1024, "blocks.9.attn.hook_z"),
    ("gemma-scope-2-270m-pt-res-all", "layer_6_width_16k_l0_small", "resid_post_all", 640, "blocks.6.hook_resid_post"),
]
HF_HOOK = {
    "resid_post": "model.layers.{L}.output",
    "mlp_out": "model.layers.{L}.post_feedforward_layernorm.output",
    "attn_out": "model.layers.{L}.self_attn.o_proj.input",
}


def write_fixture(cache: Path, folder: str, sae_id: str, d_in: int, seed: int) -> dict[str, torch.Tensor]:
    """One SAE folder of the release, in a Hugging Face cache (refs/main -> snapshots/<commit>/...)."""
    repo = cache / f"models--{REPO.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    target = repo / "snapshots" / COMMIT / folder / sae_id
    target.mkdir(parents=True)
    g = torch.Generator().manual_seed(seed)
    params = {
        "w_enc": torch.randn(d_in, D_SAE, generator=g) * 0.1,
        "w_dec": torch.randn(D_SAE, d_in, generator=g),
        "b_enc": torch.randn(D_SAE, generator=g) * 0.1,
        "b_dec": torch.randn(d_in, generator=g),
        "threshold": torch.rand(D_SAE, generator=g) * 0.5 + 0.01,
    }
    save_file(params, str(target / "params.safetensors"))
    layer = int(sae_id.split("_")[1])
    hook = HF_HOOK[folder.removesuffix("_all")].format(L=layer)
    (target / "config.json").write_text(
        json.dumps(
            {
                "architecture": "jump_relu",
                "model_name": "gemma-v3-270m-pt",
                "hf_hook_point_in": hook,
                "hf_hook_point_out": hook,
            }
        )
    )
    return params


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An offline Hugging Face cache in tmp_path, for huggingface_hub and so for sae-lens."""
    import huggingface_hub.constants as hf_constants
    import sae_lens.loading.pretrained_sae_loaders as sl_loaders
    from safetensors import safe_open

    cache = tmp_path / "hub"
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def shapes_from_cache(repo_id: str, filename: str) -> dict[str, list[int]]:
        # sae-lens reads the shapes with an HTTP range request; here they come from the same cached file
        file = cache / f"models--{repo_id.replace('/', '--')}" / "snapshots" / COMMIT / filename
        with safe_open(str(file), "pt") as f:
            return {k: list(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118

    monkeypatch.setattr(sl_loaders, "get_safetensors_tensor_shapes", shapes_from_cache)
    return cache


def test_the_table_matches_saelens_release_names_ids_and_paths():
    import sae_lens
    import yaml

    table = yaml.safe_load((Path(sae_lens.__file__).parent / "pretrained_saes.yaml").read_text())
    ours = [name for name in RELEASES if name.startswith("gemma-scope-2-270m")]
    assert len(ours) == 16  # res, mlp, att and transcoders (each with -all), pt and it
    for name in ours:
        theirs = table[name]
        release = RELEASES[name]
        assert (release.repo_id, release.model) == (theirs["repo_id"], theirs["model"]), name
        assert sorted(release.ids) == sorted(s["id"] for s in theirs["saes"]), name
        paths = {s["id"]: s["path"] for s in theirs["saes"]}
        assert all(release.path_of(i) == paths[i] for i in release.ids), name


@pytest.mark.parametrize(("release", "sae_id", "folder", "d_in", "hook"), CASES)
def test_release_loads_like_saelens_gemma3_loader(hub_cache, release, sae_id, folder, d_in, hook):
    from sae_lens import SAE as SLSAE

    params = write_fixture(hub_cache, folder, sae_id, d_in, seed=len(sae_id))
    sae = load_sae(release, sae_id)
    sl = SLSAE.from_pretrained(release, sae_id, device="cpu")
    assert type(sae) is JumpReLUSAE and type(sl).__name__ == "JumpReLUSAE"
    assert sae.site == sl.cfg.metadata.hook_name == hook
    assert sae.cfg.model_name == sl.cfg.metadata.model_name == "google/gemma-3-270m"
    assert sae.cfg.apply_b_dec_to_input is sl.cfg.apply_b_dec_to_input is False
    assert (sae.d_in, sae.d_sae) == (d_in, D_SAE)
    for ours, theirs, raw in (
        ("W_enc", "W_enc", "w_enc"),
        ("W_dec", "W_dec", "w_dec"),
        ("b_enc", "b_enc", "b_enc"),
        ("b_dec", "b_dec", "b_dec"),
    ):
        assert torch.equal(getattr(sae, ours).detach(), getattr(sl, theirs).detach()), ours
        assert torch.equal(getattr(sae, ours).detach(), params[raw]), ours
    torch.testing.assert_close(sae.threshold.detach(), sl.threshold.detach(), rtol=1e-6, atol=0)
    x = torch.randn(32, d_in, generator=torch.Generator().manual_seed(3)) * 3
    with torch.no_grad():
        la, lb = sae.encode(x), sl.encode(x)
        assert (la > 0).any() and (la == 0).any()
        torch.testing.assert_close(la, lb, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(sae.decode(la), sl.decode(la), atol=1e-5, rtol=1e-5)


def test_unknown_release_and_id_list_close_matches(hub_cache):
    with pytest.raises(ValueError, match=r"Unknown SAE release 'gemma-scope-2-270m-pt-re'.*'gemma-scope-2-270m-pt-res"):
        load_sae("gemma-scope-2-270m-pt-re", "layer_5_width_16k_l0_medium")
    # layer 6 is only in the -all release: the error offers the ids that exist
    with pytest.raises(
        ValueError,
        match=r"has no SAE id 'layer_6_width_16k_l0_medium'.*layer_5_width_16k_l0_medium"
        r".*layers \[5, 9, 12, 15\]",
    ):
        load_sae("gemma-scope-2-270m-pt-res", "layer_6_width_16k_l0_medium")
    assert "layer_17_width_262k_l0_small" in release_ids("gemma-scope-2-270m-pt-res-all")


def test_missing_from_the_cache_offline_says_what_to_download(hub_cache):
    with pytest.raises(FileNotFoundError, match=r"resid_post/layer_5_width_16k_l0_big/params\.safetensors"):
        load_sae("gemma-scope-2-270m-pt-res", "layer_5_width_16k_l0_big")


def test_a_bad_release_file_is_refused_before_reading(hub_cache):
    params = write_fixture(hub_cache, "resid_post", "layer_5_width_16k_l0_small", 640, seed=1)
    params["threshold"] = params["threshold"][:-1]
    folder = next(hub_cache.rglob("layer_5_width_16k_l0_small"))
    save_file(params, str(folder / "params.safetensors"))
    with pytest.raises(ValueError, match=r"params\.safetensors.*threshold has shape \[47\], expected \[48\]"):
        load_sae("gemma-scope-2-270m-pt-res", "layer_5_width_16k_l0_small")


# ------------------------------------------------------------ transcoders
TC_CASES = [  # release, id, folder in the repo (the id's own path for the short releases)
    ("gemma-scope-2-270m-pt-transcoders-all", "layer_6_width_16k_l0_small_affine", "transcoder_all"),
    ("gemma-scope-2-270m-pt-transcoders-all", "layer_3_width_262k_l0_big", "transcoder_all"),
    ("gemma-scope-2-270m-pt-transcoders", "transcoder/layer_9_width_16k_l0_small_affine", ""),
]


def write_transcoder_fixture(cache: Path, folder: str, sae_id: str, seed: int) -> dict[str, torch.Tensor]:
    repo = cache / f"models--{REPO.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    target = repo / "snapshots" / COMMIT / folder / sae_id
    target.mkdir(parents=True)
    g = torch.Generator().manual_seed(seed)
    d = 640
    params = {"w_enc": torch.randn(d, D_SAE, generator=g) * 0.1, "w_dec": torch.randn(D_SAE, d, generator=g),
              "b_enc": torch.randn(D_SAE, generator=g) * 0.1, "b_dec": torch.randn(d, generator=g),
              "threshold": torch.rand(D_SAE, generator=g) * 0.5 + 0.01}  # fmt: skip
    if sae_id.endswith("_affine"):
        params["affine_skip_connection"] = torch.randn(d, d, generator=g) * 0.05
    save_file(params, str(target / "params.safetensors"))
    layer = int(sae_id.split("layer_")[1].split("_")[0])
    (target / "config.json").write_text(json.dumps({
        "architecture": "jump_relu", "model_name": "gemma-v3-270m-pt",
        "hf_hook_point_in": f"model.layers.{layer}.pre_feedforward_layernorm.output",
        "hf_hook_point_out": f"model.layers.{layer}.post_feedforward_layernorm.output",
        "affine_connection": sae_id.endswith("_affine")}))  # fmt: skip
    return params


@pytest.mark.parametrize(("release", "sae_id", "folder"), TC_CASES)
def test_transcoder_release_loads_like_saelens_gemma3_loader(hub_cache, release, sae_id, folder):
    from sae_lens import SAE as SLSAE

    params = write_transcoder_fixture(hub_cache, folder, sae_id, seed=len(sae_id))
    tc = load_sae(release, sae_id)
    sl = SLSAE.from_pretrained(release, sae_id, device="cpu")
    affine = sae_id.endswith("_affine")
    assert type(sl).__name__ == ("JumpReLUSkipTranscoder" if affine else "JumpReLUTranscoder")
    layer = int(sae_id.split("layer_")[1].split("_")[0])
    assert tc.is_transcoder and tc.cfg.skip is affine
    assert (tc.site, tc.site_out) == (sl.cfg.metadata.hook_name, sl.cfg.metadata.hook_name_out)
    assert (tc.site, tc.site_out) == (f"blocks.{layer}.hook_mlp_in", f"blocks.{layer}.hook_mlp_out")
    assert torch.equal(tc.W_enc.detach(), params["w_enc"]) and torch.equal(tc.W_dec.detach(), sl.W_dec.detach())
    if affine:
        assert torch.equal(tc.W_skip.detach(), params["affine_skip_connection"])
        assert torch.equal(tc.W_skip.detach().T, sl.W_skip.detach())
    x = torch.randn(32, 640, generator=torch.Generator().manual_seed(3)) * 3
    with torch.no_grad():
        assert (tc.encode(x) > 0).any() and (tc.encode(x) == 0).any()
        torch.testing.assert_close(tc.encode(x), sl.encode(x), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(tc(x), sl(x), atol=1e-4, rtol=1e-5)
