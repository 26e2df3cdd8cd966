"""SAE files: SAELens folders (both ways, checked against the real sae-lens), Gemma Scope params.npz,
dictionary_learning ae.pt, and clear refusals for bad or unsafe files.

Every load is checked by outputs: encode/decode of the loaded SAE against the SAE that wrote the
file, against sae-lens's own module, or against the format's formula computed by hand.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import interplab.core.saes.writer as writer_mod
import numpy as np
import pytest
import torch
from interplab.core.saes import SAE, BatchTopKSAE, GatedSAE, JumpReLUSAE, StandardSAE, TopKSAE, load_sae
from interplab.core.saes.writer import save_saelens
from interplab.core.storage.readers import FileError
from safetensors.torch import load_file, save_file

from tests.saes.helpers import ARCHS, CLASSES

SAELENS_ARCH = {
    "standard": "standard",
    "topk": "topk",
    "batchtopk": "jumprelu",
    "jumprelu": "jumprelu",
    "gated": "gated",
}
TENSORS = {
    "standard": {"W_enc", "W_dec", "b_enc", "b_dec"},
    "topk": {"W_enc", "W_dec", "b_enc", "b_dec"},
    "batchtopk": {"W_enc", "W_dec", "b_enc", "b_dec", "threshold"},
    "jumprelu": {"W_enc", "W_dec", "b_enc", "b_dec", "threshold"},
    "gated": {"W_enc", "W_dec", "b_dec", "b_gate", "b_mag", "r_mag"},
}
D_IN, D_SAE, K = 16, 48, 4
SITE = "blocks.2.hook_resid_post"
ATOL = 1e-5


def make(arch: str, seed: int = 0, apply_b_dec: bool = True) -> SAE:
    """An SAE with random values everywhere (non-trivial biases, thresholds, r_mag)."""
    sae = SAE.create(
        arch,
        d_in=D_IN,
        d_sae=D_SAE,
        k=K if "topk" in arch else None,
        site=SITE,
        model_name="gpt2",
        apply_b_dec_to_input=apply_b_dec,
    )
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in sae.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        if arch == "jumprelu":
            sae.set_threshold(torch.rand(D_SAE, generator=g) * 0.8 + 0.05)
        if arch == "batchtopk":
            sae.topk_threshold.fill_(0.35)
    return sae.eval()


def inputs(n: int = 64, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, D_IN, generator=torch.Generator().manual_seed(seed)) * 2


def assert_same_outputs(a, b, x: torch.Tensor, atol: float = ATOL) -> None:
    """Equal encode and decode (decode fed the same latents), and some latents fire and some do not."""
    with torch.no_grad():
        la, lb = a.encode(x), b.encode(x)
        torch.testing.assert_close(la, lb, atol=atol, rtol=1e-5)
        torch.testing.assert_close(a.decode(la), b.decode(la), atol=atol, rtol=1e-5)
    assert (la != 0).any() and (la == 0).any(), "the inputs must exercise both firing and not firing"


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class Evil:
    """Unpickling this creates a marker file: proof that a loader ran pickle on a user file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


