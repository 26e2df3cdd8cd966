"""Sites: every named site of every tiny family checked against an independent computation.

The reference values come from a plain Hugging Face forward pass (``output_hidden_states``
and ordinary torch forward hooks) on a fresh copy of the same weights, never from nnsight,
so a wrong entry in the site table or a mistake in how a value is read shows up here.
"""

from __future__ import annotations

from dataclasses import dataclass

import nnsight
import pytest
import torch
from transformers import AutoModelForCausalLM

import interplab as ilab
from tests.tiny import TEXTS, tiny_hf_model, tiny_model, tiny_tokenizer

ATOL = 1e-5
SUFFIXES = ("hook_resid_pre", "attn.hook_z", "hook_attn_out", "hook_mlp_out", "hook_resid_post")
#: Every site of a block, the five above among them, in forward order.
ALL_SUFFIXES = ("hook_resid_pre", "attn.hook_z", "attn.hook_pattern", "hook_attn_out", "hook_resid_mid",
                "hook_mlp_in", "mlp.hook_post", "hook_mlp_out", "hook_resid_post")  # fmt: skip
PADDING_TEXTS = [*TEXTS, "a dog ran"]  # lengths 7, 15, 10, 4: both batches of 2 hold padding


@dataclass(frozen=True)
class HFPaths:
    """Where things live in each Hugging Face module tree, written out here independently."""

    blocks: str
    attn: str  # attention module; its output (first element) is before any post-norm
    mlp: str
    o_proj: str  # relative to the block
    final_norm: str
    embed: str  # the token embedding (relative to the root)
    mlp_norm: str  # the norm in front of the MLP (relative to the block); its input is the stream after attention
    down_proj: str  # the MLP's last linear map (relative to the block)
    post_attn_norm: str | None = None  # Gemma: applied to attn's output before the residual add
    post_mlp_norm: str | None = None


HF_PATHS = {
    "gpt2": HFPaths("transformer.h", "attn", "mlp", "attn.c_proj", "transformer.ln_f", "transformer.wte", "ln_2",
                    "mlp.c_proj"),
    "gemma3": HFPaths(
        "model.layers", "self_attn", "mlp", "self_attn.o_proj", "model.norm", "model.embed_tokens",
        "pre_feedforward_layernorm", "mlp.down_proj",
        post_attn_norm="post_attention_layernorm", post_mlp_norm="post_feedforward_layernorm",
    ),
    "llama": HFPaths("model.layers", "self_attn", "mlp", "self_attn.o_proj", "model.norm", "model.embed_tokens",
                     "post_attention_layernorm", "mlp.down_proj"),
    "neox": HFPaths("gpt_neox.layers", "attention", "mlp", "attention.dense", "gpt_neox.final_layer_norm",
                    "gpt_neox.embed_in", "post_attention_layernorm", "mlp.dense_4h_to_h"),
}  # fmt: skip


def _first(x):
    return x[0] if isinstance(x, tuple) else x


def fresh_hf(family: str, model: ilab.Model) -> torch.nn.Module:
    """A fresh HF model with the same weights as ``model`` (same seed and config), untouched by nnsight."""
    hf = AutoModelForCausalLM.from_config(model.module.config).eval()
    hf.load_state_dict(tiny_hf_model(family).state_dict())
    theirs = model.module.state_dict()
    for name, value in hf.state_dict().items():
        assert torch.equal(value, theirs[name]), f"weights differ at {name}"
    return hf


