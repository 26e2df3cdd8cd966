"""SAE-refined steering vectors: the span they keep, their random-span control, and the linearity claim.

The claim (Tas & Wagner, "Words in Motion", ICLR 2025): a control vector refined with an SAE changes the
output more linearly with its scale than the raw vector. ``nbs/05_steering.ipynb`` asserts it on the
embedded model; here a random vector of the same norm in the span of random latents takes the refined
vector's place and must fail the same assertion.
"""

from __future__ import annotations

import pytest
import torch

import interplab as ilab
from tests.steering.common import vector

S = ilab.steering
SITE = "blocks.1.hook_resid_post"


def tiny_sae(d_in: int = 32, d_sae: int = 24) -> ilab.SAE:
    sae = ilab.SAE.create("topk", d_in=d_in, d_sae=d_sae, k=4, site=SITE)
    sae.init_weights(seed=1)
    return sae


def residual_after_span(direction: torch.Tensor, sae: ilab.SAE, latents: list[int]) -> torch.Tensor:
    rows = sae.W_dec.detach().double()[latents]
    coef = torch.linalg.lstsq(rows.T, direction.double()[:, None]).solution
    return direction.double() - (rows.T @ coef)[:, 0]


def test_refined_vector_lies_in_the_span_of_its_best_aligned_latents(gpt2):
    sae, vec = tiny_sae(), vector(gpt2, SITE, seed=3)
    refined = S.refine(vec, sae, k=5)
    latents = refined.provenance["latents"]
    cos = torch.nn.functional.normalize(sae.W_dec.detach(), dim=1) @ (vec.direction / vec.norm)
    assert sorted(latents) == sorted(torch.topk(cos.abs(), 5).indices.tolist())
    assert residual_after_span(refined.direction, sae, latents).norm() < 1e-4 * refined.norm
    assert refined.norm == pytest.approx(vec.norm, rel=1e-5)  # the same step size per unit of scale
    assert 0 < refined.provenance["kept"] < 1
    assert refined.provenance["method"] == "sae_refined" and refined.site == vec.site


def test_refined_vector_is_the_projection_of_the_raw_one(gpt2):
    """Before rescaling, what is dropped is orthogonal to what is kept (a least-squares projection)."""
    sae, vec = tiny_sae(), vector(gpt2, SITE, seed=4)
    refined = S.refine(vec, sae, k=6)
    kept = refined.direction.double() * refined.provenance["kept"]
    dropped = vec.direction.double() - kept
    assert float(dropped @ kept) == pytest.approx(0.0, abs=1e-4 * vec.norm**2)


def test_refining_with_a_full_span_keeps_the_vector(gpt2):
    sae, vec = tiny_sae(d_sae=64), vector(gpt2, SITE, seed=5)
    refined = S.refine(vec, sae, k=32)  # 32 random rows of width 32 span everything
    torch.testing.assert_close(refined.direction, vec.direction, rtol=1e-4, atol=1e-4)
    assert refined.provenance["kept"] == pytest.approx(1.0, rel=1e-5)


def test_random_span_is_seeded_and_in_the_span_of_its_own_latents(gpt2):
    sae, vec = tiny_sae(), vector(gpt2, SITE, seed=6)
    control = S.random_span(vec, sae, k=5, seed=2)
    assert torch.equal(control.direction, S.random_span(vec, sae, k=5, seed=2).direction)
    assert not torch.equal(control.direction, S.random_span(vec, sae, k=5, seed=3).direction)
    assert residual_after_span(control.direction, sae, control.provenance["latents"]).norm() < 1e-4 * control.norm
    assert control.norm == pytest.approx(vec.norm, rel=1e-5) and len(set(control.provenance["latents"])) == 5


def test_compare_sweeps_each_vector_like_sweep(gpt2):
    sae, vec = tiny_sae(), vector(gpt2, SITE, seed=7)
    vectors = {"raw": vec, "refined": S.refine(vec, sae, k=4)}
    metric = S.prob(" the")
    cmp = S.compare(gpt2, vectors, [-2, 0, 2], metric, neutral_texts=["a b c d"], prompts=["the cat"])
    alone = S.sweep(gpt2, vectors["refined"], [-2, 0, 2], metric, neutral_texts=["a b c d"], prompts=["the cat"])
    assert cmp.r2["refined"] == alone.r2 and cmp.max_kl["refined"] == float(alone.kl.max())
    assert list(cmp.to_pandas().index) == ["raw", "refined"] and len(cmp.curves()) == 6
    same_sign = (cmp.results["raw"].slope > 0) == (cmp.results["refined"].slope > 0)
    assert cmp.more_linear("raw", "refined") == (cmp.r2["raw"] > cmp.r2["refined"] and same_sign)
    assert cmp.as_linear("raw", "refined", tolerance=0.5) == (cmp.r2["raw"] >= cmp.r2["refined"] - 0.5 and same_sign)
    assert cmp.chart().to_dict()["hconcat"]
    for method in (cmp.more_linear, cmp.as_linear):
        with pytest.raises(KeyError, match=r"'other'.*\['raw', 'refined'\]"):
            method("other", "raw")


# The notebook's setting (nbs/05_steering.ipynb, section 4): a sentiment vector at layer 6 of the embedded model.
POSITIVE = ["I love this. It is wonderful.", "What a great day, I feel happy.",
            "The food was delicious and the staff were kind.", "This is the best film I have seen.",
            "She smiled, full of joy."]  # fmt: skip
NEGATIVE = ["I hate this. It is awful.", "What a terrible day, I feel sad.",
            "The food was disgusting and the staff were rude.", "This is the worst film I have seen.",
            "She cried, full of grief."]  # fmt: skip
OPPOSING = ["I loved every minute. I thought the movie was", "I hated every minute. I thought the movie was",
            "The service was slow and rude. Overall, the meal was",
            "The service was quick and warm. Overall, the meal was"]  # fmt: skip
NEUTRAL = ["The train leaves the station at noon and arrives in the evening."]
SCALES = [-12, -8, -4, 0, 4, 8, 12]


@pytest.mark.embedded
def test_random_span_in_place_of_the_refined_vector_fails_the_linearity_claim(embedded):
    # The notebook's claim: the refined vector keeps the raw vector's linearity (R² at most 0.05 below); which of
    # the two is ahead differs between CPU types, so "more linear" is not asserted.
    site = "blocks.6.hook_resid_post"
    vec = S.diff_of_means(embedded, site, POSITIVE, NEGATIVE, position="mean")
    sae = ilab.load_sae("embedded", layer=6)
    metric = S.logit_diff({" great", " good", " wonderful"}, {" terrible", " bad", " awful"})
    controls = {f"random {seed}": S.random_span(vec, sae, k=32, seed=seed) for seed in range(3)}
    vectors = {"raw": vec, "refined": S.refine(vec, sae, k=32), **controls}
    cmp = S.compare(embedded, vectors, SCALES, metric, neutral_texts=NEUTRAL, prompts=OPPOSING)
    assert cmp.as_linear("refined", than="raw"), cmp  # the notebook's assertion, with the refined vector
    for name in controls:  # the same assertion with a random vector in its place
        assert not cmp.as_linear(name, than="raw"), cmp