# ------------------------------------------------------------ SAELens folder
@pytest.mark.parametrize("apply_b_dec", [True, False])
@pytest.mark.parametrize("arch", ARCHS)
def test_round_trip_every_arch(tmp_path, arch, apply_b_dec):
    sae = make(arch, apply_b_dec=apply_b_dec)
    out = sae.save(tmp_path / "sae")
    assert Path(out) == tmp_path / "sae"
    assert sorted(p.name for p in (tmp_path / "sae").iterdir()) == ["cfg.json", "sae_weights.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sae"]
    back = load_sae(tmp_path / "sae")
    assert type(back) is CLASSES[arch]
    assert (back.d_in, back.d_sae, back.site, back.cfg.model_name, back.cfg.k, back.cfg.apply_b_dec_to_input) == (
        D_IN,
        D_SAE,
        SITE,
        "gpt2",
        sae.cfg.k,
        apply_b_dec,
    )
    assert not back.training
    assert_same_outputs(sae, back, inputs())
    if arch == "batchtopk":
        assert float(back.topk_threshold) == pytest.approx(0.35)
    # the SAELens keys, values and tensors
    cfg = json.loads((tmp_path / "sae" / "cfg.json").read_text())
    for key in (
        "d_in",
        "d_sae",
        "dtype",
        "device",
        "apply_b_dec_to_input",
        "normalize_activations",
        "reshape_activations",
        "metadata",
        "architecture",
    ):
        assert key in cfg, key
    assert cfg["architecture"] == SAELENS_ARCH[arch]
    assert (cfg["d_in"], cfg["d_sae"], cfg["dtype"], cfg["device"]) == (D_IN, D_SAE, "float32", "cpu")
    assert cfg["apply_b_dec_to_input"] is apply_b_dec
    assert cfg["normalize_activations"] == "none" and cfg["reshape_activations"] == "none"
    assert cfg["metadata"]["hook_name"] == SITE and cfg["metadata"]["model_name"] == "gpt2"
    if arch == "topk":
        assert cfg["k"] == K and cfg["rescale_acts_by_decoder_norm"] is False
    else:
        assert "k" not in cfg
    tensors = load_file(str(tmp_path / "sae" / "sae_weights.safetensors"))
    assert set(tensors) == TENSORS[arch]
    assert tensors["W_enc"].shape == (D_IN, D_SAE) and tensors["W_dec"].shape == (D_SAE, D_IN)
    assert all(t.dtype == torch.float32 for t in tensors.values())
    assert torch.equal(tensors["W_enc"], sae.W_enc.detach())
    if arch == "batchtopk":
        assert torch.equal(tensors["threshold"], torch.full((D_SAE,), 0.35))
    if arch == "jumprelu":
        torch.testing.assert_close(tensors["threshold"], sae.threshold.detach())
    if arch == "gated":
        assert torch.equal(tensors["b_gate"], sae.b_enc.detach())
        assert torch.equal(tensors["r_mag"], sae.r_mag.detach())


def test_sparsity_file_is_written_when_passed(tmp_path):
    sae = make("topk")
    sparsity = torch.linspace(-6, 0, D_SAE)
    save_saelens(sae, tmp_path / "sae", sparsity=sparsity)
    assert sorted(p.name for p in (tmp_path / "sae").iterdir()) == [
        "cfg.json",
        "sae_weights.safetensors",
        "sparsity.safetensors",
    ]
    stored = load_file(str(tmp_path / "sae" / "sparsity.safetensors"))
    assert set(stored) == {"sparsity"} and torch.equal(stored["sparsity"], sparsity)
    assert_same_outputs(sae, load_sae(tmp_path / "sae"), inputs())


def test_save_in_bfloat16(tmp_path):
    sae = make("jumprelu")
    sae.save(tmp_path / "sae", dtype=torch.bfloat16)
    cfg = json.loads((tmp_path / "sae" / "cfg.json").read_text())
    assert cfg["dtype"] == "bfloat16"
    tensors = load_file(str(tmp_path / "sae" / "sae_weights.safetensors"))
    assert all(t.dtype == torch.bfloat16 for t in tensors.values())
    back = load_sae(tmp_path / "sae")
    assert back.W_enc.dtype == torch.float32
    assert torch.equal(back.W_enc.detach(), sae.W_enc.detach().bfloat16().float())


def test_batchtopk_saved_as_jumprelu_loads_as_jumprelu_without_our_metadata(tmp_path):
    sae = make("batchtopk")
    sae.save(tmp_path / "sae")
    cfg_path = tmp_path / "sae" / "cfg.json"
    cfg = json.loads(cfg_path.read_text())
    assert cfg["metadata"]["interplab_arch"] == "batchtopk"
    del cfg["metadata"]["interplab_arch"], cfg["metadata"]["interplab"]
    cfg_path.write_text(json.dumps(cfg))
    plain = load_sae(tmp_path / "sae")
    assert type(plain) is JumpReLUSAE  # a SAELens jumprelu file, as any SAELens tool would see it
    assert_same_outputs(sae, plain, inputs())
    # a file that says batchtopk but holds per-latent thresholds is a JumpReLU, not a BatchTopK
    sae.save(tmp_path / "sae2")
    weights = load_file(str(tmp_path / "sae2" / "sae_weights.safetensors"))
    weights["threshold"] = torch.linspace(0.1, 0.9, D_SAE)
    save_file(weights, str(tmp_path / "sae2" / "sae_weights.safetensors"))
    varied = load_sae(tmp_path / "sae2")
    assert type(varied) is JumpReLUSAE
    torch.testing.assert_close(varied.threshold.detach(), weights["threshold"])


