"""Named sites on hand-written modules (an MLP and a tiny transformer): every site against forward hooks, and
the capabilities that take sites run on them."""

from __future__ import annotations

import random

import pytest
import torch
from interplab.core.model.custom import VocabTokenizer
from interplab.core.model.sites import resolve

import interplab as ilab
from tests.model.custom_nets import MLP_SITES, TRANSFORMER_SITES, VOCAB, MLPNet, TinyTransformer

TEXTS = ["1 2 3 4", "5 6 7", "8 9 10 0 1"]
NETS = {"mlp": (MLPNet, MLP_SITES), "transformer": (TinyTransformer, TRANSFORMER_SITES)}


def built(name: str) -> tuple[torch.nn.Module, ilab.Model]:
    torch.manual_seed(0)
    cls, sites = NETS[name]
    net = cls().eval()
    return net, ilab.load_model(net, sites=sites)


def hooked(net: torch.nn.Module, sites: dict[str, str], ids_BL: torch.Tensor, n_layers: int) -> dict[str, torch.Tensor]:
    """Each site's tensor read by plain torch forward hooks, under the names load_model gives them."""
    seen: dict[str, torch.Tensor] = {}
    handles = []
    for key, value in sites.items():
        if key in ("unembed", "final_norm", "blocks"):
            continue
        path, _, io = value.partition(":")
        for layer in range(n_layers if "{L}" in key else 1):
            name = key.replace("{L}", str(layer))

            def hook(mod, args, out, name=name, io=io):
                seen[name] = (args[0] if io == "input" else out).detach().clone()

            handles.append(resolve(net, path.replace("{L}", str(layer))).register_forward_hook(hook))
    try:
        with torch.no_grad():
            logits = net(ids_BL)
    finally:
        for h in handles:
            h.remove()
    seen["logits"] = logits
    return seen


def reference(want: dict[str, torch.Tensor], site: str) -> torch.Tensor:
    """The hooked tensor of ``site``; a resid_pre the map leaves implicit (the block's input) is the previous
    block's output, or the embedding at layer 0."""
    if site in want:
        return want[site]
    layer = int(site.split(".")[1])
    return want["hook_embed"] if layer == 0 else want[f"blocks.{layer - 1}.hook_resid_post"]


@pytest.mark.parametrize("name", sorted(NETS))
def test_every_site_matches_forward_hooks(name):
    net, model = built(name)
    acts = model.collect(TEXTS, sites=model.sites)
    for row, text in enumerate(TEXTS):
        ids = torch.tensor([[int(t) for t in text.split()]])
        want = hooked(net, NETS[name][1], ids, model.n_layers)
        n = ids.shape[1]
        for site in model.sites:
            torch.testing.assert_close(acts.values[site][row, :n], reference(want, site)[0], msg=f"{name} {site}")
        logits = model.logits([text], positions=None)[0]
        torch.testing.assert_close(logits, want["logits"][0])


def test_sites_cover_what_the_map_names():
    _, model = built("transformer")
    assert "blocks.1.attn.hook_z" in model.sites and "hook_embed" not in model.sites
    assert model.d_model == 16 and model.d_mlp == 64 and model.site_dim("blocks.0.mlp.hook_post") == 64
    with pytest.raises(ValueError, match=r"hook_embed.*does not exist.*sites are the ones given to load_model"):
        model.parse_site("hook_embed")