def hf_reference(family: str, hf: torch.nn.Module, enc: dict) -> dict:
    """Every site's value from a plain HF forward, plus raw per-layer module outputs.

    Returns ``{site name: tensor}`` and, under ``("raw_attn", L)`` and ``("raw_mlp", L)``, the attention
    and MLP modules' outputs before any post-norm. Patterns come from ``output_attentions`` of a run with
    eager attention (the only implementation that builds them).
    """
    paths = HF_PATHS[family]
    got: dict = {}
    handles = []

    def keep(key, pre=False):
        if pre:
            return lambda mod, args: got.__setitem__(key, args[0].detach().clone())
        return lambda mod, args, out: got.__setitem__(key, _first(out).detach().clone())

    blocks = hf.get_submodule(paths.blocks)
    handles.append(hf.get_submodule(paths.embed).register_forward_hook(keep("embed")))
    for layer, block in enumerate(blocks):
        handles.append(block.register_forward_hook(keep(("block", layer))))
        handles.append(block.get_submodule(paths.attn).register_forward_hook(keep(("attn", layer))))
        handles.append(block.get_submodule(paths.mlp).register_forward_hook(keep(("mlp", layer))))
        handles.append(block.get_submodule(paths.o_proj).register_forward_pre_hook(keep(("z", layer), pre=True)))
        handles.append(block.get_submodule(paths.mlp_norm).register_forward_pre_hook(keep(("mid", layer), pre=True)))
        handles.append(block.get_submodule(paths.down_proj).register_forward_pre_hook(keep(("post", layer), pre=True)))
        handles.append(block.get_submodule(paths.mlp).register_forward_pre_hook(keep(("mlp_in", layer), pre=True)))
    before = hf.config._attn_implementation
    hf.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = hf(**enc, output_hidden_states=True, output_attentions=True)
    finally:
        hf.set_attn_implementation(before)
        for h in handles:
            h.remove()
    hidden = out.hidden_states

    n = len(blocks)
    assert len(hidden) == n + 1 and len(out.attentions) == n
    ref = {"hook_embed": got["embed"]}
    with torch.no_grad():
        for layer, block in enumerate(blocks):
            attn, mlp = got[("attn", layer)], got[("mlp", layer)]
            if paths.post_attn_norm:
                attn = block.get_submodule(paths.post_attn_norm)(attn)
                mlp = block.get_submodule(paths.post_mlp_norm)(mlp)
            ref[f"blocks.{layer}.hook_resid_pre"] = hidden[layer]
            # HF's last hidden state is after the final norm: use the block's own output there.
            ref[f"blocks.{layer}.hook_resid_post"] = hidden[layer + 1] if layer < n - 1 else got[("block", layer)]
            ref[f"blocks.{layer}.hook_attn_out"] = attn
            ref[f"blocks.{layer}.hook_mlp_out"] = mlp
            ref[f"blocks.{layer}.attn.hook_z"] = got[("z", layer)]
            ref[f"blocks.{layer}.attn.hook_pattern"] = out.attentions[layer]
            ref[f"blocks.{layer}.hook_resid_mid"] = got[("mid", layer)]
            ref[f"blocks.{layer}.mlp.hook_post"] = got[("post", layer)]
            ref[f"blocks.{layer}.hook_mlp_in"] = got[("mlp_in", layer)]  # what the MLP module itself reads
            ref[("raw_attn", layer)] = got[("attn", layer)]
            ref[("raw_mlp", layer)] = got[("mlp", layer)]
        # The hooked last-block output really is the residual stream HF normalises.
        final = hf.get_submodule(paths.final_norm)(got[("block", n - 1)])
        torch.testing.assert_close(final, hidden[-1], atol=ATOL, rtol=0)
    return ref


def collect_all(model: ilab.Model, texts=TEXTS, **kwargs) -> ilab.Activations:
    return model.collect(texts, model.sites, **kwargs)


def assert_real_close(acts: ilab.Activations, site: str, expected: torch.Tensor, atol=ATOL):
    """Compare a site at real (non-padding) tokens only (patterns: real query and key tokens of each text)."""
    got = acts[site]
    assert got.shape == expected.shape, (site, got.shape, expected.shape)
    if site.endswith("hook_pattern"):
        for i, n in enumerate(acts.mask.sum(1).tolist()):
            torch.testing.assert_close(got[i, :, :n, :n], expected[i, :, :n, :n], atol=atol, rtol=0, msg=site)
            assert not got[i, :, n:].any() and not got[i, :, :, n:].any(), "padding is zero"
        return
    torch.testing.assert_close(got[acts.mask], expected[acts.mask], atol=atol, rtol=0, msg=site)


# ------------------------------------------------------------------ site names
def test_sites_list(model, family):
    suffixes = [s for s in ALL_SUFFIXES if not (family == "neox" and s == "hook_resid_mid")]  # parallel blocks
    expected = ["hook_embed"] + [f"blocks.{layer}.{s}" for layer in range(2) for s in suffixes]
    assert model.sites == expected
    assert model.n_layers == 2


def test_site_dim(model, family):
    z = model.collect(TEXTS[0], "blocks.0.attn.hook_z")["blocks.0.attn.hook_z"]
    assert model.site_dim("blocks.0.attn.hook_z") == model.n_heads * model.d_head == z.shape[-1]
    assert model.site_dim("blocks.1.hook_resid_post") == model.d_model == 32
    if family == "gemma3":  # head_dim 16 x 4 heads: hook_z is wider than the residual stream
        assert model.site_dim("blocks.0.attn.hook_z") == 64


