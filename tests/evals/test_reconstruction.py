"""evaluate(): splicing an SAE into tiny models of every family, against independent references.

References are computed without interplab: the Hugging Face model's own loss, torch hooks on
the Hugging Face modules, and brute-force statistics of ``sae.encode`` on collected activations.
The last test (marked ``embedded``) uses the real Gemma 3 270M.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

import interplab as ilab
from interplab import SAE
from tests.tiny import TEXTS, tiny_config, tiny_hf_model, tiny_model, tiny_tokenizer

ATOL = 1e-5
KINDS = ("hook_resid_pre", "hook_resid_post", "hook_mlp_out", "hook_attn_out", "attn.hook_z")
N_TOKENS = 6 + 14 + 9  # tokens of TEXTS without BOS

# Hand-written module paths per family (independent of interplab's site table): (path, "input"/"output").
HF_SITES = {
    "gpt2": {
        "hook_resid_pre": ("transformer.h.{L}", "input"),
        "hook_resid_post": ("transformer.h.{L}", "output"),
        "hook_attn_out": ("transformer.h.{L}.attn", "output"),
        "hook_mlp_out": ("transformer.h.{L}.mlp", "output"),
        "attn.hook_z": ("transformer.h.{L}.attn.c_proj", "input"),
    },
    "gemma3": {
        "hook_resid_pre": ("model.layers.{L}", "input"),
        "hook_resid_post": ("model.layers.{L}", "output"),
        "hook_attn_out": ("model.layers.{L}.post_attention_layernorm", "output"),
        "hook_mlp_out": ("model.layers.{L}.post_feedforward_layernorm", "output"),
        "attn.hook_z": ("model.layers.{L}.self_attn.o_proj", "input"),
    },
    "llama": {
        "hook_resid_pre": ("model.layers.{L}", "input"),
        "hook_resid_post": ("model.layers.{L}", "output"),
        "hook_attn_out": ("model.layers.{L}.self_attn", "output"),
        "hook_mlp_out": ("model.layers.{L}.mlp", "output"),
        "attn.hook_z": ("model.layers.{L}.self_attn.o_proj", "input"),
    },
    "neox": {
        "hook_resid_pre": ("gpt_neox.layers.{L}", "input"),
        "hook_resid_post": ("gpt_neox.layers.{L}", "output"),
        "hook_attn_out": ("gpt_neox.layers.{L}.attention", "output"),
        "hook_mlp_out": ("gpt_neox.layers.{L}.mlp", "output"),
        "attn.hook_z": ("gpt_neox.layers.{L}.attention.dense", "input"),
    },
}


def sharp_hf(family: str) -> torch.nn.Module:
    """A tiny model with 5x the default init scale, so that every site matters to the loss.

    At the default 0.02 the tiny models are near-uniform and zeroing some sites moves the loss
    by less than 1e-3; at 0.1 every site of every family moves it by at least 5e-3.
    """
    cfg = tiny_config(family)
    cfg.initializer_range = 0.1
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg).eval()


def sharp_model(family: str, remote: bool | str = False) -> ilab.Model:
    return ilab.load_model(sharp_hf(family), tokenizer=tiny_tokenizer(), remote=remote)


def site_name(layer: int, kind: str) -> str:
    return f"blocks.{layer}.{kind}"


def identity_sae(d: int, site: str | None, arch: str = "topk") -> SAE:
    """x -> relu(x) - relu(-x) = x exactly: W_enc = [I, -I], W_dec = [I; -I], no biases."""
    extra = {"k": d} if arch in ("topk", "batchtopk") else {}
    sae = SAE.create(arch, d_in=d, d_sae=2 * d, site=site or "", apply_b_dec_to_input=False, **extra)
    eye = torch.eye(d)
    with torch.no_grad():
        sae.W_enc.copy_(torch.cat([eye, -eye], 1))
        sae.W_dec.copy_(torch.cat([eye, -eye], 0))
        sae.b_enc.zero_()
        sae.b_dec.zero_()
        if arch == "jumprelu":
            sae.log_threshold.fill_(-math.inf)  # threshold 0: a plain ReLU
    return sae


def zero_sae(d: int, site: str) -> SAE:
    sae = SAE.create("topk", d_in=d, d_sae=2 * d, k=4, site=site)
    with torch.no_grad():
        sae.W_dec.zero_()
        sae.b_dec.zero_()
    return sae


def random_sae(arch: str, d: int, site: str, d_sae: int = 96, seed: int = 1) -> SAE:
    """A random SAE with latents 0..9 forced dead and 10..12 forced on (by b_enc; tiny-model pre-acts are ~0.03)."""
    extra = {"k": 12} if arch in ("topk", "batchtopk") else {}
    sae = SAE.create(arch, d_in=d, d_sae=d_sae, site=site, **extra)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        sae.W_enc.copy_(torch.randn(d, d_sae, generator=gen) / math.sqrt(d))
        sae.b_enc.copy_(torch.randn(d_sae, generator=gen) * 0.02)
        sae.b_enc[:10] = -5.0
        sae.b_enc[10:13] = 5.0
        if arch == "gated":
            sae.b_mag[10:13] = 5.0  # the magnitude path must be positive too
        sae.b_dec.copy_(torch.randn(d, generator=gen) * 0.1)
    return sae


# ------------------------------------------------------------- references
def hf_module(hf: torch.nn.Module, family: str, site: str) -> tuple[torch.nn.Module, str]:
    layer, kind = int(site.split(".")[1]), site.split(".", 2)[2]
    path, io = HF_SITES[family][kind]
    return hf.get_submodule(path.format(L=layer)), io


def _zero_after_bos(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t[:, 1:] = 0.0
    return t


def zero_hook(module: torch.nn.Module, io: str):
    """A plain torch hook that zeroes the module's output (or input) at every non-BOS position."""
    if io == "output":

        def hook(_mod, _args, out):
            return (_zero_after_bos(out[0]), *out[1:]) if isinstance(out, tuple) else _zero_after_bos(out)

        return module.register_forward_hook(hook)

    def pre_hook(_mod, args, kwargs):
        if args:
            return (_zero_after_bos(args[0]), *args[1:]), kwargs
        kwargs["hidden_states"] = _zero_after_bos(kwargs["hidden_states"])
        return args, kwargs

    return module.register_forward_pre_hook(pre_hook, with_kwargs=True)


