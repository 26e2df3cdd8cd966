"""A cross-layer transcoder in the graph's tools: interventions, feature cards and QK attributions, each against
a brute-force computation on a three-layer tiny Gemma 3 with a random CLT, so that layer 0's features write to
the MLP outputs of layers 0, 1 and 2 and reach layer 2's attention through two of them.

- ``intervene``: turning a feature off (or scaling it everywhere) subtracts (or adds) its activation times its
  decoder row at every MLP output it writes to, in hooks on the Hugging Face module.
- ``feature_cards``: activations are the CLT's on the real MLP inputs; the logit effect is that of the sum of a
  feature's decoder rows through the final norm and the unembedding.
- ``qk``: removing one feature's writes (to every layer below the head) from the residual at the query or key
  side changes the head's score by that feature's row or column sum in the table.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from interplab.core.circuits import attribute, feature_cards, intervene, qk_edge
from interplab.core.circuits.qk import qk
from interplab.core.saes.clt import CrossLayerTranscoder
from transformers import AutoModelForCausalLM, Gemma3TextConfig

import interplab as ilab
from tests.circuits.test_attribute import PROMPT
from tests.circuits.test_qk import CAPTURED, QKBruteForce, removals
from tests.tiny import tiny_config, tiny_tokenizer

N_LAYERS = 3


def three_layer_model() -> ilab.Model:
    config = tiny_config("gemma3").to_dict()
    config.update(num_hidden_layers=N_LAYERS, layer_types=None)
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(Gemma3TextConfig(**config)).eval()
    return ilab.load_model(hf, tokenizer=tiny_tokenizer())


def random_clt(d_model: int, activation: str = "jumprelu") -> CrossLayerTranscoder:
    clt = CrossLayerTranscoder(N_LAYERS, d_model, 12, activation, k=4 if activation == "topk" else None)
    clt.init_weights(seed=1, threshold=0.05)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():  # writes to later layers as strong as to the feature's own
        for w in clt.W_dec:
            w.copy_(torch.randn(w.shape, generator=g) * 0.3)
    return clt.eval()


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    model = three_layer_model()
    clt = random_clt(model.d_model)
    return model, clt, attribute(model, clt, PROMPT, batch_size=16, progress=False)


def _mlp_inputs(model: ilab.Model) -> list[torch.Tensor]:
    ids = model.to_tokens(PROMPT)["input_ids"][:1]
    seen = {}
    hooks = [block.pre_feedforward_layernorm.register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(i, o))
             for i, block in enumerate(model.module.model.layers)]  # fmt: skip
    with torch.no_grad():
        model.module(input_ids=ids)
    for h in hooks:
        h.remove()
    return [seen[i][0] for i in range(N_LAYERS)]


def _by_hand(model: ilab.Model, clt: CrossLayerTranscoder, layer: int, pos: int | None, latent: int,
             factor: float) -> torch.Tensor:  # fmt: skip
    """The last position's logits with the feature scaled by ``factor`` at ``pos`` (None: everywhere)."""
    blocks = model.module.model.layers
    seen = {}

    def read(m, a, o):
        seen["a"] = clt.encode_layer(o, layer)[..., latent : latent + 1]

    def write(m, a, o, out_layer):
        change = (factor - 1.0) * seen["a"] * clt.W_dec[layer][latent, out_layer - layer]
        o = o.clone()
        if pos is None:
            return o + change
        o[:, pos] += change[:, pos]
        return o

    hooks = [blocks[layer].pre_feedforward_layernorm.register_forward_hook(read)]
    hooks += [blocks[m].post_feedforward_layernorm.register_forward_hook(lambda mod, a, o, m=m: write(mod, a, o, m))
              for m in range(layer, N_LAYERS)]  # fmt: skip
    try:
        with torch.no_grad():
            return model.module(input_ids=model.to_tokens(PROMPT)["input_ids"][:1]).logits[0, -1]
    finally:
        for h in hooks:
            h.remove()


@pytest.mark.parametrize("activation", ["jumprelu", "topk"])
def test_intervening_on_a_clt_feature_edits_every_layer_it_writes_to(activation):
    torch.set_num_threads(1)
    model = three_layer_model()
    clt = random_clt(model.d_model, activation)
    x0 = _mlp_inputs(model)[0]
    acts = clt.encode_layer(x0, 0).detach()
    pos = int(acts[1:].abs().sum(-1).argmax()) + 1
    latent = int(acts[pos].argmax())
    off = intervene(model, clt, PROMPT, {(0, pos, latent): 0.0})
    torch.testing.assert_close(off.logits_after, _by_hand(model, clt, 0, pos, latent, 0.0), atol=1e-4, rtol=1e-4)
    own_layer_only = _by_hand(model, clt, 0, pos, latent, 1.0)  # a control: the unchanged model
    assert not torch.allclose(off.logits_after, own_layer_only, atol=1e-3)
    up = intervene(model, clt, PROMPT, [(1, None, latent, 3.0)])
    torch.testing.assert_close(up.logits_after, _by_hand(model, clt, 1, None, latent, 3.0), atol=1e-4, rtol=1e-4)
    same = intervene(model, clt, PROMPT, {(0, pos, latent): 1.0})
    torch.testing.assert_close(same.logits_after, same.logits_before)