def test_family_table_matches_hf_modules(model, family):
    """The final norm and unembedding named by the site table are the HF model's own modules.

    For GPT-NeoX that is the module transformers 5.x names ``lm_head``, so logits() finds it.
    """
    hf = model.module
    assert hf.get_submodule(model.family.unembed) is hf.get_output_embeddings()
    assert hf.get_submodule(model.family.final_norm) is hf.get_submodule(HF_PATHS[family].final_norm)


@pytest.mark.parametrize(
    ("site", "match"),
    [
        ("blocks.0.hook_resid_pots", r"'blocks\.0\.hook_resid_pots'.*Did you mean blocks\.0\.hook_resid_post"),
        ("blocks.9.hook_resid_post", r"'blocks\.9\.hook_resid_post'.*blocks\.\{0\.\.1\}"),
        ("blocks.-1.hook_resid_post", r"'blocks\.-1\.hook_resid_post'.*Valid sites"),
        ("blocks.0.hook_z", r"'blocks\.0\.hook_z'.*attn\.hook_z"),
    ],
)
def test_bad_site_names(site, match):
    model = tiny_model("llama")
    with pytest.raises(ValueError, match=match):
        model.collect(TEXTS[0], site)
    with pytest.raises(ValueError, match=match):
        model.site_dim(site)


def test_bad_site_types():
    model = tiny_model("gpt2")
    with pytest.raises(TypeError, match=r"int: 5"):
        model.collect(TEXTS[0], [5])
    with pytest.raises(ValueError, match=r"at least one site.*\[\]"):
        model.collect(TEXTS[0], [])


def test_short_forms_mean_every_layer_wherever_sites_are_taken(model, tmp_path):
    """``collect(sites=["resid_post"])`` takes the short form ``patching.grid(site=...)`` takes: every layer's."""
    every = [f"blocks.{layer}.hook_resid_post" for layer in range(model.n_layers)]
    acts = model.collect(TEXTS, sites=["resid_post"])
    assert acts.sites == every
    full = model.collect(TEXTS, sites=every)  # the control: the same sites by their full names
    for site in every:
        torch.testing.assert_close(acts[site], full[site], atol=0, rtol=0)
    mixed = model.collect(TEXTS, ["mlp_out", "hook_embed", "blocks.0.hook_mlp_out"])
    assert mixed.sites == ["hook_embed", *[f"blocks.{layer}.hook_mlp_out" for layer in range(model.n_layers)]]
    assert [s.name for s in model.parse_sites("heads")] == [f"blocks.{i}.attn.hook_z" for i in range(model.n_layers)]
    assert [s.name for s in model.parse_sites("embed")] == ["hook_embed"]
    store = model.cache(TEXTS, "resid_pre", tmp_path / "store", n_tokens=16, context_size=8, progress=False)
    assert store.sites == [f"blocks.{layer}.hook_resid_pre" for layer in range(model.n_layers)]


def test_one_site_arguments_refuse_a_short_form_naming_one_to_give():
    model = tiny_model("gpt2")
    with pytest.raises(ValueError, match=r"'resid_post' names 2 sites .*this takes one site, e\.g\. 'blocks\.1\."):
        model.site_dim("resid_post")
    with pytest.raises(ValueError, match=r"'mlp_out' names 2 sites"):
        model.envoy("mlp_out")
    assert model.parse_site("embed").name == "hook_embed"


@pytest.mark.parametrize(
    ("site", "match"),
    [
        ("resid", r"Unknown site 'resid'\. Did you mean resid_pre, resid_mid, resid_post\?.*short form meaning every "
                  r"layer: embed, resid_pre, hook_z, pattern, attn_out"),
        ("hook_resid_post", r"Unknown site 'hook_resid_post'\. Did you mean resid_post\?"),
        ("attn_outt", r"Did you mean attn_out\?"),
    ],
)  # fmt: skip
def test_unknown_short_forms_name_the_valid_ones(site, match):
    with pytest.raises(ValueError, match=match):
        tiny_model("llama").collect(TEXTS[0], [site])