def hf_per_text(hf: torch.nn.Module, texts=TEXTS) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(input_ids, log-probs of every next token [n-1, vocab], HF's own loss) for each text run alone."""
    tok = tiny_tokenizer()
    out = []
    for text in texts:
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            res = hf(**enc, labels=enc["input_ids"])
        out.append((enc["input_ids"][0], torch.log_softmax(res.logits[0, :-1].double(), -1), res.loss))
    return out


def ce_of(runs) -> float:
    """Next-token NLL averaged over every predicted position of every text (tokens weighted equally)."""
    nll = [-lp.gather(-1, ids[1:, None])[:, 0] for ids, lp, _ in runs]
    return float(torch.cat(nll).mean())


# ------------------------------------------------------- identity and zero
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layer", [0, 1])
def test_identity_sae_changes_nothing(family, kind, layer):
    model = sharp_model(family)
    site = site_name(layer, kind)
    sae = identity_sae(model.site_dim(site), site)
    res = ilab.evaluate(sae, model, TEXTS)
    assert res.n_tokens == N_TOKENS
    assert res.ce_spliced == pytest.approx(res.ce_clean, abs=ATOL)
    assert abs(res.kl_spliced) < 1e-6
    assert res.mse == pytest.approx(0.0, abs=1e-10)
    assert res.explained_variance == pytest.approx(1.0, abs=1e-6)
    assert abs(res.ce_zero_ablation - res.ce_clean) > 5e-3  # else "recovered" would be ill-conditioned
    assert res.ce_loss_recovered == pytest.approx(1.0, abs=1e-4)
    assert res.l0 == pytest.approx(model.site_dim(site), abs=0.5)  # one of relu(x), relu(-x) per dim


@pytest.mark.parametrize("arch", ["standard", "jumprelu", "batchtopk"])
def test_identity_sae_other_architectures(arch):
    model = sharp_model("llama")
    site = "blocks.1.hook_resid_post"
    res = ilab.evaluate(identity_sae(32, site, arch), model, TEXTS)
    assert res.ce_spliced == pytest.approx(res.ce_clean, abs=ATOL)
    assert res.explained_variance == pytest.approx(1.0, abs=1e-6)
    assert res.ce_loss_recovered == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_zero_sae_equals_zero_ablation(family, kind):
    model = sharp_model(family)
    site = site_name(1, kind)
    res = ilab.evaluate(zero_sae(model.site_dim(site), site), model, TEXTS)
    assert res.ce_spliced == pytest.approx(res.ce_zero_ablation, abs=ATOL)
    assert abs(res.ce_zero_ablation - res.ce_clean) > 5e-3
    assert res.ce_loss_recovered == pytest.approx(0.0, abs=1e-3)
    assert res.kl_spliced > 1e-4
    assert res.l0 == 4.0  # the encoder is untouched; only the decoder is zero
    # mse of a zero reconstruction is the mean squared norm of the activations
    acts = model.collect(TEXTS, site)
    keep = acts.mask.clone()
    keep[:, 0] = False
    x = acts[site][keep].double()
    assert res.mse == pytest.approx(float(x.pow(2).sum(-1).mean()), rel=1e-5)


# ------------------------------------------------ independent references
@pytest.mark.parametrize("batch_size", [4, 1])
def test_ce_clean_equals_hf_loss(family, batch_size):
    model = tiny_model(family)
    res = ilab.evaluate(zero_sae(32, "blocks.0.hook_resid_post"), model, TEXTS, batch_size=batch_size)
    runs = hf_per_text(tiny_hf_model(family))
    n_pred = [len(ids) - 1 for ids, _, _ in runs]
    hf_loss = sum(float(loss) * n for (_, _, loss), n in zip(runs, n_pred)) / sum(n_pred)
    assert sum(n_pred) == N_TOKENS
    assert res.ce_clean == pytest.approx(hf_loss, abs=ATOL)
    assert res.ce_clean == pytest.approx(ce_of(runs), abs=ATOL)
    assert 2.0 < res.ce_clean < 6.0  # a random 64-token model: about log(64) = 4.16


def test_ce_clean_with_logit_softcapping_matches_hf():
    cfg = tiny_config("gemma3")
    cfg.initializer_range = 0.1
    cfg.final_logit_softcapping = 1.0  # small enough to change the loss a lot
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(cfg).eval()
    model = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    res = ilab.evaluate(identity_sae(32, "blocks.1.hook_resid_post"), model, TEXTS)
    runs = hf_per_text(hf)
    assert res.ce_clean == pytest.approx(ce_of(runs), abs=ATOL)
    assert res.ce_spliced == pytest.approx(res.ce_clean, abs=ATOL)
    uncapped = hf_per_text(sharp_hf("gemma3"))  # the same weights without the cap
    assert abs(ce_of(uncapped) - ce_of(runs)) > 1e-2  # the softcap really mattered


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layer", [0, 1])
def test_zero_ablation_matches_torch_hook(family, kind, layer):
    model = sharp_model(family)
    site = site_name(layer, kind)
    res = ilab.evaluate(zero_sae(model.site_dim(site), site), model, TEXTS)
    hf = sharp_hf(family)  # a separate copy with the same weights
    clean = hf_per_text(hf)
    module, io = hf_module(hf, family, site)
    handle = zero_hook(module, io)
    try:
        ablated = hf_per_text(hf)
    finally:
        handle.remove()
    assert abs(ce_of(ablated) - ce_of(clean)) > 5e-3  # the ablation matters
    assert res.ce_clean == pytest.approx(ce_of(clean), abs=ATOL)
    assert res.ce_zero_ablation == pytest.approx(ce_of(ablated), abs=ATOL)
    assert res.ce_spliced == pytest.approx(ce_of(ablated), abs=ATOL)
    kl = torch.cat([(c.exp() * (c - a)).sum(-1) for (_, c, _), (_, a, _) in zip(clean, ablated)]).mean()
    assert res.kl_spliced == pytest.approx(float(kl), abs=ATOL)


# --------------------------------------------------------------- sparsity
def brute_force(sae: SAE, model, site: str, texts=TEXTS, dense_threshold: float = 0.1) -> dict:
    acts = model.collect(texts, site)
    keep = acts.mask.clone()
    keep[:, 0] = False  # BOS excluded
    x = acts[site][keep]
    with torch.no_grad():
        lat = sae.encode(x)
        recon = sae.decode(lat)
    active = lat > 0
    density = active.double().mean(0).numpy()
    err = (recon - x).double().pow(2).sum()
    var = (x.double() - x.double().mean(0)).pow(2).sum()
    return {
        "n_tokens": len(x),
        "l0": float(active.sum(1).double().mean()),
        "density": density,
        "dead_fraction": float((density == 0).mean()),
        "dense_fraction": float((density > dense_threshold).mean()),
        "mse": float(err) / len(x),
        "explained_variance": 1 - float(err / var),
    }


@pytest.mark.parametrize("arch", ["topk", "batchtopk", "standard", "jumprelu", "gated"])
def test_sparsity_stats_match_brute_force(arch):
    model = tiny_model("gpt2")
    site = "blocks.1.hook_resid_post"
    sae = random_sae(arch, 32, site)
    res = ilab.evaluate(sae, model, TEXTS, batch_size=2, dense_threshold=0.3)
    ref = brute_force(sae, model, site, dense_threshold=0.3)
    assert res.n_tokens == ref["n_tokens"] == N_TOKENS
    assert res.l0 == pytest.approx(ref["l0"], abs=1e-9)
    np.testing.assert_allclose(res.density, ref["density"], atol=1e-12)
    assert res.dead_fraction == pytest.approx(ref["dead_fraction"], abs=1e-12)
    assert res.dense_fraction == pytest.approx(ref["dense_fraction"], abs=1e-12)
    assert res.mse == pytest.approx(ref["mse"], rel=1e-5)
    assert 1 - res.explained_variance == pytest.approx(1 - ref["explained_variance"], rel=1e-5)
    # the forced latents are where they should be
    assert res.dead_fraction >= 10 / 96 and (res.density[:10] == 0).all()
    assert (res.density[10:13] == 1.0).all() and res.dense_fraction >= 3 / 96
    assert ((res.density > 0) & (res.density < 0.3)).sum() >= 5  # and the rest fire at varied rates
    counts, edges = res.density_histogram()
    assert counts.sum() == int((res.density > 0).sum()) == 96 - int((res.density == 0).sum())
    assert len(edges) == len(counts) + 1 and edges[-1] == 0.0
    counts5, _ = res.density_histogram(bins=5)
    assert len(counts5) == 5 and counts5.sum() == counts.sum()


def test_density_histogram_all_dead():
    model = tiny_model("gpt2")
    site = "blocks.0.hook_resid_post"
    sae = random_sae("standard", 32, site)
    with torch.no_grad():
        sae.b_enc.fill_(-1e4)
    res = ilab.evaluate(sae, model, TEXTS)
    assert res.l0 == 0.0 and res.dead_fraction == 1.0 and res.dense_fraction == 0.0
    counts, edges = res.density_histogram(bins=7)
    assert counts.sum() == 0 and len(counts) == 7 and len(edges) == 8


def test_batch_size_does_not_change_results():
    model = sharp_model("neox")
    site = "blocks.1.hook_mlp_out"
    sae = random_sae("topk", 32, site)
    a, b = (ilab.evaluate(sae, model, TEXTS, batch_size=bs) for bs in (1, 4))
    for key, value in a.to_dict().items():
        assert value == pytest.approx(b.to_dict()[key], rel=1e-6, abs=1e-5), key
    np.testing.assert_array_equal(a.density, b.density)


def test_result_repr_and_dict():
    model = tiny_model("gpt2")
    site = "blocks.0.hook_resid_post"
    res = ilab.evaluate(random_sae("topk", 32, site), model, TEXTS)
    d = res.to_dict()
    assert "density" not in d and set(d) >= {"mse", "explained_variance", "l0", "ce_loss_recovered", "kl_spliced"}
    assert all(math.isfinite(v) for v in d.values())
    assert repr(res).startswith("SAEEvaluation(") and "ce_loss_recovered" in repr(res)
    assert res.density.shape == (96,)


def test_site_argument_overrides_missing_site():
    model = tiny_model("llama")
    res = ilab.evaluate(identity_sae(32, None), model, TEXTS, site="blocks.0.hook_attn_out")
    assert res.explained_variance == pytest.approx(1.0, abs=1e-6)


def test_remote_local_equals_local(family):
    site = site_name(1, "hook_mlp_out")
    local, remote = tiny_model(family), tiny_model(family, remote="local")
    sae = random_sae("topk", 32, site)
    a, b = ilab.evaluate(sae, local, TEXTS), ilab.evaluate(sae, remote, TEXTS)
    for key, value in a.to_dict().items():
        assert value == pytest.approx(b.to_dict()[key], rel=1e-6, abs=1e-6), key
    np.testing.assert_array_equal(a.density, b.density)


def test_remote_local_identity_hook_z():
    model = sharp_model("gemma3", remote="local")
    site = "blocks.1.attn.hook_z"
    res = ilab.evaluate(identity_sae(64, site), model, TEXTS)
    assert res.ce_spliced == pytest.approx(res.ce_clean, abs=ATOL)
    assert res.ce_loss_recovered == pytest.approx(1.0, abs=1e-4)


# --------------------------------------------------------------- bad input
def test_wrong_width_names_both():
    model = tiny_model("gpt2")
    sae = SAE.create("topk", d_in=16, d_sae=64, k=4, site="blocks.0.hook_resid_post")
    with pytest.raises(ValueError, match=r"d_in=16.*width 32"):
        ilab.evaluate(sae, model, TEXTS)


def test_wrong_width_hook_z_names_both():
    model = tiny_model("gemma3")  # hook_z is 4 heads x 16 = 64 wide, the residual 32
    sae = SAE.create("topk", d_in=32, d_sae=64, k=4, site="blocks.0.attn.hook_z")
    with pytest.raises(ValueError, match=r"d_in=32.*width 64"):
        ilab.evaluate(sae, model, TEXTS)


@pytest.mark.parametrize("site", ["blocks.5.hook_resid_post", "blocks.0.attn.hook_q", "resid"])
def test_site_the_model_lacks(site):
    model = tiny_model("llama")
    sae = SAE.create("topk", d_in=32, d_sae=64, k=4, site=site)
    with pytest.raises(ValueError, match=rf"{site}.*does not have.*blocks\.0\.\.1"):
        ilab.evaluate(sae, model, TEXTS)


def test_sae_without_site_asks_for_site():
    model = tiny_model("llama")
    sae = SAE.create("topk", d_in=32, d_sae=64, k=4)
    with pytest.raises(ValueError, match=r"site="):
        ilab.evaluate(sae, model, TEXTS)


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ([], "texts is empty"),
        ([""], r"texts\[0\] is empty"),
        (["the cat", "  "], r"texts\[1\] is empty"),
        ([3], r"texts\[0\] is int"),
        (None, "string or a list"),
    ],
)
def test_bad_texts(texts, message):
    model = tiny_model("gpt2")
    sae = zero_sae(32, "blocks.0.hook_resid_post")
    with pytest.raises((ValueError, TypeError), match=message):
        ilab.evaluate(sae, model, texts)