def test_saving_over_an_existing_folder_replaces_it(tmp_path):
    first, second = make("topk", seed=0), make("gated", seed=1)
    save_saelens(first, tmp_path / "sae", sparsity=torch.zeros(D_SAE))
    save_saelens(second, tmp_path / "sae")
    assert sorted(p.name for p in (tmp_path / "sae").iterdir()) == ["cfg.json", "sae_weights.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sae"], "no .saving-* or .old folder is left"
    back = load_sae(tmp_path / "sae")
    assert type(back) is GatedSAE
    assert_same_outputs(second, back, inputs())


def test_a_stale_old_folder_from_a_killed_save_does_not_block_saving(tmp_path):
    """A save killed between its two renames leaves ``sae.old`` behind; the next save must still work."""
    save_saelens(make("topk", seed=0), tmp_path / "sae")
    stale = tmp_path / "sae.old"
    stale.mkdir()
    (stale / "cfg.json").write_text("{}")
    newer = make("jumprelu", seed=2)
    save_saelens(newer, tmp_path / "sae")
    assert_same_outputs(newer, load_sae(tmp_path / "sae"), inputs())
    assert not any(p.name.startswith(".saving-") for p in tmp_path.iterdir())


def test_a_failed_save_leaves_the_old_folder_intact(tmp_path, monkeypatch):
    save_saelens(make("topk"), tmp_path / "sae")
    before = tree(tmp_path)

    def failing_write(filename, tensors, *args, **kwargs):
        Path(filename).write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(writer_mod, "write_safetensors", failing_write)
    with pytest.raises(OSError, match="disk full"):
        save_saelens(make("standard", seed=3), tmp_path / "sae")
    assert tree(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sae"]


def test_site_given_at_load_is_the_one_saved(tmp_path):
    make("topk").save(tmp_path / "a")
    moved = load_sae(tmp_path / "a", site="blocks.5.hook_resid_post")
    assert moved.site == "blocks.5.hook_resid_post"
    moved.save(tmp_path / "b")
    assert json.loads((tmp_path / "b" / "cfg.json").read_text())["metadata"]["hook_name"] == "blocks.5.hook_resid_post"
    assert load_sae(tmp_path / "b").site == "blocks.5.hook_resid_post"


# ---------------------------------------------------------- real sae-lens
SL_CLASSES = {
    "standard": "StandardSAE",
    "topk": "TopKSAE",
    "batchtopk": "JumpReLUSAE",
    "jumprelu": "JumpReLUSAE",
    "gated": "GatedSAE",
}


@pytest.mark.parametrize("apply_b_dec", [True, False])
@pytest.mark.parametrize("arch", ARCHS)
def test_our_file_loads_in_saelens_with_equal_outputs(tmp_path, arch, apply_b_dec):
    from sae_lens import SAE as SLSAE

    sae = make(arch, apply_b_dec=apply_b_dec)
    sae.save(tmp_path / "sae")
    sl = SLSAE.load_from_disk(tmp_path / "sae", device="cpu")
    assert type(sl).__name__ == SL_CLASSES[arch]
    assert sl.cfg.apply_b_dec_to_input is apply_b_dec
    assert sl.cfg.normalize_activations == "none"
    if arch == "topk":
        assert sl.cfg.k == K
    assert_same_outputs(sae, sl, inputs())


@pytest.mark.parametrize("arch", ARCHS)
def test_saelens_reads_our_hook_name_and_model_name(tmp_path, arch):
    from sae_lens import SAE as SLSAE

    make(arch).save(tmp_path / "sae")
    sl = SLSAE.load_from_disk(tmp_path / "sae", device="cpu")
    assert sl.cfg.metadata.hook_name == SITE
    assert sl.cfg.metadata.model_name == "gpt2"


def _saelens_sae(arch: str, apply_b_dec: bool = True, **extra):
    import sae_lens
    from sae_lens.saes.sae import SAEMetadata

    name = {"standard": "Standard", "topk": "TopK", "jumprelu": "JumpReLU", "gated": "Gated"}[arch]
    cfg_cls, cls = getattr(sae_lens, f"{name}SAEConfig"), getattr(sae_lens, f"{name}SAE")
    kw = {"k": K, **extra} if arch == "topk" else extra
    cfg = cfg_cls(
        d_in=D_IN,
        d_sae=D_SAE,
        apply_b_dec_to_input=apply_b_dec,
        metadata=SAEMetadata(hook_name=SITE, model_name="pythia-70m"),
        **kw,
    )
    sl = cls(cfg)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in sl.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            if name == "threshold":
                p.copy_(torch.rand(p.shape, generator=g) * 0.8 + 0.05)
    return sl


@pytest.mark.parametrize("apply_b_dec", [True, False])
@pytest.mark.parametrize("arch", ["standard", "topk", "jumprelu", "gated"])
def test_saelens_file_loads_here_with_equal_outputs(tmp_path, arch, apply_b_dec):
    sl = _saelens_sae(arch, apply_b_dec)
    sl.save_model(tmp_path / "sae")
    sae = load_sae(tmp_path / "sae")
    assert type(sae) is CLASSES[arch]
    assert (sae.site, sae.cfg.model_name, sae.cfg.apply_b_dec_to_input) == (SITE, "pythia-70m", apply_b_dec)
    if arch == "topk":
        assert sae.cfg.k == K
    assert_same_outputs(sl, sae, inputs())
    assert_same_outputs(sl, sae, inputs(seed=5).reshape(4, 16, D_IN))
    # and back out again: what we write from it, sae-lens reads with the same outputs
    from sae_lens import SAE as SLSAE

    sae.save(tmp_path / "again")
    assert_same_outputs(sl, SLSAE.load_from_disk(tmp_path / "again", device="cpu"), inputs())


def test_saelens_topk_with_decoder_norm_rescaling_loads_with_equal_outputs(tmp_path):
    sl = _saelens_sae("topk", rescale_acts_by_decoder_norm=True)
    norms = sl.W_dec.detach().norm(dim=1)
    assert (norms - 1).abs().max() > 0.1, "decoder rows must not be unit norm for this check"
    sl.save_model(tmp_path / "sae")
    sae = load_sae(tmp_path / "sae")
    assert_same_outputs(sl, sae, inputs())
    with torch.no_grad():
        torch.testing.assert_close(sae(inputs()), sl(inputs()), atol=ATOL, rtol=1e-5)


PRE_6_CFG = {
    "model_name": "gpt2-small",
    "hook_point": "blocks.2.hook_resid_pre",
    "hook_point_layer": 2,
    "hook_point_head_index": None,
    "d_in": D_IN,
    "d_sae": D_SAE,
    "dtype": "float32",
    "device": "cpu",
    "apply_b_dec_to_input": True,
    "normalize_activations": "none",
    "context_size": 128,
    "prepend_bos": True,
    "dataset_path": "Skylion007/openwebtext",
    "sae_lens_training_version": "3.13.0",
}


@pytest.mark.parametrize("fn", ["relu", "topk"])
def test_pre_6_flat_config_loads_like_saelens_loads_it(tmp_path, fn):
    from sae_lens import SAE as SLSAE

    cfg = {**PRE_6_CFG, "activation_fn_str": fn}
    if fn == "topk":
        cfg["activation_fn_kwargs"] = {"k": K}
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "cfg.json").write_text(json.dumps(cfg))
    g = torch.Generator().manual_seed(11)
    weights = {
        "W_enc": torch.randn(D_IN, D_SAE, generator=g) * 0.5,
        "W_dec": torch.randn(D_SAE, D_IN, generator=g),
        "b_enc": torch.randn(D_SAE, generator=g) * 0.5,
        "b_dec": torch.randn(D_IN, generator=g),
    }
    save_file(weights, str(folder / "sae_weights.safetensors"))
    sae = load_sae(folder)
    assert type(sae) is (TopKSAE if fn == "topk" else StandardSAE)
    assert sae.site == "blocks.2.hook_resid_pre" and sae.cfg.model_name == "gpt2-small"
    if fn == "topk":
        assert sae.cfg.k == K
    sl = SLSAE.load_from_disk(folder, device="cpu")
    assert type(sl).__name__ == ("TopKSAE" if fn == "topk" else "StandardSAE")
    assert_same_outputs(sl, sae, inputs())
    x = inputs()
    pre = (x - weights["b_dec"]) @ weights["W_enc"] + weights["b_enc"]
    want = pre.relu()
    if fn == "topk":
        top = pre.topk(K, dim=-1)
        want = torch.zeros_like(pre).scatter_(-1, top.indices, top.values.relu())
    torch.testing.assert_close(sae.encode(x).detach(), want)


