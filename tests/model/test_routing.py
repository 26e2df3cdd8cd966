"""MoE routing sites (:mod:`interplab.core.model.routing`) on tiny random configs of every MoE type transformers
builds: router logits equal Hugging Face's ``output_router_logits``, the chosen experts are the top-k of each type's
scoring rule, the weights are the router's own (a torch hook, the control), and a store caches them like any site."""

from __future__ import annotations

import warnings

import pytest
import torch
from interplab.core.model.routing import MOE_TYPES
from transformers import AutoConfig, AutoModelForCausalLM

import interplab as ilab
from tests.tiny import TEXTS, VOCAB_SIZE, tiny_tokenizer

COMMON = dict(vocab_size=VOCAB_SIZE, bos_token_id=1, eos_token_id=2, pad_token_id=0, num_hidden_layers=2,
              hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
              max_position_embeddings=128)  # fmt: skip
#: What a type needs beyond COMMON to build small: DeepSeek-V3 with its first layer dense and two expert groups,
#: Qwen3-Next with one linear-attention layer, Llama 4 with a chunked-attention layer.
CHANGES = {
    "deepseek_v3": dict(n_routed_experts=8, n_group=2, topk_group=1, num_experts_per_tok=2, first_k_dense_replace=1,
                        kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16,
                        moe_intermediate_size=32, head_dim=8, num_key_value_heads=4),
    "qwen3_next": dict(layer_types=["linear_attention", "full_attention"], num_experts=8, num_experts_per_tok=2,
                       moe_intermediate_size=32, head_dim=16, linear_num_value_heads=4, linear_num_key_heads=2,
                       linear_key_head_dim=16, linear_value_head_dim=16),
    "llama4_text": dict(num_local_experts=4, num_experts_per_tok=2, layer_types=["chunked_attention", "full_attention"],
                        head_dim=16, interleave_moe_layer_step=1),
}  # fmt: skip
ROUTING = ["router_logits", "expert_ids", "expert_weights"]


def tiny_moe(kind: str) -> torch.nn.Module:
    """A two-layer random model of a MoE type; DeepSeek-V3's bias on expert choice is random (it is zero at init)."""
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(AutoConfig.for_model(kind, **{**COMMON, **CHANGES.get(kind, {})})).eval()
    for name, buffer in hf.named_buffers():
        if name.endswith("e_score_correction_bias"):
            buffer.copy_(torch.randn_like(buffer) * 0.1)
    return hf


def moe_layers(model: ilab.Model) -> list[int]:
    """The blocks that have routing sites in their ``layer_kinds`` (those with a router)."""
    return [layer for layer in range(model.n_layers) if "router_logits" in model.layer_kinds(layer)]


@pytest.fixture(scope="module", params=MOE_TYPES)
def moe(request):
    hf = tiny_moe(request.param)
    return request.param, hf, ilab.load_model(hf, tokenizer=tiny_tokenizer())


