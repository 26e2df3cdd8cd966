"""QK attributions against a brute-force computation on the real Hugging Face module.

The reference shares no code with ``core/circuits``: the hooks of ``test_attribute.BruteForce`` hold the
attention patterns of the layers below the head, every norm's scale and every MLP output at their values
from a first pass (the head's own ``q_norm``/``k_norm`` scales too), and a registered attention function
records the post-RoPE queries and keys that the model itself computes. Removing one source from the
residual at the query side only (its query recomputed, the key from the unchanged run) changes the score by
that source's row sum in the table; the key side likewise by its column sum; the table adds up to the score
the real model computes.
"""

from __future__ import annotations

import pytest
import torch
from interplab.core.circuits import attribute
from interplab.core.circuits.qk import qk
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from tests.circuits.test_attribute import PROMPT, BruteForce, transcoders
from tests.tiny import tiny_model

CAPTURED: dict[int, tuple[torch.Tensor, torch.Tensor, float]] = {}


def _capture(module, query, key, value, attention_mask, **kwargs):
    """Record the post-RoPE queries and keys of every layer, then attend as sdpa does."""
    CAPTURED[module.layer_idx] = (query.detach().clone(), key.detach().clone(), kwargs["scaling"])
    return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, attention_mask, **kwargs)


AttentionInterface.register("qk_capture", _capture)
AttentionMaskInterface.register("qk_capture", sdpa_mask)


class QKBruteForce(BruteForce):
    """BruteForce with the head's layer left free to compute its queries and keys (their per-head norms frozen)."""

    def __init__(self, family, hf, ids, tcs, layer):
        self.qk_layer = layer
        self.extra = []
        if family == "gemma3":
            attn = hf.model.layers[layer].self_attn
            for name in ("q_norm", "k_norm"):
                self.extra.append(getattr(attn, name).register_forward_hook(self._norm((layer, f"self_attn.{name}"))))
        super().__init__(family, hf, ids, tcs)

    def _fixed(self, key):
        hold = super()._fixed(key)
        if key[0] != self.qk_layer:
            return hold
        return lambda mod, args, out: hold(mod, args, out) if self.mode == "record" else None

    def close(self) -> None:
        super().close()
        for h in self.extra:
            h.remove()

    def qk_vectors(self, delta: dict) -> tuple[torch.Tensor, torch.Tensor, float]:
        """The head layer's queries [H, P, d] and keys [H_kv, P, d] with ``delta`` removed."""
        self.delta, self.now = delta, {}
        with torch.no_grad():
            self.hf(input_ids=self.ids)
        self.delta = {}
        q, k, scaling = CAPTURED[self.qk_layer]
        return q[0], k[0], scaling


def removals(ref: QKBruteForce, layer: int, last_pos: int, feature_delta=None):
    """(name, delta) removing each source that reaches ``layer``'s attention at positions <= ``last_pos``.

    ``feature_delta(src_layer, pos, latent)`` gives a feature's removal as {layer: delta}; by default the
    feature's own transcoder's write at its layer."""
    n_pos, d = ref.ids.shape[1], ref.mlp_in[0].shape[-1]

    def own_write(src_layer: int, pos: int, latent: int) -> dict:
        delta = torch.zeros(1, n_pos, d)
        delta[0, pos] = -ref.acts[src_layer][pos, latent] * ref.tcs[src_layer].W_dec[latent].detach()
        return {src_layer: delta}

    for src_layer in range(layer):
        for pos, latent in ref.acts[src_layer][: last_pos + 1].nonzero().tolist():
            yield f"feature L{src_layer} P{pos} #{latent}", (feature_delta or own_write)(src_layer, pos, latent)
        for pos in range(last_pos + 1):
            delta = torch.zeros(1, n_pos, d)
            delta[0, pos] = -ref.errors[src_layer][pos]
            yield f"error L{src_layer} P{pos}", {src_layer: delta}
    for pos in range(last_pos + 1):
        delta = torch.zeros_like(ref.cache["embed"])
        delta[0, pos] = -ref.cache["embed"][0, pos]
        yield f"token P{pos}", {"embed": delta}


@pytest.mark.parametrize(
    ("family", "head", "query_pos", "key_pos"), [("gemma3", (1, 2), 8, 5), ("llama", (1, 3), 9, 3)]
)
def test_qk_contributions_equal_brute_force_removals(family, head, query_pos, key_pos):
    model = tiny_model(family)
    tcs = transcoders(model.d_model)
    graph = attribute(model, tcs, PROMPT, batch_size=16, progress=False)
    node = next(i for i, (layer, pos, _) in enumerate(graph.features.tolist()) if layer == 1 and pos == query_pos)
    table = qk(model, tcs, graph, node, head, key_pos, batch_size=16)
    hf = model.module
    before = hf.config._attn_implementation
    hf.set_attn_implementation("qk_capture")
    try:
        ids = model.to_tokens(PROMPT)["input_ids"][:1]
        ref = QKBruteForce(family, hf, ids, tcs, head[0])
        q_real, k_real, scaling = CAPTURED[head[0]]
        kv = head[1] // (q_real.shape[1] // k_real.shape[1])
        score = float(q_real[0, head[1], query_pos] @ k_real[0, kv, key_pos]) * scaling
        q_base, k_base, _ = ref.qk_vectors({})
        rows = {name.split(" '")[0]: v for name, v in table.groupby("query", observed=True).contribution.sum().items()}
        cols = {name.split(" '")[0]: v for name, v in table.groupby("key", observed=True).contribution.sum().items()}
        checked = 0
        for name, delta in removals(ref, head[0], query_pos):
            q_cut, _, _ = ref.qk_vectors(delta)
            change = score - float(q_cut[head[1], query_pos] @ k_base[kv, key_pos]) * scaling
            assert rows.get(name, 0.0) == pytest.approx(change, abs=1e-4 * max(1.0, abs(score)))
            checked += abs(change) > 1e-3
        for name, delta in removals(ref, head[0], key_pos):
            _, k_cut, _ = ref.qk_vectors(delta)
            change = score - float(q_base[head[1], query_pos] @ k_cut[kv, key_pos]) * scaling
            assert cols.get(name, 0.0) == pytest.approx(change, abs=1e-4 * max(1.0, abs(score)))
            checked += abs(change) > 1e-3
        ref.close()
    finally:
        hf.set_attn_implementation(before)
    # the table adds up to the real model's score; many sources matter; nothing after the head's layer reads in
    assert table.attrs["score"] == pytest.approx(score, abs=1e-4 * max(1.0, abs(score)))
    assert float(table.contribution.sum()) == pytest.approx(score, abs=1e-4 * max(1.0, abs(score)))
    assert checked > 20
    assert not table["query"].str.startswith("feature L1").any() and not table["key"].str.contains(" L1 ").any()
    assert table.contribution.abs().is_monotonic_decreasing
    # each named source points at its graph node: the same feature, error or token
    for name, index in {
        **dict(zip(table["query"], table["query_node"])),
        **dict(zip(table["key"], table["key_node"])),
    }.items():
        if index < 0:
            assert name == "bias" or name.startswith("feature")
            continue
        info = graph.node(int(index))
        expected = {"feature": f"feature L{info['layer']} P{info['pos']} #{info.get('latent')}",
                    "error": f"error L{info['layer']} P{info['pos']}",
                    "token": f"token P{info['pos']} {info.get('token')!r}"}[info["kind"]]  # fmt: skip
        assert name == expected