# ---------------------------------------------------------------- Gemma Scope
def gemma_params(seed: int = 0, lowercase: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = {
        "W_enc": rng.normal(size=(D_IN, D_SAE)).astype(np.float32) * 0.5,
        "W_dec": rng.normal(size=(D_SAE, D_IN)).astype(np.float32) * 0.5,
        "b_enc": rng.normal(size=D_SAE).astype(np.float32) * 0.5,
        "b_dec": rng.normal(size=D_IN).astype(np.float32),
        "threshold": rng.uniform(0.05, 0.8, size=D_SAE).astype(np.float32),
    }
    return {k.replace("W_", "w_"): v for k, v in p.items()} if lowercase else p


def gemma_by_hand(p: dict[str, np.ndarray], x: torch.Tensor) -> torch.Tensor:
    """Gemma Scope's JumpReLU: b_dec is not subtracted from the input; fire iff pre > threshold."""
    t = {k.replace("w_", "W_"): torch.from_numpy(v) for k, v in p.items()}
    pre = x @ t["W_enc"] + t["b_enc"]
    return (pre > t["threshold"]) * pre.relu()


@pytest.mark.parametrize(
    ("release", "site"),
    [
        ("gemma-scope-2b-pt-res", "blocks.12.hook_resid_post"),
        ("gemma-scope-9b-it-mlp", "blocks.12.hook_mlp_out"),
        ("gemma-scope-2b-pt-att", "blocks.12.attn.hook_z"),
    ],
)
def test_gemma_scope_params_npz(tmp_path, release, site):
    folder = tmp_path / release / "layer_12" / "width_16k" / "average_l0_82"
    folder.mkdir(parents=True)
    p = gemma_params()
    np.savez(folder / "params.npz", **p)
    x = inputs()
    for path in (folder / "params.npz", folder):
        sae = load_sae(path)
        assert type(sae) is JumpReLUSAE
        assert sae.cfg.apply_b_dec_to_input is False and sae.site == site
        assert (sae.d_in, sae.d_sae) == (D_IN, D_SAE)
        acts = sae.encode(x).detach()
        torch.testing.assert_close(acts, gemma_by_hand(p, x), atol=ATOL, rtol=1e-5)
        assert (acts != 0).any() and (acts == 0).any()
        torch.testing.assert_close(
            sae.decode(acts).detach(), acts @ torch.from_numpy(p["W_dec"]) + torch.from_numpy(p["b_dec"])
        )
    assert load_sae(folder / "params.npz", site="blocks.3.hook_resid_post").site == "blocks.3.hook_resid_post"
    assert sorted(q.name for q in folder.iterdir()) == ["params.npz"], "loading writes nothing"


def test_gemma_scope_lowercase_keys(tmp_path):
    p = gemma_params(seed=2, lowercase=True)
    path = tmp_path / "gemma-scope-2b-pt-res" / "layer_3" / "width_16k" / "average_l0_20" / "params.npz"
    path.parent.mkdir(parents=True)
    np.savez(path, **p)
    sae = load_sae(path)
    assert sae.site == "blocks.3.hook_resid_post"
    x = inputs()
    torch.testing.assert_close(sae.encode(x).detach(), gemma_by_hand(p, x), atol=ATOL, rtol=1e-5)


def test_gemma_scope_npz_with_pickled_objects_is_refused(tmp_path):
    marker = tmp_path / "unpickled"
    path = tmp_path / "gemma-scope-2b-pt-res" / "layer_1" / "params.npz"
    path.parent.mkdir(parents=True)
    arrays = gemma_params()
    arrays["threshold"] = np.array([Evil(marker)], dtype=object)
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=r"params\.npz.*pickled objects are refused"):
        load_sae(path)
    assert not marker.exists()


