"""Edge scores against TransformerLens on the same tiny GPT-2 weights.

The reference is TransformerLens's own per-head inputs (``use_split_qkv_input``: each head's query, key and
value read their own copy of the residual stream, ``hook_q_input`` etc.), per-head outputs (``hook_result``)
and ``hook_mlp_in``: exact activation patching of one edge adds ``corrupt_u - clean_u`` to one input there,
and its backward hooks give the gradients EAP and EAP-IG multiply. interplab's edge runner works on the
Hugging Face modules with torch hooks, so the two share only the weights.
"""

from __future__ import annotations

import pytest
import torch
from interplab.core.circuits.edge_forward import EdgeForward
from interplab.core.circuits.edge_graph import EdgeGraph

import interplab as ilab
from tests.patching.test_reference import ANSWERS, CLEAN, CORRUPT, WRONG, hooked_twin, louder
from tests.tiny import tiny_hf_model, tiny_tokenizer

pytestmark = pytest.mark.filterwarnings("ignore:HookedTransformer is deprecated:DeprecationWarning")


@pytest.fixture(scope="module")
def twins():
    hf = louder(tiny_hf_model("gpt2", seed=3))
    model = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    tl = hooked_twin(hf)
    tl.set_use_split_qkv_input(True)
    tl.set_use_attn_result(True)
    tl.set_use_hook_mlp_in(True)
    tok = model.tokenizer
    answer = torch.tensor([tok(x, add_special_tokens=False)["input_ids"][0] for x in ANSWERS])
    wrong = torch.tensor([tok(x, add_special_tokens=False)["input_ids"][0] for x in WRONG])

    def tl_metric(logits):
        last = logits[:, -1]
        rows = torch.arange(last.shape[0])
        return (last[rows, answer] - last[rows, wrong]).mean()

    return model, tl, tl_metric


def tl_upstream(tl, ids) -> torch.Tensor:
    """[U, N, P, D] in the graph's order: the embeddings, then each layer's heads and its MLP."""
    _, cache = tl.run_with_cache(ids)
    outs = [cache["blocks.0.hook_resid_pre"]]
    for layer in range(tl.cfg.n_layers):
        outs += [*cache[f"blocks.{layer}.attn.hook_result"].unbind(2), cache[f"blocks.{layer}.hook_mlp_out"]]
    return torch.stack(outs)


def tl_input_hooks(graph: EdgeGraph, n_layers: int) -> list[tuple[str, int | None]]:
    """Per downstream input: the TransformerLens hook it reads and its head index (None: the whole stream)."""
    hooks: list[tuple[str, int | None]] = []
    for layer in range(n_layers):
        hooks += [(f"blocks.{layer}.hook_q_input", h) for h in range(graph.n_heads)]
        hooks += [(f"blocks.{layer}.hook_{kv}_input", g) for kv in "kv" for g in range(graph.n_kv_heads)]
        hooks.append((f"blocks.{layer}.hook_mlp_in", None))
    hooks.append((f"blocks.{n_layers - 1}.hook_resid_post", None))  # read only by the final norm
    return hooks


def tl_edge_patch(tl, tl_metric, ids, hook: tuple[str, int | None], delta: torch.Tensor) -> float:
    name, head = hook

    def add(x, hook):
        x = x.clone()
        if head is None:
            x += delta
        else:
            x[:, :, head] += delta
        return x

    with torch.no_grad():
        return float(tl_metric(tl.run_with_hooks(ids, fwd_hooks=[(name, add)])))


def tl_gradients(tl, tl_metric, ids, hooks, embeds=None) -> torch.Tensor:
    """[V, N, P, D]: d metric / d each input, by TransformerLens's backward hooks."""
    grads = {}

    def keep(grad, hook):
        grads[hook.name] = grad.detach().clone()

    names = sorted({name for name, _ in hooks})
    fwd = [] if embeds is None else [("blocks.0.hook_resid_pre", lambda x, hook: embeds.clone().requires_grad_())]
    with tl.hooks(fwd_hooks=fwd, bwd_hooks=[(n, keep) for n in names]):
        tl_metric(tl(ids)).backward()
    return torch.stack([grads[name] if head is None else grads[name][:, :, head] for name, head in hooks])


def test_exact_edge_patching_equals_transformer_lens_on_every_edge(twins):
    model, tl, tl_metric = twins
    ids_clean, ids_corrupt = model.to_tokens(CLEAN)["input_ids"], model.to_tokens(CORRUPT)["input_ids"]
    graph = EdgeGraph.of(model)
    up_clean, up_corrupt = tl_upstream(tl, ids_clean), tl_upstream(tl, ids_corrupt)
    run = EdgeForward(model, graph)
    mine_clean, mine_corrupt = run(ids_clean), run(ids_corrupt)
    torch.testing.assert_close(mine_clean.upstream, up_clean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mine_corrupt.upstream, up_corrupt, atol=1e-5, rtol=1e-5)
    metric = ilab.metrics.logit_diff(ANSWERS, WRONG).bind(model.tokenizer, len(CLEAN))
    hooks = tl_input_hooks(graph, model.n_layers)
    changed = 0
    for u, v in graph.valid.nonzero().tolist():
        mask = torch.zeros(graph.valid.shape)
        mask[u, v] = 1
        out = run(ids_clean, patch=(mine_corrupt.upstream, mask))
        mine = float(metric(out.logits, torch.arange(len(CLEAN))).mean())
        theirs = tl_edge_patch(tl, tl_metric, ids_clean, hooks[v], up_corrupt[u] - up_clean[u])
        assert mine == pytest.approx(theirs, abs=1e-4), graph.edge_names()[changed]
        changed += 1
    assert changed == graph.n_edges == 110


@pytest.mark.parametrize(("method", "steps"), [("eap", 1), ("eap-ig", 4)])
def test_eap_and_eap_ig_scores_equal_transformer_lens_gradients(twins, method, steps):
    model, tl, tl_metric = twins
    scores = ilab.circuits.edges(model, (CLEAN, CORRUPT), method, metric=ilab.metrics.logit_diff(ANSWERS, WRONG),
                                 steps=steps)  # fmt: skip
    ids_clean, ids_corrupt = model.to_tokens(CLEAN)["input_ids"], model.to_tokens(CORRUPT)["input_ids"]
    up_clean, up_corrupt = tl_upstream(tl, ids_clean), tl_upstream(tl, ids_corrupt)
    hooks = tl_input_hooks(scores.graph, model.n_layers)
    grads = torch.zeros(len(hooks), *ids_clean.shape, model.d_model)
    for k in range(1, steps + 1):
        embeds = up_corrupt[0] + k / steps * (up_clean[0] - up_corrupt[0])
        grads += tl_gradients(tl, tl_metric, ids_clean, hooks, embeds) / steps
    expected = torch.einsum("unpd,vnpd->uv", up_corrupt - up_clean, grads) * scores.graph.valid
    scale = float(expected.abs().max())
    assert scale > 0.05
    torch.testing.assert_close(scores.scores, expected, atol=1e-5 * scale, rtol=0)
    with torch.no_grad():
        assert scores.clean_metric == pytest.approx(float(tl_metric(tl(ids_clean))), abs=1e-4)