@pytest.mark.parametrize("name", sorted(NETS))
def test_steering_adds_what_a_forward_hook_adds(name):
    net, model = built(name)
    site = "blocks.0.hook_resid_post"
    vec = ilab.steering.diff_of_means(model, site, ["1 2 3", "1 2 4"], ["5 6 7", "5 6 8"], scale=2.0)
    steered = ilab.steering.logits(model, ["1 2 3 4"], vec)[0, -1]
    handle = resolve(net, NETS[name][1][site.replace("0", "{L}", 1)].replace("{L}", "0")).register_forward_hook(
        lambda mod, args, out: out + 2.0 * vec.direction
    )
    try:
        with torch.no_grad():
            want = net(torch.tensor([[1, 2, 3, 4]]))[0, -1]
    finally:
        handle.remove()
    torch.testing.assert_close(steered, want, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(steered, model.logits(["1 2 3 4"])[0, -1])


def test_patching_the_clean_stream_at_the_changed_token_restores_the_clean_metric():
    _, model = built("transformer")
    metric = ilab.metrics.logit_diff(3, 5)
    grid = ilab.patching.grid(model, ["1 2 3 4"], ["1 2 5 4"], metric=metric, site="resid_pre", progress=False)
    assert grid.values.shape == (model.n_layers, 4)
    assert grid.values[0, 2] == pytest.approx(grid.clean_baseline, abs=1e-4)  # the one token that differs
    assert grid.values[0, 0] == pytest.approx(grid.corrupt_baseline, abs=1e-4)
    heads = ilab.patching.grid(model, ["1 2 3 4"], ["1 2 5 4"], metric=metric, site="heads", progress=False)
    assert heads.values.shape == (model.n_layers, 2)  # the module's n_heads


def test_probes_das_lens_and_heatmaps_take_the_sites():
    _, model = built("transformer")
    rng = random.Random(0)
    texts = [" ".join(str(rng.randrange(VOCAB)) for _ in range(5)) for _ in range(40)]
    labels = [int(t.split()[-1]) % 2 for t in texts]
    probe = ilab.probes.train(model, texts, labels, sites="resid_post", progress=False)
    assert len(probe.sites) == model.n_layers
    pairs = ilab.patching.PromptPairs(["1 2 3 4"] * 8, ["1 2 5 4"] * 8, answers=[3] * 8, wrong=[5] * 8)
    das = ilab.das.fit(model, pairs, "blocks.0.hook_resid_post", epochs=1, progress=False)
    assert das.direction.shape[-1] == model.d_model
    lens = ilab.logit_lens(model, "1 2 3")
    assert lens is not None
    acts = model.collect(TEXTS[:2], "blocks.1.mlp.hook_post")
    heat = ilab.heatmap_data(acts.str_tokens, acts.values["blocks.1.mlp.hook_post"][acts.mask][:, :3])
    assert heat is not None


def test_cache_and_sae_train_on_a_module_site(tmp_path):
    _, model = built("mlp")
    rng = random.Random(1)
    docs = [" ".join(str(rng.randrange(VOCAB)) for _ in range(8)) for _ in range(80)]
    store = model.cache(docs, "blocks.0.hook_resid_post", tmp_path / "acts", n_tokens=400, context_size=8,
                        progress=False)  # fmt: skip
    assert store.n_tokens >= 400
    sae = ilab.train_sae(store, arch="topk", width=32, k=4, batch_size=64, n_tokens=384, progress=False)
    assert sae.d_in == model.d_model
    assert ilab.evaluate(sae, model, docs[:4]) is not None


def test_vocab_tokenizer_refuses_an_unknown_token():
    tok = VocabTokenizer(["a", "b", "="])
    assert tok(["a b =", "b"], return_tensors="pt", padding=True)["input_ids"].tolist() == [[0, 1, 2], [1, 0, 0]]
    with pytest.raises(ValueError, match=r"Token 'c' in 'a c' is not in the vocabulary of 3 tokens \(a, b, =\)"):
        tok.encode("a c")


def test_vocab_tokenizer_gives_offsets_so_sae_latents_of_two_sited_models_compare():
    from interplab.core.saes.training.in_memory import fit_tensor

    tok = VocabTokenizer(["a", "bb", "="])
    assert tok("a bb  =", return_offsets_mapping=True)["offset_mapping"] == [(0, 1), (2, 4), (6, 7)]
    texts = [" ".join(str(random.Random(i).randrange(VOCAB)) for _ in range(8)) for i in range(20)]
    models, saes = [], []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = ilab.load_model(TinyTransformer().eval(), sites=TRANSFORMER_SITES)
        acts = model.collect(texts, sites=["blocks.1.hook_resid_post"])["blocks.1.hook_resid_post"].flatten(0, 1)
        models.append(model)
        saes.append(fit_tensor(acts, arch="topk", width=16, k=2, steps=20, site="blocks.1.hook_resid_post",
                               progress=False))  # fmt: skip
    sim = ilab.matching.similarity(models[0], saes[0], models[1], saes[1], texts)
    assert sim.n_tokens == 20 * 8 and len(sim.mpc_a) == 16