@pytest.mark.parametrize("batch_size", [0, -1, 1.5, True])
def test_bad_batch_size(batch_size):
    model = tiny_model("gpt2")
    with pytest.raises(ValueError, match=rf"batch_size must be a positive integer, got {batch_size!r}"):
        ilab.evaluate(zero_sae(32, "blocks.0.hook_resid_post"), model, TEXTS, batch_size=batch_size)


# ---------------------------------------------------------------- embedded
@pytest.mark.embedded
def test_embedded_random_topk(embedded):
    site = "blocks.6.hook_resid_post"
    sae = SAE.create("topk", d_in=640, d_sae=256, k=16, site=site)
    texts = [
        "When Mary and John went to the store, John gave a drink to Mary.",
        "The capital of France is Paris, and the capital of Italy is Rome.",
    ]
    res = ilab.evaluate(sae, embedded, texts)
    d = res.to_dict()
    assert all(math.isfinite(v) for v in d.values()), d
    assert 2.0 < res.ce_clean < 6.0, d
    assert res.ce_zero_ablation > res.ce_clean + 0.5, d
    assert res.explained_variance < 0.5, d
    assert 0 < res.l0 <= 16, d  # ReLU may drop a negative top-k value
    assert res.n_tokens == int(embedded.to_tokens(texts)["attention_mask"].sum()) - len(texts)
    assert res.density.shape == (256,)