def test_short_forms_a_model_lacks_say_why():
    with pytest.raises(ValueError, match=r"'resid_mid' does not exist in this model: its blocks run attention"):
        tiny_model("neox").parse_sites("resid_mid")


def test_repeated_sites_collected_once(model):
    acts = model.collect(TEXTS, ["blocks.1.hook_resid_post", "blocks.0.hook_resid_pre", "blocks.1.hook_resid_post"])
    assert acts.sites == ["blocks.0.hook_resid_pre", "blocks.1.hook_resid_post"]


# ------------------------------------------------------- values vs plain HF
@pytest.mark.parametrize("suffix", SUFFIXES)
def test_site_matches_hf(model, family, suffix):
    sites = [f"blocks.{layer}.{suffix}" for layer in range(model.n_layers)]
    acts = model.collect(TEXTS, sites)
    enc = model.to_tokens(TEXTS)
    assert torch.equal(acts.tokens, enc["input_ids"])
    assert torch.equal(acts.mask, enc["attention_mask"].bool())
    ref = hf_reference(family, fresh_hf(family, model), enc)
    for site in sites:
        assert_real_close(acts, site, ref[site])


def test_residual_identity(model):
    """resid_post - resid_pre == attn_out + mlp_out (sequential, parallel and post-norm blocks)."""
    acts = collect_all(model)
    m = acts.mask
    for layer in range(model.n_layers):
        b = f"blocks.{layer}."
        delta = acts[b + "hook_resid_post"] - acts[b + "hook_resid_pre"]
        parts = acts[b + "hook_attn_out"] + acts[b + "hook_mlp_out"]
        assert delta[m].abs().max() > 1e-3  # the block does something
        torch.testing.assert_close(delta[m], parts[m], atol=ATOL, rtol=0)
        # the two halves are distinct modules, not one value read twice
        assert not torch.allclose(acts[b + "hook_attn_out"][m], acts[b + "hook_mlp_out"][m])


def test_hook_z_projects_to_attn_out(model, family):
    """The output projection applied to hook_z gives the attention output."""
    acts = collect_all(model)
    hf = fresh_hf(family, model)
    paths = HF_PATHS[family]
    ref = hf_reference(family, hf, model.to_tokens(TEXTS))
    m = acts.mask
    for layer, block in enumerate(hf.get_submodule(paths.blocks)):
        z = acts[f"blocks.{layer}.attn.hook_z"]
        assert z.shape == (*acts.mask.shape, model.n_heads * model.d_head)
        with torch.no_grad():
            projected = block.get_submodule(paths.o_proj)(z)
            # before any post-norm: the attention module's own output
            torch.testing.assert_close(projected[m], ref[("raw_attn", layer)][m], atol=ATOL, rtol=0)
            if paths.post_attn_norm:
                projected = block.get_submodule(paths.post_attn_norm)(projected)
        torch.testing.assert_close(projected[m], acts[f"blocks.{layer}.hook_attn_out"][m], atol=ATOL, rtol=0)


def test_built_model_matches_hf():
    """load_model on an HF model built here: sites read that very model's modules."""
    hf = tiny_hf_model("gpt2", seed=3)
    model = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    acts = collect_all(model)
    ref = hf_reference("gpt2", tiny_hf_model("gpt2", seed=3), model.to_tokens(TEXTS))
    for site in model.sites:
        assert_real_close(acts, site, ref[site])
    # a different seed gives different activations: the comparison has teeth
    other = hf_reference("gpt2", tiny_hf_model("gpt2", seed=4), model.to_tokens(TEXTS))
    assert not torch.allclose(acts["blocks.1.hook_resid_post"], other["blocks.1.hook_resid_post"])


