"""Attribution graphs against an independent brute-force implementation of the same replacement model.

The reference here shares no code with ``core/circuits``: plain torch forward hooks on the Hugging Face
module (no nnsight, no autograd) hold attention's queries and keys, every norm's scale and every MLP
output at their values from a first pass, so the model is linear in what is added to its MLP outputs
and embeddings. Removing one source (a feature's decoder row times its activation, an error vector, a
token's embedding) and rerunning gives that source's direct effect on every target exactly: the
whole adjacency, compared entry by entry to 1e-4. The completeness of the linear decomposition is
checked too: each target's value is the sum of its row plus the transcoders' decoder biases.
"""

from __future__ import annotations

import pytest
import torch
from interplab.core.circuits import Graph, attribute
from interplab.core.saes import SAE

from tests.tiny import tiny_model

PROMPT = "the cat sat on the mat and the dog ran"
NORMS = {"gemma3": ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm"),
         "llama": ("input_layernorm", "post_attention_layernorm")}  # fmt: skip
MLP_OUT = {"gemma3": "post_feedforward_layernorm", "llama": "mlp"}


def transcoders(d: int, arch: str = "jumprelu", skip_layers=(1,), seed: int = 0) -> list[SAE]:
    out = []
    for layer in range(2):
        tc = SAE.create(arch, d_in=d, d_sae=40, k=6 if "topk" in arch else None, site=f"blocks.{layer}.hook_mlp_in",
                        site_out=f"blocks.{layer}.hook_mlp_out", d_out=d, skip=layer in skip_layers)  # fmt: skip
        g = torch.Generator().manual_seed(seed + layer)
        with torch.no_grad():
            for p in tc.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            if arch == "jumprelu":
                tc.set_threshold(torch.rand(40, generator=g) * 0.3)
            if arch == "batchtopk":
                tc.topk_threshold.fill_(0.2)
        out.append(tc.eval())
    return out


