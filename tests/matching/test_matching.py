"""SAE Match, lineage, hidden-state approximation, stitching, meta-SAEs and correlations, on SAEs whose
right answer is known by construction (permuted, rescaled, subset and noisy copies)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.matching import (
    align_ends,
    approximate,
    correlate,
    decompose,
    explained_by_gap,
    explained_variance,
    fold,
    lineage,
    match,
    match_chain,
    meta_table,
    paths,
    stitch,
    train_meta_sae,
)  # fmt: skip
from interplab.core.saes import SAE
from interplab.core.saes.training.in_memory import fit_tensor

D, M = 32, 96


def jumprelu(seed: int, d_sae: int = M, site: str = "blocks.1.hook_resid_post") -> SAE:
    sae = SAE.create("jumprelu", d_in=D, d_sae=d_sae, site=site)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        sae.W_dec.copy_(torch.nn.functional.normalize(torch.randn(d_sae, D, generator=g), dim=1))
        sae.W_enc.copy_(sae.W_dec.T * 1.5)
        sae.b_enc.copy_(torch.randn(d_sae, generator=g) * 0.1)
        sae.b_dec.copy_(torch.randn(D, generator=g) * 0.1)
        sae.set_threshold(torch.rand(d_sae, generator=g) * 0.4 + 0.1)
    return sae.eval()


def permuted_rescaled(sae: SAE, seed: int, site: str = "blocks.2.hook_resid_post") -> tuple[SAE, np.ndarray]:
    """The same SAE with latents permuted and each rescaled by c (threshold c*t): identical outputs up to order."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(sae.d_sae, generator=g)  # new latent perm[i]... old latent i goes to slot where[i]
    c = torch.rand(sae.d_sae, generator=g) * 3 + 0.2
    copy = SAE.create("jumprelu", d_in=sae.d_in, d_sae=sae.d_sae, site=site)
    with torch.no_grad():
        copy.W_enc.copy_((sae.W_enc * c)[:, perm])
        copy.b_enc.copy_((sae.b_enc * c)[perm])
        copy.W_dec.copy_((sae.W_dec / c[:, None])[perm])
        copy.b_dec.copy_(sae.b_dec)
        copy.set_threshold((sae.threshold * c)[perm])
    where = torch.argsort(perm).numpy()  # old latent i is new latent where[i]
    return copy.eval(), where


def x_TD(n: int = 512, seed: int = 5) -> torch.Tensor:
    return torch.randn(n, D, generator=torch.Generator().manual_seed(seed)) * 1.5


@pytest.mark.parametrize("dense", [False, True])
def test_a_permuted_rescaled_copy_with_other_thresholds_is_matched_exactly(dense):
    a = jumprelu(0)
    b, where = permuted_rescaled(a, seed=1)
    assert not torch.allclose(a.threshold, b.threshold[where])  # the thresholds differ
    x = x_TD()
    torch.testing.assert_close(a(x), b(x), atol=1e-4, rtol=1e-4)  # and the SAEs are the same function
    m = match(a, b, dense=dense, progress=False)
    assert np.array_equal(m.perm, where)
    assert float(m.error.max()) < 1e-6
    assert m.share_below(1e-6) == 1.0
    assert (m.site_a, m.site_b) == ("blocks.1.hook_resid_post", "blocks.2.hook_resid_post")
    assert list(m.to_frame().columns) == ["latent", "match", "error"]


def test_without_folding_the_rescaled_copy_is_not_matched_exactly():
    """Folding is what makes rescaled latents equal: raw decoder rows differ by the scale."""
    a = jumprelu(0)
    b, where = permuted_rescaled(a, seed=1)
    raw_cost = ((a.W_dec[:, None] - b.W_dec[None, where]) ** 2).mean(-1).diagonal()
    assert float(raw_cost.max()) > 1e-3
    assert float(match(a, b, progress=False).error.max()) < 1e-6