# ---------------------------------------------------------------- padding
def test_padding_does_not_change_real_tokens(model):
    batched = collect_all(model, PADDING_TEXTS, batch_size=2)
    alone = [collect_all(model, text) for text in PADDING_TEXTS]
    lengths = [a.tokens.shape[1] for a in alone]
    assert len(set(lengths)) == len(lengths)  # all different: every batch is padded
    assert batched.tokens.shape == (len(PADDING_TEXTS), max(lengths))
    assert batched.mask.sum(1).tolist() == lengths
    assert batched.n_tokens == sum(lengths)
    for i, (single, n) in enumerate(zip(alone, lengths, strict=True)):
        assert batched.mask[i, :n].all() and not batched.mask[i, n:].any()  # right padding
        assert torch.equal(batched.tokens[i, :n], single.tokens[0])
        assert batched.str_tokens[i] == single.str_tokens[0] == model.to_str_tokens(PADDING_TEXTS[i])
    for site in model.sites:
        pattern = site.endswith("hook_pattern")  # [batch, heads, query, key]: padded on both token axes
        for i, (single, n) in enumerate(zip(alone, lengths, strict=True)):
            got = batched[site][i, :, :n, :n] if pattern else batched[site][i, :n]
            torch.testing.assert_close(got, single[site][0], atol=ATOL, rtol=0, msg=site)
        if pattern:
            with pytest.raises(ValueError, match="not one vector per token"):
                batched.flat(site)
            continue
        flat = batched.flat(site)
        assert flat.shape == (sum(lengths), model.site_dim(site))
        expected = torch.cat([single[site][0] for single in alone])
        torch.testing.assert_close(flat, expected, atol=ATOL, rtol=0, msg=site)
    assert torch.equal(batched.flat_tokens(), torch.cat([a.tokens[0] for a in alone]))
    assert batched.flat_str_tokens() == [t for a in alone for t in a.str_tokens[0]]


# -------------------------------------------------------------- early stop
def test_early_stop_same_values(model):
    early = ["blocks.0.hook_resid_pre", "blocks.0.attn.hook_z", "blocks.0.hook_resid_post"]
    late = ["blocks.1.hook_mlp_out", "blocks.1.hook_resid_post"]
    alone = model.collect(TEXTS, early)
    together = model.collect(TEXTS, early + late)
    assert together.sites == early + late
    for site in early:
        assert torch.equal(alone[site], together[site]), site


def test_early_stop_skips_later_layers(model, family):
    """Collecting blocks.0 sites never enters block 1 or the final norm; logits() does."""
    paths = HF_PATHS[family]
    hf = model.module
    ran: list[str] = []
    handles = [
        hf.get_submodule(f"{paths.blocks}.1").register_forward_pre_hook(lambda m, a: ran.append("block1")),
        hf.get_submodule(paths.final_norm).register_forward_pre_hook(lambda m, a: ran.append("norm")),
        hf.get_submodule(f"{paths.blocks}.0.{paths.mlp}").register_forward_pre_hook(lambda m, a: ran.append("mlp0")),
    ]
    try:
        model.collect(TEXTS, ["blocks.0.hook_resid_post", "blocks.0.hook_attn_out"])
        assert ran == ["mlp0"]
        ran.clear()
        model.collect(TEXTS, "blocks.0.hook_resid_pre")
        assert ran == []  # stops before block 0's MLP even runs
        ran.clear()
        model.collect(TEXTS, "blocks.1.hook_mlp_out")
        assert "block1" in ran and "norm" not in ran
        ran.clear()
        model.logits(TEXTS)
        assert ran == ["mlp0", "block1", "norm"]
    finally:
        for h in handles:
            h.remove()


# ------------------------------------------------------------ remote="local"
def test_remote_local_collect_equals_local(model, family, monkeypatch):
    from nnsight.intervention.backends.local import LocalSimulationBackend

    calls = []
    original = LocalSimulationBackend.__call__

    def spy(self, tracer):
        calls.append(1)
        return original(self, tracer)

    monkeypatch.setattr(LocalSimulationBackend, "__call__", spy)
    remote = tiny_model(family, remote="local")
    assert remote.remote == "local"
    local = collect_all(model, batch_size=2)
    assert calls == []
    via_remote = collect_all(remote, batch_size=2)
    assert len(calls) == 2  # one serialised trace per batch: the remote path really ran
    assert torch.equal(via_remote.tokens, local.tokens)
    assert torch.equal(via_remote.mask, local.mask)
    for site in model.sites:
        assert torch.equal(via_remote[site], local[site]), site


# ------------------------------------------------------- sites researchers expect
INNER_SUFFIXES = ("attn.hook_pattern", "hook_resid_mid", "mlp.hook_post")


def sequential_neox() -> ilab.Model:
    """The tiny GPT-NeoX with attention and MLP in sequence (use_parallel_residual=False): it has resid_mid."""
    from tests.tiny import tiny_config

    config = tiny_config("neox")
    config.use_parallel_residual = False
    hf = AutoModelForCausalLM.from_config(config).eval()
    hf.load_state_dict(tiny_hf_model("neox").state_dict())
    return ilab.load_model(hf, tokenizer=tiny_tokenizer())