class BruteForce:
    """The linearised replacement model by hooks and cached values; effects by removing one source at a time."""

    def __init__(self, family: str, hf: torch.nn.Module, ids: torch.Tensor, tcs: list[SAE], skip_bos: bool = True):
        self.hf, self.ids, self.tcs, self.family = hf, ids, tcs, family
        self.layers = hf.model.layers
        self.cache: dict = {}
        self.mode = "record"
        self.delta: dict = {}
        self.now: dict = {}
        handles = []
        for i, block in enumerate(self.layers):
            for name in NORMS[family]:
                handles.append(block.get_submodule(name).register_forward_hook(self._norm((i, name))))
            for name in ("self_attn.q_proj", "self_attn.k_proj"):
                handles.append(block.get_submodule(name).register_forward_hook(self._fixed((i, name))))
            handles.append(block.get_submodule(MLP_OUT[family]).register_forward_hook(self._mlp_out(i)))
        handles.append(hf.model.norm.register_forward_hook(self._norm(("final",))))
        handles.append(hf.model.embed_tokens.register_forward_hook(self._embed))
        self.handles = handles
        with torch.no_grad():
            hf(input_ids=ids)
        self.mode = "linear"
        mlp_norm = NORMS[family][-1]
        self.mlp_in = [self.cache[(i, mlp_norm, "out")][0] for i in range(len(self.layers))]
        self.acts, self.errors = [], []
        for i, tc in enumerate(tcs):
            with torch.no_grad():
                a = tc.encode(self.mlp_in[i])
                if skip_bos:
                    a[0] = 0
                self.acts.append(a)
                self.errors.append(self.cache[("mlp", i)][0] - (a @ tc.W_dec + tc.b_dec + tc.skip_out(self.mlp_in[i])))

    def close(self) -> None:
        for h in self.handles:
            h.remove()

    def _norm(self, key):
        def hook(mod, args, out):
            x = args[0]
            if self.mode == "record":
                eps = getattr(mod, "eps", getattr(mod, "variance_epsilon", None))
                w = mod.weight.float()
                gain = 1 + w if self.family == "gemma3" else w
                self.cache[(*key, "scale")] = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps) * gain
                self.cache[(*key, "out")] = out.detach().clone()
                return None
            new = x * self.cache[(*key, "scale")]
            if key[-1] == NORMS[self.family][-1]:
                self.now[("mlp_in", key[0])] = new
            if key == ("final",):
                self.now["final"] = new
            return new

        return hook

    def _fixed(self, key):
        def hook(mod, args, out):
            if self.mode == "record":
                self.cache[key] = out.detach().clone()
                return None
            return self.cache[key]

        return hook

    def _mlp_out(self, i):
        def hook(mod, args, out):
            if self.mode == "record":
                self.cache[("mlp", i)] = out.detach().clone()
                return None
            tc = self.tcs[i]
            base = self.cache[("mlp", i)] + self.delta.get(i, 0)
            if tc.cfg.skip:  # the skip stays in the linear path
                return base + tc.skip_out(self.now[("mlp_in", i)]) - tc.skip_out(self.mlp_in[i])
            return base

        return hook

    def _embed(self, mod, args, out):
        if self.mode == "record":
            self.cache["embed"] = out.detach().clone()
            return None
        return self.cache["embed"] + self.delta.get("embed", 0)

    def targets(self, graph: Graph, W_U: torch.Tensor) -> torch.Tensor:
        """Every target's value (feature pre-activations less b_enc, demeaned logits) with the current deltas."""
        self.now = {}
        with torch.no_grad():
            self.hf(input_ids=self.ids)
        vals = []
        for layer, pos, latent in graph.features.tolist():
            vals.append(self.now[("mlp_in", layer)][0, pos] @ self.tcs[layer].W_enc[:, latent])
        for tok in graph.logit_ids:
            vals.append(self.now["final"][0, -1] @ (W_U[tok] - W_U.mean(0)))
        return torch.stack(vals)

    def adjacency(self, graph: Graph) -> torch.Tensor:
        W_U = self.hf.lm_head.weight.detach()
        n_pos = self.ids.shape[1]
        base = self.targets(graph, W_U)
        cols = []
        for layer, pos, latent in graph.features.tolist():
            d = torch.zeros(1, n_pos, self.mlp_in[0].shape[-1])
            d[0, pos] = -self.acts[layer][pos, latent] * self.tcs[layer].W_dec[latent].detach()
            self.delta = {layer: d}
            cols.append(base - self.targets(graph, W_U))
        for layer in range(len(self.layers)):
            for pos in range(n_pos):
                d = torch.zeros(1, n_pos, self.mlp_in[0].shape[-1])
                d[0, pos] = -self.errors[layer][pos]
                self.delta = {layer: d}
                cols.append(base - self.targets(graph, W_U))
        for pos in range(n_pos):
            d = torch.zeros_like(self.cache["embed"])
            d[0, pos] = -self.cache["embed"][0, pos]
            self.delta = {"embed": d}
            cols.append(base - self.targets(graph, W_U))
        self.delta = {}
        rows = torch.stack(cols, 1)  # [targets, sources]
        n = graph.n_nodes
        full = torch.zeros(n, n)
        n_f, n_src = graph.n_features, rows.shape[1]
        full[:n_f, :n_src] = rows[:n_f]
        full[n - graph.n_logits :, :n_src] = rows[n_f:]
        return full, base