# ------------------------------------------------------- dictionary_learning
def dl_folder(tmp_path: Path, dict_class: str, state: dict, **trainer) -> Path:
    folder = tmp_path / "trainer_0"
    folder.mkdir()
    torch.save(state, folder / "ae.pt")
    config = {
        "trainer": {
            "dict_class": dict_class,
            "activation_dim": D_IN,
            "dict_size": D_SAE,
            "layer": 3,
            "lm_name": "EleutherAI/pythia-70m-deduped",
            **trainer,
        },
        "buffer": {"d_submodule": D_IN, "ctx_len": 128},
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def dl_state(seed: int = 0) -> dict[str, torch.Tensor]:
    """A dictionary_learning AutoEncoder state dict: nn.Linear layouts, ``bias`` is the decoder bias."""
    g = torch.Generator().manual_seed(seed)
    return {
        "encoder.weight": torch.randn(D_SAE, D_IN, generator=g) * 0.5,
        "encoder.bias": torch.randn(D_SAE, generator=g) * 0.5,
        "decoder.weight": torch.randn(D_IN, D_SAE, generator=g) * 0.5,
        "bias": torch.randn(D_IN, generator=g),
    }


def test_dictionary_learning_autoencoder(tmp_path):
    state = dl_state()
    sae = load_sae(dl_folder(tmp_path, "AutoEncoder", state))
    assert type(sae) is StandardSAE
    assert sae.site == "blocks.3.hook_resid_post" and sae.cfg.model_name == "EleutherAI/pythia-70m-deduped"
    assert torch.equal(sae.W_enc.detach(), state["encoder.weight"].T)
    assert torch.equal(sae.W_dec.detach(), state["decoder.weight"].T)
    assert torch.equal(sae.b_dec.detach(), state["bias"]) and torch.equal(sae.b_enc.detach(), state["encoder.bias"])
    # dictionary_learning's AutoEncoder: f = relu(encoder(x - bias)); x_hat = decoder(f) + bias
    x = inputs()
    f = torch.nn.functional.linear(x - state["bias"], state["encoder.weight"], state["encoder.bias"]).relu()
    x_hat = torch.nn.functional.linear(f, state["decoder.weight"]) + state["bias"]
    with torch.no_grad():
        torch.testing.assert_close(sae.encode(x), f)
        torch.testing.assert_close(sae(x), x_hat, atol=ATOL, rtol=1e-5)
    assert (f == 0).any() and (f > 0).any()


def test_dictionary_learning_autoencoder_topk(tmp_path):
    g = torch.Generator().manual_seed(4)
    state = {
        "encoder.weight": torch.randn(D_SAE, D_IN, generator=g) * 0.5,
        "encoder.bias": torch.randn(D_SAE, generator=g) * 0.5,
        "decoder.weight": torch.randn(D_IN, D_SAE, generator=g) * 0.5,
        "b_dec": torch.randn(D_IN, generator=g),
        "k": torch.tensor(K),
        "threshold": torch.tensor(-1.0),
    }
    sae = load_sae(dl_folder(tmp_path, "AutoEncoderTopK", state, k=K))
    assert type(sae) is TopKSAE and sae.cfg.k == K
    # dictionary_learning's AutoEncoderTopK: relu(encoder(x - b_dec)), keep the top k
    x = inputs()
    post_relu = torch.nn.functional.linear(x - state["b_dec"], state["encoder.weight"], state["encoder.bias"]).relu()
    top = post_relu.topk(K, dim=-1)
    f = torch.zeros_like(post_relu).scatter_(-1, top.indices, top.values)
    x_hat = f @ state["decoder.weight"].T + state["b_dec"]
    with torch.no_grad():
        torch.testing.assert_close(sae.encode(x), f)
        torch.testing.assert_close(sae(x), x_hat, atol=ATOL, rtol=1e-5)


def test_dictionary_learning_batchtopk_uses_its_threshold(tmp_path):
    state = {
        **{k: v for k, v in dl_state(seed=6).items() if k != "bias"},
        "b_dec": torch.randn(D_IN),
        "k": torch.tensor(K),
        "threshold": torch.tensor(0.4),
    }
    sae = load_sae(dl_folder(tmp_path, "BatchTopKSAE", state, k=K))
    assert type(sae) is BatchTopKSAE and float(sae.topk_threshold) == pytest.approx(0.4)
    x = inputs()
    post_relu = torch.nn.functional.linear(x - state["b_dec"], state["encoder.weight"], state["encoder.bias"]).relu()
    torch.testing.assert_close(sae.encode(x).detach(), post_relu * (post_relu > 0.4))


def test_dictionary_learning_pickled_object_is_refused(tmp_path):
    marker = tmp_path / "unpickled"
    state = {**dl_state(), "evil": Evil(marker)}
    folder = dl_folder(tmp_path, "AutoEncoder", state)
    with pytest.raises(ValueError, match=r"ae\.pt.*not a plain state dict"):
        load_sae(folder)
    assert not marker.exists(), "the file was unpickled"


# ---------------------------------------------------------------- bad files
def _saelens_folder(tmp_path: Path, cfg_update=None, weights=None) -> Path:
    sae = make("standard")
    sae.save(tmp_path / "bad")
    if cfg_update is not None:
        cfg = json.loads((tmp_path / "bad" / "cfg.json").read_text())
        cfg.update(cfg_update)
        (tmp_path / "bad" / "cfg.json").write_text(json.dumps(cfg))
    if weights is not None:
        weights(tmp_path / "bad" / "sae_weights.safetensors")
    return tmp_path / "bad"


def _torch_save_pickle(path: Path) -> None:
    torch.save({"W_enc": torch.zeros(D_IN, D_SAE), "evil": Evil(path.parent.parent / "unpickled")}, path)


def _plain_pickle(path: Path) -> None:
    path.write_bytes(pickle.dumps({"W_enc": Evil(path.parent.parent / "unpickled")}))


def _wrong_shape(path: Path) -> None:
    w = load_file(str(path))
    w["W_enc"] = torch.zeros(D_IN, D_SAE + 1)
    save_file(w, str(path))


def _missing_tensor(path: Path) -> None:
    w = load_file(str(path))
    del w["b_dec"]
    save_file(w, str(path))


@pytest.mark.parametrize(
    ("make_bad", "exc", "match"),
    [
        (
            lambda t: (t / "empty").mkdir() or t / "empty",
            ValueError,
            r"empty'? is not an SAE.*SAELens folder.*Gemma Scope params\.npz.*dictionary_learning",
        ),
        (lambda t: t / "nowhere", FileNotFoundError, r"nowhere.*SAELens folder"),
        (lambda t: _saelens_folder(t, weights=_torch_save_pickle), ValueError, r"sae_weights\.safetensors.*pickle"),
        (lambda t: _saelens_folder(t, weights=_plain_pickle), ValueError, r"sae_weights\.safetensors.*pickle"),
        (
            lambda t: (_saelens_folder(t) / "cfg.json").write_text("{'d_in': 16,") and t / "bad",
            ValueError,
            r"cfg\.json.*not valid JSON",
        ),
        (
            lambda t: _saelens_folder(t, weights=_wrong_shape),
            ValueError,
            rf"sae_weights\.safetensors': W_enc has shape \[{D_IN}, {D_SAE + 1}\], expected \[{D_IN}, {D_SAE}\]",
        ),
        (
            lambda t: _saelens_folder(t, weights=_missing_tensor),
            ValueError,
            r"sae_weights\.safetensors': b_dec is missing",
        ),
        (
            lambda t: _saelens_folder(t, {"normalize_activations": "expected_average_only_in"}),
            ValueError,
            r"cfg\.json': normalize_activations is 'expected_average_only_in'",
        ),
        (
            lambda t: _saelens_folder(t, {"architecture": "crosscoder"}),
            ValueError,
            r"cfg\.json': architecture is 'crosscoder', which is not supported.*gated.*jumprelu.*standard.*topk",
        ),
        (
            lambda t: _saelens_folder(t, {"architecture": "transcoder", "d_out": D_IN}),
            ValueError,
            r"cfg\.json': apply_b_dec_to_input is true, which a transcoder cannot have",
        ),
        (
            lambda t: _saelens_folder(
                t, {"architecture": "skip_transcoder", "d_out": D_IN, "apply_b_dec_to_input": False}
            ),
            ValueError,
            r"sae_weights\.safetensors': W_skip is missing",
        ),
        (
            lambda t: _saelens_folder(t, {"architecture": "transcoder", "apply_b_dec_to_input": False}),
            ValueError,
            r"cfg\.json': d_out is missing",
        ),
    ],
    ids=[
        "not-an-sae",
        "missing",
        "torch-save-pickle",
        "plain-pickle",
        "bad-json",
        "shape-mismatch",
        "missing-tensor",
        "normalize",
        "unknown-arch",
        "transcoder-b-dec-in",
        "skip-without-W_skip",
        "transcoder-without-d_out",
    ],
)
def test_bad_files_give_clear_errors_and_write_nothing(tmp_path, make_bad, exc, match):
    path = make_bad(tmp_path)
    before = tree(tmp_path)
    with pytest.raises(exc, match=match):
        load_sae(path)
    assert tree(tmp_path) == before, "a refused load writes nothing"
    assert not (tmp_path / "unpickled").exists(), "the file was unpickled"


def test_embedded_suite_loads_and_names_its_layers():
    from interplab.core.saes.pretrained import embedded_layers

    layers = embedded_layers()
    assert layers == [0, 3, 6, 9, 12, 15]
    sae = load_sae("embedded", layer=6)
    assert type(sae).__name__ == "BatchTopKSAE" and (sae.d_in, sae.d_sae, sae.cfg.k) == (640, 4096, 32)
    assert sae.site == "blocks.6.hook_resid_post" and float(sae.topk_threshold) > 0
    assert sae.cfg.metadata["evaluation"]["explained_variance"] > 0.5
    with pytest.raises(ValueError, match=r"layer=7.*\[0, 3, 6, 9, 12, 15\]"):
        load_sae("embedded", layer=7)


# ------------------------------------------------------------ untrusted files
def saelens_folder(tmp_path: Path, arch: str = "standard", **cfg_update) -> Path:  # type: ignore[no-untyped-def]
    """A SAELens folder of a fresh SAE with ``cfg_update`` written into its cfg.json (KeyError: the key removed)."""
    kwargs = {"k": 4} if arch in ("topk", "batchtopk") else {}
    SAE.create(arch, d_in=D_IN, d_sae=D_SAE, **kwargs).save(tmp_path / "sae")
    cfg = json.loads((tmp_path / "sae" / "cfg.json").read_text())
    for key, value in cfg_update.items():
        if value is KeyError:
            cfg.pop(key)
        else:
            cfg[key] = value
    (tmp_path / "sae" / "cfg.json").write_text(json.dumps(cfg))
    return tmp_path / "sae"


@pytest.mark.parametrize(
    ("update", "match"),
    [
        ({"d_sae": 400_000}, r"sae_weights\.safetensors': W_enc has shape \[16, 48\], expected \[16, 400000\]"),
        ({"d_sae": 10**12}, r"sae_weights\.safetensors': W_enc has shape \[16, 48\], expected \[16, 1000000000000\]"),
        ({"d_sae": "48"}, r"cfg\.json': d_sae must be an integer, got str '48'"),
        ({"d_in": 8.9}, r"cfg\.json': d_in must be an integer, got 8\.9"),
        ({"d_in": KeyError}, r"cfg\.json': d_in is missing"),
        ({"apply_b_dec_to_input": "yes"}, r"cfg\.json': apply_b_dec_to_input must be true or false, got str 'yes'"),
        ({"metadata": "none"}, r"cfg\.json': metadata must be a JSON object, got str"),
        ({"architecture": 3}, r"cfg\.json': architecture must be a string"),
    ],
)
def test_an_untrusted_config_is_checked_before_anything_is_allocated(tmp_path, monkeypatch, update, match):
    folder = saelens_folder(tmp_path, **update)

    def allocate(*_a, **_k):  # type: ignore[no-untyped-def]
        raise AssertionError("memory was allocated before the config was validated")

    monkeypatch.setattr(SAE, "__init__", allocate)
    with pytest.raises(FileError, match=match):
        load_sae(folder)


@pytest.mark.parametrize(("arch", "tensor"), [("jumprelu", "threshold"), ("gated", "b_mag"), ("gated", "r_mag")])
def test_a_missing_tensor_is_named_with_its_file(tmp_path, arch, tensor):
    folder = saelens_folder(tmp_path, arch)
    weights = load_file(str(folder / "sae_weights.safetensors"))
    del weights[tensor]
    save_file(weights, str(folder / "sae_weights.safetensors"))
    with pytest.raises(FileError, match=rf"sae_weights\.safetensors': {tensor} is missing"):
        load_sae(folder)


def test_a_topk_k_that_is_not_an_integer_is_refused(tmp_path):
    with pytest.raises(FileError, match=r"cfg\.json': k must be an integer, got 8\.9"):
        load_sae(saelens_folder(tmp_path, "topk", k=8.9))


def test_a_gemma_scope_file_with_a_wrong_shape_is_named(tmp_path):
    npz = tmp_path / "gemma-scope-2b-pt-res" / "layer_1" / "params.npz"
    npz.parent.mkdir(parents=True)
    np.savez(
        npz,
        W_enc=np.zeros((4, 8), np.float32),
        W_dec=np.zeros((8, 4), np.float32),
        b_enc=np.zeros(7, np.float32),
        b_dec=np.zeros(4, np.float32),
        threshold=np.zeros(8, np.float32),
    )
    with pytest.raises(FileError, match=r"params\.npz': b_enc has shape \[7\], expected \[8\]"):
        load_sae(npz)