@pytest.mark.parametrize("suffix", ["hook_embed", *INNER_SUFFIXES])
def test_embed_pattern_mid_and_mlp_post_sites_match_hf(model, family, suffix):
    """hook_embed, attn.hook_pattern, hook_resid_mid and mlp.hook_post equal a plain HF forward (hooks on the
    embedding, the norm before the MLP and the down projection; output_attentions with eager attention)."""
    if family == "neox" and suffix == "hook_resid_mid":
        model = sequential_neox()  # the default GPT-NeoX block is parallel: no resid_mid (tested below)
    sites = ["hook_embed"] if suffix == "hook_embed" else [f"blocks.{layer}.{suffix}" for layer in range(2)]
    acts = model.collect(TEXTS, sites)
    ref = hf_reference(family, fresh_hf(family, model), model.to_tokens(TEXTS))
    for site in sites:
        assert_real_close(acts, site, ref[site])
    if suffix == "mlp.hook_post":  # GPT-2's MLP is 4 x d_model wide; the other tiny configs say 64
        assert acts[sites[0]].shape[-1] == model.site_dim(sites[0]) == model.d_mlp == {"gpt2": 128}.get(family, 64)


def test_embed_is_what_enters_the_first_block(model, family):
    acts = model.collect(TEXTS, ["hook_embed", "blocks.0.hook_resid_pre"])
    m = acts.mask
    if family == "gpt2":  # GPT-2 adds learned positions to the token embedding (TransformerLens: hook_pos_embed)
        positions = model.module.transformer.wpe.weight[: m.shape[1]].detach()
        torch.testing.assert_close(
            (acts["hook_embed"] + positions)[m], acts["blocks.0.hook_resid_pre"][m], atol=ATOL, rtol=0
        )
    else:  # Gemma's embedding is scaled by sqrt(d_model) inside its module: this is what the stream receives
        assert torch.equal(acts["hook_embed"][m], acts["blocks.0.hook_resid_pre"][m])


def test_patterns_are_probabilities_over_earlier_tokens_and_attention_is_restored(model):
    before = model.module.config._attn_implementation
    acts = model.collect(TEXTS, ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"])
    assert model.module.config._attn_implementation == before == "sdpa"  # eager only while the patterns are read
    for i, n in enumerate(acts.mask.sum(1).tolist()):
        p = acts["blocks.1.attn.hook_pattern"][i, :, :n, :n]
        assert p.shape == (model.n_heads, n, n)
        torch.testing.assert_close(p.sum(-1), torch.ones(model.n_heads, n))
        assert not p.triu(1).any()  # causal: no query attends to a later key
    with pytest.raises(ValueError, match=r"attention probabilities \[heads, query, key\].*not a vector per token"):
        model.site_dim("blocks.0.attn.hook_pattern")


def test_resid_mid_sits_between_attention_and_mlp(model, family):
    if family == "neox":
        model = sequential_neox()
    acts = model.collect(TEXTS, [f"blocks.{layer}.{s}" for layer in range(2) for s in
                                 ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out",
                                  "hook_resid_post")])  # fmt: skip
    m = acts.mask
    for layer in range(2):
        b = f"blocks.{layer}."
        mid = acts[b + "hook_resid_mid"][m]
        torch.testing.assert_close(mid, (acts[b + "hook_resid_pre"] + acts[b + "hook_attn_out"])[m], atol=ATOL, rtol=0)
        torch.testing.assert_close(acts[b + "hook_resid_post"][m], mid + acts[b + "hook_mlp_out"][m], atol=ATOL, rtol=0)


def test_mlp_post_projects_to_the_mlp_output(model, family):
    acts = model.collect(TEXTS, ["blocks.1.mlp.hook_post"])
    hf = fresh_hf(family, model)
    ref = hf_reference(family, hf, model.to_tokens(TEXTS))
    down = hf.get_submodule(f"{HF_PATHS[family].blocks}.1.{HF_PATHS[family].down_proj}")
    with torch.no_grad():
        projected = down(acts["blocks.1.mlp.hook_post"])
    torch.testing.assert_close(projected[acts.mask], ref[("raw_mlp", 1)][acts.mask], atol=ATOL, rtol=0)