def test_clt_feature_cards_read_the_clt_and_sum_its_decoder_rows(setup):
    model, clt, graph = setup
    cards = feature_cards(graph, model, clt, n_logits=4)
    layer, _, latent = (int(v) for v in graph.features[graph.features[:, 0] == 0][0])
    card = cards[f"{layer}_{latent}"]
    acts_P = clt.encode_layer(_mlp_inputs(model)[layer][1:], layer)[:, latent].detach()
    assert card["examples"][0]["max"] == pytest.approx(float(acts_P.max()), rel=1e-5)
    assert card["density"] == pytest.approx(float((acts_P > 0).float().mean()))
    summed = clt.W_dec[layer][latent].detach().sum(0)
    norm, unembed = model.module.model.norm, model.module.lm_head
    effect = (summed / summed.norm()) * (1.0 + norm.weight.detach()) @ unembed.weight.detach().T
    assert [v for _, v in card["promotes"]] == pytest.approx(effect.topk(4).values.tolist(), abs=1e-4)
    own = clt.W_dec[layer][latent, 0].detach()  # a control: the own layer's row alone gives other effects
    own_effect = (own / own.norm()) * (1.0 + norm.weight.detach()) @ unembed.weight.detach().T
    assert own_effect.topk(4).values.tolist() != pytest.approx(effect.topk(4).values.tolist(), abs=1e-3)


class CLTBruteForce(QKBruteForce):
    """QKBruteForce over a CLT: errors are what the CLT's writes to each layer miss; no skip."""

    def __init__(self, hf, ids, clt, layer):
        shims = [SimpleNamespace(cfg=SimpleNamespace(skip=False), encode=lambda x, i=i: clt.encode_layer(x, i),
                                 W_dec=clt.W_dec[i][:, 0].detach(), b_dec=clt.b_dec[i].detach(),
                                 skip_out=lambda x: 0.0) for i in range(N_LAYERS)]  # fmt: skip
        super().__init__("gemma3", hf, ids, shims, layer)
        with torch.no_grad():
            self.errors = [self.cache[("mlp", m)][0] - clt.b_dec[m] - sum(
                self.acts[s] @ clt.W_dec[s][:, m - s] for s in range(m + 1)) for m in range(N_LAYERS)]  # fmt: skip

    def removals(self, clt, last_pos: int):
        """(name, delta) removing each source that reaches the head's layer at positions <= ``last_pos``; a
        feature's removal takes its writes to every layer from its own on."""
        n_pos, d = self.ids.shape[1], self.mlp_in[0].shape[-1]

        def clt_writes(src_layer: int, pos: int, latent: int) -> dict:
            delta = {}
            for m in range(src_layer, N_LAYERS):
                delta[m] = torch.zeros(1, n_pos, d)
                delta[m][0, pos] = -self.acts[src_layer][pos, latent] * clt.W_dec[src_layer][latent, m - src_layer]
            return delta

        return removals(self, self.qk_layer, last_pos, clt_writes)


def test_clt_qk_contributions_equal_brute_force_removals(setup):
    model, clt, graph = setup
    head, query_pos, key_pos = (2, 1), 8, 5
    node = next(i for i, (layer, pos, _) in enumerate(graph.features.tolist()) if layer == 2 and pos == query_pos)
    table = qk(model, clt, graph, node, head, key_pos, batch_size=16)
    hf = model.module
    before = hf.config._attn_implementation
    hf.set_attn_implementation("qk_capture")
    try:
        ref = CLTBruteForce(hf, model.to_tokens(PROMPT)["input_ids"][:1], clt, head[0])
        q_real, k_real, scaling = CAPTURED[head[0]]
        score = float(q_real[0, head[1], query_pos] @ k_real[0, 0, key_pos]) * scaling
        q_base, k_base, _ = ref.qk_vectors({})
        rows = {k.split(" '")[0]: v for k, v in table.groupby("query", observed=True).contribution.sum().items()}
        cols = {k.split(" '")[0]: v for k, v in table.groupby("key", observed=True).contribution.sum().items()}
        tol = 1e-4 * max(1.0, abs(score))
        checked = cross = 0
        for side, last, sums in (("q", query_pos, rows), ("k", key_pos, cols)):
            for name, delta in ref.removals(clt, last):
                q_cut, k_cut, _ = ref.qk_vectors(delta)
                q, k = (q_cut, k_base) if side == "q" else (q_base, k_cut)
                change = score - float(q[head[1], query_pos] @ k[0, key_pos]) * scaling
                assert sums.get(name, 0.0) == pytest.approx(change, abs=tol), name
                checked += abs(change) > 1e-3
                cross += name.startswith("feature L0") and abs(change) > 1e-3
        ref.close()
    finally:
        hf.set_attn_implementation(before)
    assert float(table.contribution.sum()) == pytest.approx(score, abs=tol)
    assert checked > 20 and cross > 5  # layer 0's features reach layer 2 through their writes to layers 0 and 1
    # qk_edge's query-side shares are the row sums of qk's table at the key position it chose
    edge = qk_edge(model, clt, graph, node, head=head, batch_size=16)
    at_key = qk(model, clt, graph, node, head, edge.key_pos, batch_size=16)
    assert edge.score == pytest.approx(at_key.attrs["score"], abs=1e-4)
    sums = {str(k): v for k, v in at_key.groupby("query", observed=True).contribution.sum().items() if abs(v) > 1e-5}
    shares = {k: v for k, v in zip(edge.query.source, edge.query.contribution, strict=True) if abs(v) > 1e-5}
    assert shares == pytest.approx(sums, abs=1e-4) and len(shares) > 3