@pytest.mark.parametrize("dense", [False, True])
def test_matching_without_folding_compares_the_parameters_as_they_are(dense):
    """``folded=False``: the MSE of the raw decoder rows, so latents rescaled in the copy no longer match exactly."""
    a = jumprelu(0)
    b, _ = permuted_rescaled(a, seed=1)
    raw = match(a, b, dense=dense, progress=False, folded=False)
    raw_cost = ((a.W_dec[:, None] - b.W_dec[None]) ** 2).mean(-1).detach()
    torch.testing.assert_close(torch.from_numpy(raw.error), raw_cost[torch.arange(M), torch.from_numpy(raw.perm)])
    assert float(raw.error.max()) > 1e-3  # the folded match of the same pair has errors under 1e-6
    assert raw.info["folded"] is False and match(a, b, progress=False).info["folded"] is True
    assert fold(a, by_threshold=False).scale.eq(1).all()
    torch.testing.assert_close(fold(a, by_threshold=False).W_dec, a.W_dec.detach())


def test_sparse_solver_finds_the_dense_optimum_on_noisy_copies():
    a = jumprelu(0, d_sae=256)
    b, where = permuted_rescaled(a, seed=2)
    with torch.no_grad():
        b.W_dec.add_(torch.randn(b.W_dec.shape, generator=torch.Generator().manual_seed(3)) * 0.02)
    sparse, dense = match(a, b, candidates=8, progress=False), match(a, b, dense=True, progress=False)
    assert sparse.error.sum() == pytest.approx(dense.error.sum(), rel=1e-5)
    assert np.array_equal(sparse.perm, dense.perm)
    assert (sparse.perm == where).mean() > 0.95
    assert 0 < sparse.share_below(float(np.median(sparse.error))) <= 0.5 + 1 / 256


def test_sparse_solver_stays_close_to_the_optimum_on_unrelated_saes():
    """Two unrelated SAEs: the optimum may use edges outside the candidate graph; the cost stays within 3%."""
    a, b = jumprelu(0, d_sae=256), jumprelu(9, d_sae=256)
    sparse, dense = match(a, b, progress=False), match(a, b, dense=True, progress=False)
    assert dense.error.sum() <= sparse.error.sum() <= 1.03 * dense.error.sum()
    assert sorted(sparse.perm.tolist()) == list(range(256))


def test_match_refuses_mismatched_saes_before_work():
    with pytest.raises(ValueError, match=r"sae_a has 96 latents and sae_b 48.*stitch"):
        match(jumprelu(0), jumprelu(1, d_sae=48))
    other = SAE.create("jumprelu", d_in=16, d_sae=M)
    with pytest.raises(ValueError, match=r"d_in=32.*d_in=16"):
        match(jumprelu(0), other)
    with pytest.raises(TypeError, match=r"sae_b must be an interplab SAE"):
        match(jumprelu(0), "blocks.2")


def test_lineage_follows_latents_through_a_chain():
    a = jumprelu(0, site="blocks.0.hook_resid_post")
    b, where_ab = permuted_rescaled(a, 1, "blocks.1.hook_resid_post")
    c, where_bc = permuted_rescaled(b, 2, "blocks.2.hook_resid_post")
    chain = match_chain([a, b, c], progress=False)
    ids, errors = paths(chain)
    assert np.array_equal(ids[2], where_bc[where_ab])
    assert errors.shape == (2, M) and float(errors.max()) < 1e-6
    steps = lineage(chain, 7)
    assert [s["latent"] for s in steps] == [7, int(where_ab[7]), int(where_bc[where_ab[7]])]
    assert [s["site"] for s in steps] == [f"blocks.{i}.hook_resid_post" for i in range(3)]