def _logits_with(model: ilab.Model, site: str, delta: torch.Tensor) -> torch.Tensor:
    """Last-position logits after adding ``delta`` to a site, written with sites.write_site in a trace."""
    from interplab.core.model.trace_ops import read_site, write_site

    envoy, io = model.envoy(site)
    readout, last = model.readout, model.block(model.n_layers - 1)
    with torch.no_grad(), model.nn.trace(model.to_tokens(TEXTS), **model.trace_kwargs) as tracer:
        write_site(envoy, io, read_site(envoy, io) + delta)
        logits = nnsight.save(readout(read_site(last, "output")[:, -1]))
        tracer.stop()
    return logits


@pytest.mark.parametrize("family", ["gpt2", "gemma3", "llama", "neox"])
def test_writing_resid_mid_reaches_the_residual_stream(family):
    """A write at resid_mid changes what the MLP reads *and* the stream it adds to: the same as adding the
    change to the attention output (it is the same point of the stream)."""
    model = sequential_neox() if family == "neox" else tiny_model(family)
    delta = torch.randn(model.d_model, generator=torch.Generator().manual_seed(0))
    plain = model.logits(TEXTS)[:, -1]
    via_mid = _logits_with(model, "blocks.0.hook_resid_mid", delta)
    via_attn = _logits_with(model, "blocks.0.hook_attn_out", delta)
    assert (via_mid - plain).abs().max() > 1e-2
    torch.testing.assert_close(via_mid, via_attn, atol=1e-4, rtol=0)
    # steering (nnsight trace and torch hooks) adds at resid_mid the same way
    vec = ilab.steering.SteeringVector("blocks.0.hook_resid_mid", delta, scale=1.0)
    lengths = model.to_tokens(TEXTS)["attention_mask"].sum(1)
    steered = ilab.steering.logits(model, TEXTS, vec)[:, -1]  # nnsight trace, each text's last token
    attn_vec = ilab.steering.SteeringVector("blocks.0.hook_attn_out", delta, scale=1.0)
    torch.testing.assert_close(steered, ilab.steering.logits(model, TEXTS, attn_vec)[:, -1], atol=1e-4, rtol=0)
    with torch.no_grad(), ilab.steering.apply(model, vec):  # torch hooks, as the live panel steers
        hooked = model.module(**model.to_tokens(TEXTS)).logits
    torch.testing.assert_close(hooked[torch.arange(len(TEXTS)), lengths - 1], steered, atol=1e-4, rtol=0)


def test_parallel_blocks_have_no_resid_mid():
    model = tiny_model("neox")  # use_parallel_residual=True, as GPT-NeoX and Pythia ship
    assert "blocks.0.hook_resid_mid" not in model.sites
    with pytest.raises(ValueError, match=r"'blocks\.0\.hook_resid_mid' does not exist in this model: its blocks run "
                                         r"attention and the MLP in parallel"):  # fmt: skip
        model.collect(TEXTS[0], "blocks.0.hook_resid_mid")


@pytest.mark.parametrize(
    "site",
    ["blocks.0.attn.hook_q", "blocks.1.attn.hook_k", "blocks.0.attn.hook_v", "blocks.0.attn.hook_attn_scores",
     "blocks.0.mlp.hook_pre", "blocks.0.ln1.hook_scale", "blocks.1.ln2.hook_normalized", "hook_pos_embed",
     "ln_final.hook_scale", "blocks.0.attn.hook_result"],
)  # fmt: skip
def test_unmapped_transformer_lens_hooks_say_so_and_point_to_model_nn(site):
    """An unmapped TransformerLens hook ('blocks.0.attn.hook_q') is named as such, with no typo suggestion."""
    model = tiny_model("llama")
    with pytest.raises(ValueError, match=r"is a TransformerLens hook that interplab does not map.*model\.nn") as err:
        model.collect(TEXTS[0], site)
    assert "Did you mean" not in str(err.value)
    assert "attn.hook_pattern" in str(err.value) and "mlp.hook_post" in str(err.value)  # what *is* mapped


def test_remote_local_reads_the_embedding_pattern_and_mlp_sites(family):
    """The embedding, patterns and MLP activations through nnsight's remote path (the eager switch is made
    outside the trace body, which holds only envoys)."""
    sites = ["hook_embed", "blocks.1.attn.hook_pattern", "blocks.0.mlp.hook_post"]
    local = tiny_model(family).collect(TEXTS, sites)
    remote = tiny_model(family, remote="local").collect(TEXTS, sites)
    for site in sites:
        assert torch.equal(remote[site], local[site]), site