@pytest.mark.parametrize(("family", "arch"), [("gemma3", "jumprelu"), ("gemma3", "topk"), ("llama", "batchtopk")])
def test_adjacency_equals_brute_force_linear_replacement(family, arch):
    model = tiny_model(family)
    d = model.d_model
    tcs = transcoders(d, arch)
    graph = attribute(model, tcs, PROMPT, batch_size=16, progress=False)
    assert graph.n_features > 20 and graph.n_logits >= 1
    ids = model.to_tokens(PROMPT)["input_ids"][:1]
    ref = BruteForce(family, model.module, ids, tcs)
    try:
        expected, _ = ref.adjacency(graph)
    finally:
        ref.close()
    scale = float(expected.abs().max())
    assert scale > 0
    torch.testing.assert_close(graph.adjacency, expected, atol=1e-4 * max(1.0, scale), rtol=0)
    # the rows have teeth: many edges are far from zero, and features at later layers read earlier ones
    assert int((expected.abs() > 1e-2 * scale).sum()) > 100
    n_f = graph.n_features
    later = graph.features[:, 0] == 1
    assert graph.adjacency[:n_f][later][:, :n_f][:, ~later].abs().sum() > 0
    # a feature gets nothing from later layers or later positions
    for i, (layer, pos, _) in enumerate(graph.features.tolist()):
        row = graph.adjacency[i, :n_f]
        bad = (graph.features[:, 0] >= layer) | (graph.features[:, 1] > pos)
        assert not bool(row[bad].any())


def test_rows_sum_to_the_target_with_the_decoder_biases():
    """Linearity: a logit target's value equals its row's sum plus what each transcoder's b_dec adds."""
    model = tiny_model("gemma3")
    tcs = transcoders(model.d_model, skip_layers=())
    graph = attribute(model, tcs, PROMPT, batch_size=8, progress=False)
    ids = model.to_tokens(PROMPT)["input_ids"][:1]
    ref = BruteForce("gemma3", model.module, ids, tcs)
    try:
        W_U = model.module.lm_head.weight.detach()
        base = ref.targets(graph, W_U)
        n_pos = ids.shape[1]
        # the b_dec contributions: remove every layer's b_dec at every position at once
        ref.delta = {layer: -tcs[layer].b_dec.detach().expand(1, n_pos, -1) for layer in range(2)}
        without_bias = ref.targets(graph, W_U)
    finally:
        ref.close()
    bias_part = base - without_bias
    n_f = graph.n_features
    rows = torch.cat([graph.adjacency[:n_f], graph.adjacency[graph.n_nodes - graph.n_logits :]])
    torch.testing.assert_close(rows.sum(1), base - bias_part, atol=1e-3, rtol=1e-4)


def test_max_feature_nodes_keeps_the_most_influential_rows():
    model = tiny_model("gemma3")
    tcs = transcoders(model.d_model)
    full = attribute(model, tcs, PROMPT, batch_size=8, progress=False)
    capped = attribute(model, tcs, PROMPT, batch_size=8, max_feature_nodes=24, progress=False)
    assert capped.n_features == 24 < full.n_features
    for i, (layer, pos, latent) in enumerate(capped.features.tolist()):
        j = full.feature_index(layer, pos, latent)
        keep = torch.cat([capped.features.new_tensor([full.feature_index(*f) for f in capped.features.tolist()]),
                          torch.arange(full.n_features, full.n_nodes)])  # fmt: skip
        torch.testing.assert_close(capped.adjacency[i], full.adjacency[j, keep], atol=1e-5, rtol=0)


def test_graph_save_load_and_viewer_json(tmp_path):
    model = tiny_model("gemma3")
    graph = attribute(model, transcoders(model.d_model), PROMPT, batch_size=16, progress=False)
    graph.save(tmp_path / "g")
    back = Graph.load(tmp_path / "g")
    assert back.tokens == graph.tokens and back.logit_ids == graph.logit_ids
    torch.testing.assert_close(back.adjacency, graph.adjacency)
    assert torch.equal(back.features, graph.features)
    assert back.scores() == pytest.approx(graph.scores())
    js = graph.to_json(slug="t")
    ids = {n["node_id"] for n in js["nodes"]}
    assert {"metadata", "qParams", "nodes", "links"} <= set(js)
    assert js["metadata"]["prompt_tokens"] == graph.tokens
    assert all(link["source"] in ids and link["target"] in ids for link in js["links"])
    kinds = {n["feature_type"] for n in js["nodes"]}
    assert {"embedding", "logit"} <= kinds
    assert sum(n["is_target_logit"] for n in js["nodes"]) == 1