def test_hidden_state_through_matched_latents_equals_the_reconstruction_of_an_equivalent_sae():
    a = jumprelu(0, site="blocks.0.hook_resid_post")
    b, _ = permuted_rescaled(a, 1, "blocks.1.hook_resid_post")
    x = x_TD()
    m = match(a, b, progress=False)
    with torch.no_grad():
        torch.testing.assert_close(approximate(x, a, b, m.perm), a(x), atol=1e-4, rtol=1e-4)
        # a wrong permutation explains far less
        wrong = approximate(x, a, b, np.roll(m.perm, 1))
    assert explained_variance(x, wrong) < explained_variance(x, a(x)) - 0.3
    acts = {"blocks.0.hook_resid_post": x, "blocks.1.hook_resid_post": x}
    df = explained_by_gap(acts, [a, b], max_gap=1, progress=False)
    assert list(df.gap) == [0, 1, 0]
    ev = df.explained_variance.to_numpy()
    assert ev[1] == pytest.approx(ev[0], abs=1e-4)  # gap 1 through the match == a's own reconstruction


def test_stitching_classifies_subset_latents_as_reconstruction_and_ends_at_the_large_sae():
    large = jumprelu(0, d_sae=192)
    small = SAE.create("jumprelu", d_in=D, d_sae=64, site=large.site)
    with torch.no_grad():  # the small SAE is 64 of the large SAE's latents
        small.W_enc.copy_(large.W_enc[:, :64])
        small.b_enc.copy_(large.b_enc[:64]), small.W_dec.copy_(large.W_dec[:64]), small.b_dec.copy_(large.b_dec)
        small.set_threshold(large.threshold[:64])
    x = x_TD(2048)
    st = stitch(small.eval(), large, x, threshold=0.9)
    assert list(st.kinds[:64]) == ["reconstruction"] * 64
    assert all(st.partners[j] == [j] for j in range(64))
    cos = torch.nn.functional.normalize(large.W_dec, dim=1)
    expected_novel = (cos[64:] @ cos[:64].T).max(1).values < 0.9
    assert np.array_equal(st.kinds[64:] == "novel", expected_novel.numpy())
    assert st.curve.mse.iloc[-1] == pytest.approx(st.mse_large, rel=1e-4)
    assert st.curve.mse.iloc[0] == pytest.approx(st.mse_small, rel=1e-4)
    # swapping a latent for its exact copy changes nothing: the novel latents alone reach the large SAE
    after_novel = st.curve[st.curve.n_swapped == 0].mse.iloc[-1]
    assert after_novel == pytest.approx(st.mse_large, rel=1e-4)
    assert st.chart() is not None


def test_stitching_trained_saes_novel_latents_lower_the_error():
    """Data made of 96 sparse directions; SAEs of 24 and 96 latents trained on it."""
    g = torch.Generator().manual_seed(0)
    truth = torch.nn.functional.normalize(torch.randn(96, D, generator=g), dim=1)
    codes = torch.rand(6000, 96, generator=g) * (torch.rand(6000, 96, generator=g) < 0.04)
    x = codes @ truth
    small = fit_tensor(x, "batchtopk", width=24, k=4, steps=600, batch_size=256, lr=3e-3, progress=False)
    large = fit_tensor(x, "batchtopk", width=96, k=4, steps=600, batch_size=256, lr=3e-3, progress=False)
    st = stitch(small, large, x)
    assert st.mse_large < st.mse_small
    novel = st.kinds == "novel"
    assert 0 < novel.sum() < 96
    assert float(np.median(st.delta_mse[novel])) < 0  # inserting a novel latent lowers the error
    assert st.curve.mse.min() < st.mse_small
    assert st.curve.n_large.iloc[-1] == 96 and st.curve.n_small.iloc[-1] < 24


