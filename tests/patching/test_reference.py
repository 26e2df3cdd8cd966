"""interplab's patching grids equal TransformerLens's ``patching.get_act_patch_*`` on the same weights.

A HookedTransformer is built from the tiny GPT-2's Hugging Face weights with TransformerLens's own
GPT-2 converter and none of its weight processing (no LayerNorm folding, no centring), so both
libraries compute the same function and the grids must agree to 1e-4.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig, patching
from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights

import interplab as ilab
from tests.tiny import tiny_hf_model, tiny_tokenizer

CLEAN = [
    "Mary and John went to the store and John gave a drink to",
    "cat and dog went to the house and dog gave a drink to",
]
CORRUPT = [
    "Mary and John went to the store and Mary gave a drink to",
    "cat and dog went to the house and cat gave a drink to",
]
ANSWERS, WRONG = [" Mary", " dog"], [" John", " cat"]


def hooked_twin(hf) -> HookedTransformer:
    c = hf.config
    cfg = HookedTransformerConfig(
        n_layers=c.n_layer, d_model=c.n_embd, n_heads=c.n_head, d_head=c.n_embd // c.n_head, d_mlp=4 * c.n_embd,
        d_vocab=c.vocab_size, n_ctx=c.n_positions, act_fn="gelu_new", normalization_type="LN", eps=c.layer_norm_epsilon,
        positional_embedding_type="standard", default_prepend_bos=False, device="cpu",
    )  # fmt: skip
    tl = HookedTransformer(cfg)
    state = convert_gpt2_weights(hf, cfg)
    tl.load_and_process_state_dict(
        state, fold_ln=False, center_writing_weights=False, center_unembed=False, fold_value_biases=False,
        refactor_factored_attn_matrices=False,
    )  # fmt: skip
    return tl.eval()


pytestmark = pytest.mark.filterwarnings("ignore:HookedTransformer is deprecated:DeprecationWarning")


def louder(hf):
    """Larger random weights than GPT-2's 0.02 init, so that patches move the logits by whole units."""
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1 + 0.2 * noise if ".ln_" in name and name.endswith("weight") else 0.25 * noise)
    return hf


@pytest.fixture(scope="module")
def twins():
    hf = louder(tiny_hf_model("gpt2", seed=3))
    model = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    tl = hooked_twin(hf)
    return model, tl


def _setup(model, tl, n_pairs):
    clean, corrupt = CLEAN[:n_pairs], CORRUPT[:n_pairs]
    ids_clean = model.to_tokens(clean)["input_ids"]
    ids_corrupt = model.to_tokens(corrupt)["input_ids"]
    tok = model.tokenizer
    a = torch.tensor([tok(x, add_special_tokens=False)["input_ids"][0] for x in ANSWERS[:n_pairs]])
    w = torch.tensor([tok(x, add_special_tokens=False)["input_ids"][0] for x in WRONG[:n_pairs]])

    def tl_metric(logits):
        last = logits[:, -1]
        rows = torch.arange(last.shape[0])
        return (last[rows, a] - last[rows, w]).mean()

    metric = ilab.patching.logit_diff(ANSWERS[:n_pairs], WRONG[:n_pairs])
    return clean, corrupt, ids_clean, ids_corrupt, tl_metric, metric


def test_twin_computes_the_same_logits(twins):
    model, tl = twins
    ids = model.to_tokens(CLEAN)["input_ids"]
    with torch.no_grad():
        np.testing.assert_allclose(tl(ids)[:, -1].numpy(), model.logits(CLEAN)[:, 0].numpy(), atol=1e-4)


TL_FUNCTIONS = {
    "resid_pre": patching.get_act_patch_resid_pre,
    "attn_out": patching.get_act_patch_attn_out,
    "mlp_out": patching.get_act_patch_mlp_out,
    "heads": patching.get_act_patch_attn_head_out_all_pos,
}


@pytest.mark.parametrize("n_pairs", [1, 2])
@pytest.mark.parametrize("site", [*TL_FUNCTIONS, "resid_post"])
def test_grid_equals_transformer_lens(twins, site, n_pairs):
    model, tl = twins
    clean, corrupt, ids_clean, ids_corrupt, tl_metric, metric = _setup(model, tl, n_pairs)
    with torch.no_grad():
        _, clean_cache = tl.run_with_cache(ids_clean)
        if site == "resid_post":
            expected = patching.generic_activation_patch(
                tl, ids_corrupt, clean_cache, tl_metric, patching.layer_pos_patch_setter, "resid_post",
                index_axis_names=("layer", "pos"),
            )  # fmt: skip
        else:
            expected = TL_FUNCTIONS[site](tl, ids_corrupt, clean_cache, tl_metric)
    ours = ilab.patching.grid(model, clean, corrupt, metric, site=site)
    assert ours.values.shape == tuple(expected.shape)
    np.testing.assert_allclose(ours.values, expected.numpy(), atol=1e-4)
    assert np.abs(expected.numpy() - ours.corrupt_baseline).max() > 0.05  # a grid with signal


def test_noising_equals_transformer_lens_with_roles_swapped(twins):
    model, tl = twins
    clean, corrupt, ids_clean, ids_corrupt, tl_metric, metric = _setup(model, tl, 2)
    with torch.no_grad():
        _, corrupt_cache = tl.run_with_cache(ids_corrupt)
        expected = patching.get_act_patch_resid_pre(tl, ids_clean, corrupt_cache, tl_metric)
    ours = ilab.patching.grid(model, clean, corrupt, metric, site="resid_pre", direction="noise")
    np.testing.assert_allclose(ours.values, expected.numpy(), atol=1e-4)


def test_remote_local_grid_equals_transformer_lens(twins):
    model, tl = twins
    remote = ilab.load_model(model.module, tokenizer=tiny_tokenizer(), remote="local")
    clean, corrupt, ids_clean, ids_corrupt, tl_metric, metric = _setup(model, tl, 1)
    with torch.no_grad():
        _, clean_cache = tl.run_with_cache(ids_clean)
        expected = patching.get_act_patch_attn_head_out_all_pos(tl, ids_corrupt, clean_cache, tl_metric)
    ours = ilab.patching.grid(remote, clean, corrupt, metric, site="heads")
    np.testing.assert_allclose(ours.values, expected.numpy(), atol=1e-4)