def test_bad_input_is_refused_before_any_forward_pass():
    model = tiny_model("gemma3")
    tcs = transcoders(model.d_model)
    with pytest.raises(ValueError, match=r"transcoders are missing for layers \[1\]"):
        attribute(model, tcs[:1], PROMPT)
    sae = SAE.create("topk", d_in=model.d_model, d_sae=8, k=2, site="blocks.0.hook_resid_post")
    with pytest.raises(TypeError, match="must be a transcoder"):
        attribute(model, [sae, tcs[1]], PROMPT)
    with pytest.raises(ValueError, match="texts\\[0\\] is empty"):
        attribute(model, tcs, "  ")
    with pytest.raises(ValueError, match="Supported families"):
        attribute(tiny_model("gpt2"), tcs, PROMPT)
    with pytest.raises(TypeError, match="bos_error must be True or False, got 'no'"):
        attribute(model, tcs, PROMPT, bos_error="no")


# ------------------------------------------------------------ interventions
def test_turning_a_feature_off_matches_a_hand_made_forward_pass():
    from interplab.core.circuits import intervene

    model = tiny_model("gemma3")
    tcs = transcoders(model.d_model)
    graph = attribute(model, tcs, PROMPT, batch_size=16, progress=False)
    last = graph.features[:, 1] == graph.n_pos - 1  # a feature at the last position reaches the logits directly
    layer, pos, latent = graph.features[last][graph.activations[last].argmax()].tolist()
    hf = model.module
    ids = model.to_tokens(PROMPT)["input_ids"][:1]
    mlp_in = {}
    h1 = hf.model.layers[layer].pre_feedforward_layernorm.register_forward_hook(
        lambda m, a, o: mlp_in.__setitem__("x", o)
    )

    def off(m, a, o):
        act = tcs[layer].encode(mlp_in["x"])[0, pos, latent]
        o = o.clone()
        o[0, pos] -= act * tcs[layer].W_dec[latent]
        return o

    h2 = hf.model.layers[layer].post_feedforward_layernorm.register_forward_hook(off)
    try:
        with torch.no_grad():
            expected = hf(input_ids=ids).logits[0, -1]
    finally:
        h1.remove(), h2.remove()
    r = intervene(model, tcs, PROMPT, {(layer, pos, latent): 0.0}, max_new_tokens=3)
    torch.testing.assert_close(r.logits_after, expected, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(r.logits_after, r.logits_before)
    same = intervene(model, tcs, PROMPT, [(layer, pos, latent, 1.0)])
    torch.testing.assert_close(same.logits_after, same.logits_before)
    assert isinstance(r.generated_after, str) and r.to_dict()["changes"] == [[layer, pos, latent, 0.0]]
    with pytest.raises(ValueError, match="pos must be"):
        intervene(model, tcs, PROMPT, {(layer, 99, latent): 0.0})


def test_the_replacement_pass_records_its_graph_with_the_weights_frozen_and_restores_them():
    # The backward passes take gradients towards the leaves only: weights requiring grad would make the recorded
    # graph keep each layer's input for weight gradients never taken (09's kernel peaked at 1.47 GB with them).
    model = tiny_model("gemma3")
    seen = []
    mlp = model.module.model.layers[1].mlp.down_proj
    handle = mlp.register_forward_hook(lambda mod, args, out: seen.append(mod.weight.requires_grad))
    try:
        attribute(model, transcoders(model.d_model), PROMPT, batch_size=8, progress=False)
    finally:
        handle.remove()
    assert seen and not any(seen)
    assert all(p.requires_grad for p in model.module.parameters())  # as they were