def hf_router_logits(hf: torch.nn.Module) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    enc = tiny_tokenizer()(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = hf(**enc, output_router_logits=True)
    return out.router_logits, enc["attention_mask"].sum(1)


def chosen_by_rule(kind: str, hf: torch.nn.Module, layer: int, logits_TE: torch.Tensor, k: int) -> torch.Tensor:
    """The experts each token's router picks, from its logits by the type's own rule: DeepSeek-V3 keeps the top-k of
    sigmoid + bias among the ``topk_group`` groups whose two best scores sum highest; every other type's choice is
    the top-k of its logits (softmax, sigmoid and sparsemixer's eval-time pick keep their order)."""
    if kind != "deepseek_v3":
        return logits_TE.topk(k, dim=-1).indices
    config = hf.config
    bias = hf.model.layers[layer].mlp.gate.e_score_correction_bias
    scores = logits_TE.sigmoid() + bias
    groups = scores.view(len(scores), config.n_group, -1)
    best_groups = groups.topk(2, dim=-1).values.sum(-1).topk(config.topk_group, dim=-1).indices
    keep = torch.zeros_like(groups[..., 0], dtype=torch.bool).scatter(1, best_groups, True)
    masked = groups.masked_fill(~keep[..., None], float("-inf")).view(len(scores), -1)
    return masked.topk(k, dim=-1).indices


def test_every_moe_type_lists_routing_sites_at_its_moe_layers(moe):
    kind, hf, model = moe
    routed_layers = [1] if kind == "deepseek_v3" else [0, 1]
    routing = [s for s in model.sites if ".mlp.hook_" in s]
    kinds = [*ROUTING, "expert_out"] if kind == "llama4_text" else ROUTING  # only Llama 4's experts give them apart
    assert routing == [f"blocks.{layer}.mlp.hook_{name}" for layer in routed_layers for name in kinds]
    assert moe_layers(model) == routed_layers
    config = hf.config
    n_experts = config.num_local_experts if hasattr(config, "num_local_experts") else (
        getattr(config, "num_experts", None) or config.n_routed_experts)  # fmt: skip
    widths = [model.site_dim(s) for s in routing[:3]]
    assert widths == [n_experts, config.num_experts_per_tok, config.num_experts_per_tok]


def test_stream_sites_of_a_moe_type_equal_hf_hidden_states(moe):
    """A MoE type without a site table still has the residual stream around each block: block L's input is HF's
    hidden_states[L], and the last block's output through the final norm is HF's last hidden state."""
    _, hf, model = moe
    acts = model.collect(TEXTS, ["resid_pre", "resid_post"])
    enc = tiny_tokenizer()(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        hidden = hf(**enc, output_hidden_states=True).hidden_states
    norm, _ = model.readout_modules()
    for row, n in enumerate(enc["attention_mask"].sum(1).tolist()):
        for layer in range(2):
            want = hidden[layer][row, :n]
            torch.testing.assert_close(acts[f"blocks.{layer}.hook_resid_pre"][row, :n], want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(acts["blocks.0.hook_resid_post"][row, :n], hidden[1][row, :n], rtol=1e-5, atol=1e-5)
        with torch.no_grad():
            last = norm(acts["blocks.1.hook_resid_post"][row, :n])
        torch.testing.assert_close(last, hidden[2][row, :n], rtol=1e-5, atol=1e-5)


def test_router_logits_equal_hf_output_router_logits(moe):
    _, hf, model = moe
    acts = model.collect(TEXTS, ROUTING)
    want, lengths = hf_router_logits(hf)
    layers = sorted({int(s.split(".")[1]) for s in acts.values if s.endswith("router_logits")})
    assert len(want) == len(layers) >= 1
    B, L = len(TEXTS), int(lengths.max())
    for layer, want_TE in zip(layers, want, strict=True):
        got = acts[f"blocks.{layer}.mlp.hook_router_logits"]
        want_BLE = want_TE.float().view(B, L, -1)
        for row, n in enumerate(lengths.tolist()):
            torch.testing.assert_close(got[row, :n], want_BLE[row, :n], rtol=0, atol=1e-5)


def test_expert_ids_are_the_top_k_of_the_scoring_rule(moe):
    kind, hf, model = moe
    acts = model.collect(TEXTS, ["router_logits", "expert_ids"])
    lengths = tiny_tokenizer()(TEXTS, return_tensors="pt", padding=True)["attention_mask"].sum(1)
    for layer in moe_layers(model):
        logits = acts[f"blocks.{layer}.mlp.hook_router_logits"]
        ids = acts[f"blocks.{layer}.mlp.hook_expert_ids"]
        k = ids.shape[-1]
        assert k == model.site_dim(f"blocks.{layer}.mlp.hook_expert_ids") >= 2
        for row, n in enumerate(lengths.tolist()):
            rule = chosen_by_rule(kind, hf, layer, logits[row, :n], k)
            assert torch.equal(ids[row, :n].long().sort(-1).values, rule.sort(-1).values), (kind, layer, row)


def test_expert_weights_are_the_routers_own(moe):
    """The control: a torch hook on the router module, the weights it hands the experts (Llama 4's dense scores at
    the chosen experts)."""
    kind, hf, model = moe
    acts = model.collect(TEXTS, ["expert_ids", "expert_weights"])
    layer = moe_layers(model)[-1]
    router = hf.model.layers[layer].get_submodule(model.family.router)
    seen = []
    hook = router.register_forward_hook(lambda _m, _i, out: seen.append(out))
    try:
        _, lengths = hf_router_logits(hf)
    finally:
        hook.remove()
    out = seen[-1]
    ids = acts[f"blocks.{layer}.mlp.hook_expert_ids"].long()
    want_TK = out[0].gather(-1, out[1].topk(ids.shape[-1], -1).indices) if kind == "llama4_text" else out[1]
    want = want_TK.float().view(len(TEXTS), int(lengths.max()), -1)
    got = acts[f"blocks.{layer}.mlp.hook_expert_weights"]
    for row, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(got[row, :n], want[row, :n], rtol=1e-5, atol=1e-6)


def test_routing_sites_are_cached_like_any_site(tmp_path):
    hf = tiny_moe("mixtral")
    model = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    sites = ["blocks.1.mlp.hook_router_logits", "blocks.1.mlp.hook_expert_ids"]
    store = model.cache(TEXTS * 4, sites, tmp_path / "store", n_tokens=40, context_size=8, progress=False)
    assert store.d(sites[0]) == 8 and store.d(sites[1]) == 2
    bos = model.tokenizer.bos_token_id
    body = 8 - (bos is not None)
    tokens = store.shard(0, "tokens")[:body].long()
    window = torch.cat([torch.tensor([bos] if bos is not None else [], dtype=torch.long), tokens])[None]
    values = model.run_sites({"input_ids": window, "attention_mask": torch.ones_like(window)}, sites)
    for site, value in zip(sites, values, strict=True):
        torch.testing.assert_close(store.shard(0, site)[:body], value[0, 8 - body :].float(), rtol=0, atol=1e-6)


def test_dense_blocks_of_deepseek_have_no_routing_sites():
    model = ilab.load_model(tiny_moe("deepseek_v3"), tokenizer=tiny_tokenizer())
    assert [s.name for s in model.parse_sites("router_logits")] == ["blocks.1.mlp.hook_router_logits"]
    with pytest.raises(ValueError, match=r"'blocks\.0\.mlp\.hook_expert_ids': block 0 is dense .* router are \[1\]"):
        model.collect(TEXTS, "blocks.0.mlp.hook_expert_ids")


def test_routing_sites_cannot_be_written():
    from interplab.core.model.trace_ops import write_site

    model = ilab.load_model(tiny_moe("mixtral"), tokenizer=tiny_tokenizer())
    envoy, io = model.envoy("blocks.0.mlp.hook_router_logits")
    with pytest.raises(ValueError, match=r"Routing sites .* can be read, not written"):
        write_site(envoy, io, torch.zeros(1))


def test_llama4_expert_outputs_equal_its_experts_and_sum_to_the_routed_output():
    """The control: a torch hook on Llama 4's experts module (its stacked [experts * tokens, d] output), and the
    block's identity: the experts' outputs summed, plus the shared expert's, are the MoE block's output."""
    hf = tiny_moe("llama4_text")
    model = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    site = "blocks.1.mlp.hook_expert_out"
    assert model.site_dim(site) == 4 * 64
    acts = model.collect(TEXTS, site)
    moe_block = hf.model.layers[1].feed_forward
    seen = {}
    hooks = [moe_block.experts.register_forward_hook(lambda _m, _i, out: seen.update(experts=out)),
             moe_block.shared_expert.register_forward_hook(lambda _m, _i, out: seen.update(shared=out.clone())),
             moe_block.register_forward_hook(lambda _m, _i, out: seen.update(block=out[0]))]  # fmt: skip
    try:
        _, lengths = hf_router_logits(hf)
    finally:
        for hook in hooks:
            hook.remove()
    B, L = len(TEXTS), int(lengths.max())
    want = seen["experts"].view(4, B, L, 64).permute(1, 2, 0, 3)
    got = acts[site].view(B, L, 4, 64)
    summed = got.sum(2) + seen["shared"].view(B, L, 64)
    for row, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(got[row, :n], want[row, :n], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(summed[row, :n], seen["block"].view(B, L, 64)[row, :n], rtol=1e-5, atol=1e-5)
    # an expert not chosen runs on zero-scaled tokens and gives exactly 0: the nonzero outputs are the chosen experts
    ids = model.collect(TEXTS, "blocks.1.mlp.hook_expert_ids")["blocks.1.mlp.hook_expert_ids"].long()
    for row, n in enumerate(lengths.tolist()):
        nonzero = got[row, :n].abs().sum(-1).gt(0)
        chosen = torch.zeros_like(nonzero).scatter(1, ids[row, :n], True)
        assert torch.equal(nonzero, chosen)


#: MoE types among the derived ones (tests/model/test_coverage.py) whose router has no routing sites, and why (none:
#: Doge's product keys, JetMoE's gating and Zaya's router with a "no expert" class have their layouts in routing.READS).
NOT_ROUTED: dict[str, str] = {}
#: The layouts beyond (logits, weights, indices) and (scores, logits), on configs that route (Doge's tiny coverage
#: config is dense: is_moe defaults to False).
OTHER_LAYOUTS = {
    "doge": dict(is_moe=True, num_experts=16, num_experts_per_tok=2),
    "jetmoe": dict(num_experts_per_tok=2),
    "zaya": {},  # ZAYA takes num_experts_per_tok=1 only
}


def _covered_moe_types() -> list[str]:
    from tests.model.test_coverage import COVERED, tiny_config

    names = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_experts_per_tok")
    found = []
    for kind in COVERED:
        try:
            config = tiny_config(kind).get_text_config()
        except Exception:  # a type whose tiny config does not build is the coverage test's to report
            continue
        if getattr(config, "is_moe", True) and any(getattr(config, name, None) for name in names):
            found.append(kind)
    return found


COVERED_MOE = _covered_moe_types()


@pytest.mark.parametrize("kind", COVERED_MOE)
def test_router_logits_of_every_covered_moe_type_equal_hf(kind):
    """Every MoE type the coverage test derives: the routing sites at each MoE layer equal Hugging Face's
    ``output_router_logits`` (the types in NOT_ROUTED load without routing sites, each for its stated reason)."""
    from tests.model.test_coverage import tiny_hf

    hf = tiny_hf(kind)
    model = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    routed = [s for s in model.sites if s.endswith("hook_router_logits")]
    if kind in NOT_ROUTED:
        assert routed == []
        return
    assert routed, f"{kind}: no routing sites"
    enc = model.to_tokens(TEXTS)
    with torch.no_grad():
        want = hf(**enc, output_router_logits=True).router_logits
    got = model.collect(TEXTS, routed).values
    mask = enc["attention_mask"].bool()
    for j, site in enumerate(routed):
        layer = int(site.split(".")[1])
        per_block = len(want) // model.n_layers  # JetMoE records its attention's router before its MLP's
        expected = want[j if len(want) < model.n_layers else layer * per_block + per_block - 1]
        expected = (expected[0] if isinstance(expected, tuple) else expected).float()
        torch.testing.assert_close(got[site][mask], expected.reshape(*mask.shape, -1)[mask], rtol=1e-5, atol=1e-5)


def _layout_control(kind: str, hf: torch.nn.Module, layer: int, enc: dict) -> tuple[torch.Tensor, ...]:
    """The model's own choice at ``layer`` [tokens, k] and what the control compares the weights with: JetMoE's and
    Zaya's router hooks give the weights; Doge's are checked through its MoE output (the routed experts' part)."""
    block = hf.model.layers[layer]
    seen: dict[str, object] = {}
    router = block.mlp if kind == "doge" else block.mlp.router if kind == "jetmoe" else block.mlp.gate
    hooks = [router.register_forward_hook(lambda _m, i, out: seen.update(inp=i[0], out=out))]
    if kind == "doge":
        hooks.append(block.mlp.register_forward_pre_hook(lambda _m, i: seen.update(x=i[0].clone())))
    try:
        with torch.no_grad():
            hf(**enc)
    finally:
        for hook in hooks:
            hook.remove()
    out, k = seen["out"], hf.config.num_experts_per_tok
    if kind == "jetmoe":  # gates grouped by expert; index_sorted_experts says where each came from
        logits, flat = out[4], torch.empty_like(out[2])
        flat[out[0]] = out[2]
        return logits.topk(k, -1).indices, flat.view(-1, k)
    if kind == "zaya":
        probs = out[0].softmax(-1) + router.balancing_biases
        ids = probs.topk(k, -1).indices
        return ids.masked_fill(ids == hf.config.num_experts, 0), out[1]
    keys = out[1]  # [2, tokens, keys]: expert a * keys + b scores x[a] + y[b]; all experts ranked by brute force
    every = (keys[0][:, :, None] + keys[1][:, None, :]).flatten(1)
    return every.topk(k, -1).indices, seen["x"]


@pytest.mark.parametrize("kind", list(OTHER_LAYOUTS))
def test_other_router_layouts_follow_the_models_own_rule(kind):
    """Router logits equal output_router_logits; the chosen experts are the model's own top-k (Zaya: over softmax
    plus balancing biases, its "no expert" class read as 0; Doge: every expert's summed key scores ranked); the
    weights are the router's (JetMoE's grouped gates put back per token, Zaya's probabilities) or, for Doge, give
    its MoE output: the shared expert plus the chosen experts' embeddings weighted by them."""
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(AutoConfig.for_model(kind, **{**COMMON, **OTHER_LAYOUTS[kind]})).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Doge's mlp.hook_post reads only the shared expert: dropped at load
        model = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    enc = model.to_tokens(TEXTS)
    mask, (B, L) = enc["attention_mask"].bool(), enc["input_ids"].shape
    layer = 1
    acts = model.collect(TEXTS, [f"blocks.{layer}.mlp.hook_{name}" for name in ROUTING]).values
    got = [acts[f"blocks.{layer}.mlp.hook_{name}"].view(B * L, -1) for name in ROUTING]
    with torch.no_grad():
        recorded = hf(**enc, output_router_logits=True).router_logits
    want = recorded[len(recorded) // 2 * (layer + 1) - 1]  # JetMoE records its attention's router before its MLP's
    real = mask.view(-1)  # collect gives padding positions as zeros
    torch.testing.assert_close(got[0][real], want.float().reshape(B * L, -1)[real], rtol=1e-5, atol=1e-5)
    ids, control = _layout_control(kind, hf, layer, enc)
    assert torch.equal(got[1][real].long().sort(-1).values, ids[real].sort(-1).values), kind
    if kind != "doge":
        torch.testing.assert_close(got[2][real], control.float()[real], rtol=1e-5, atol=1e-6)
        return
    moe = hf.model.layers[layer].mlp
    x = control.view(B * L, -1)
    with torch.no_grad():
        shared = moe.down_proj(moe.act_fn(moe.gate_proj(x)) * moe.up_proj(x))
        ids_TK = got[1].long()
        mixed = moe.act_fn(torch.einsum("tkd,td->tk", moe.down_embed(ids_TK), x)) * got[2]
        routed = torch.einsum("tk,tkd->td", mixed, moe.up_embed(ids_TK))
        out = moe(control)[0].view(B * L, -1)
    torch.testing.assert_close((shared + routed)[real], out[real], rtol=1e-5, atol=1e-5)