def test_meta_sae_recovers_shared_components_of_decoder_rows():
    """Decoder rows built as sums of 2 of 16 base directions: a meta-SAE of width 16 with k=2 finds them."""
    g = torch.Generator().manual_seed(0)
    base = torch.nn.functional.normalize(torch.randn(16, D, generator=g), dim=1)
    pairs = torch.stack([torch.randperm(16, generator=g)[:2] for _ in range(400)])
    sae = SAE.create("topk", d_in=D, d_sae=400, k=4, site="blocks.1.hook_resid_post")
    with torch.no_grad():
        sae.W_dec.copy_(torch.nn.functional.normalize(base[pairs[:, 0]] + base[pairs[:, 1]], dim=1))
    meta = train_meta_sae(sae, width=16, k=2, steps=1500, batch_size=128, lr=3e-3, progress=False)
    rows = torch.nn.functional.normalize(sae.W_dec.detach(), dim=1)
    with torch.no_grad():
        assert explained_variance(rows, meta(rows)) > 0.8
    parts = decompose(meta, sae, 0, labels={1: "one", 2: "two"})
    assert 1 <= len(parts) <= 4
    assert parts[0]["weight"] >= parts[-1]["weight"] > 0
    # latents sharing latent 0's strongest meta-latent share one of its base directions
    top = parts[0]["siblings"]
    assert top and all(set(pairs[s].tolist()) & set(pairs[0].tolist()) for s in top[:3])
    table = meta_table(meta, sae, labels={0: "zero"}, latents=[0, 1])
    assert set(table.latent) == {0, 1} and table[table.latent == 0].label.iloc[0] == "zero"


def test_fit_tensor_refuses_bad_rows():
    with pytest.raises(ValueError, match=r"x_TD must be a 2-D tensor"):
        fit_tensor(torch.zeros(5), width=4)
    with pytest.raises(ValueError, match=r"NaN"):
        fit_tensor(torch.full((4, 3), float("nan")), width=4)


def test_correlation_finds_permuted_noisy_partners():
    g = torch.Generator().manual_seed(0)
    a = torch.relu(torch.randn(4000, 50, generator=g))
    perm = torch.randperm(50, generator=g)
    b = torch.cat([a[:, perm] + 0.1 * torch.randn(4000, 50, generator=g), torch.zeros(4000, 3)], 1)  # 3 dead
    sim = correlate(a, b)
    assert np.array_equal(sim.partner_b[:50], perm.numpy())
    assert np.array_equal(sim.partner_a[perm.numpy()], np.arange(50))
    assert float(np.nanmin(sim.mpc_a)) > 0.95
    assert np.isnan(sim.mpc_b[50:]).all()
    assert len(sim.to_frame()) == 100


def test_tokens_align_by_the_character_they_end_at():
    assert align_ends([-1, 3, 7, 9], [-1, 3, 5, 9]) == [(1, 1), (3, 3)]
    assert align_ends([-1, 2], [-1]) == []


def test_similarity_of_two_tiny_models_on_shared_text():
    from interplab.core.matching import similarity

    from tests.tiny import tiny_model

    gpt2, llama = tiny_model("gpt2"), tiny_model("llama")
    sae_a = SAE.create("standard", d_in=32, d_sae=40, site="blocks.1.hook_resid_post", l1_coefficient=1.0)
    sae_b = SAE.create("standard", d_in=32, d_sae=40, site="blocks.0.hook_resid_post", l1_coefficient=1.0)
    texts = ["the cat sat on the mat", "Mary gave John a drink", "the quick fox jumps over the lazy dog"]
    sim = similarity(gpt2, sae_a, llama, sae_b, texts)
    assert sim.n_tokens == sum(len(t.split()) for t in texts)  # BOS skipped, every word aligned
    assert sim.mpc_a.shape == (40,) and sim.mpc_b.shape == (40,)
    live = ~np.isnan(sim.mpc_a)
    assert live.any() and (sim.mpc_a[live] <= 1 + 1e-5).all()
    # one model against itself at one site: every live latent's best partner is itself, correlation 1
    self_sim = similarity(gpt2, sae_a, gpt2, sae_a, texts)
    live = ~np.isnan(self_sim.mpc_a)
    assert np.allclose(self_sim.mpc_a[live], 1, atol=1e-4)
