"""Supervised IOI dictionaries: attributes, attribute-conditional means, sufficiency and necessity beside an SAE."""

from __future__ import annotations

import pytest
import torch
from interplab.core.das.intervene import source_values

import interplab as ilab
from tests.tiny import tiny_model

SITE = "blocks.0.hook_resid_post"


@pytest.fixture(scope="module")
def setup():
    model = tiny_model("gpt2")
    pairs = ilab.patching.ioi(model, n=8, names=["Mary", "John", "cat", "dog"], corruption="flip")
    return model, pairs


def exact_sae(d: int) -> ilab.SAE:
    """A ReLU SAE whose reconstruction is exactly its input: latents relu(x) and relu(-x)."""
    sae = ilab.SAE.create("standard", d_in=d, d_sae=2 * d, site=SITE)
    eye = torch.eye(d)
    with torch.no_grad():
        for p in sae.parameters():
            p.zero_()
        sae.W_enc.copy_(torch.cat([eye, -eye], 1))
        sae.W_dec.copy_(torch.cat([eye, -eye], 0))
    return sae


def test_attributes_and_the_dictionary(setup):
    model, pairs = setup
    attrs = ilab.das.ioi_attributes(pairs)
    for row, text, io, s in zip(attrs, pairs.clean, pairs.answers, pairs.wrong, strict=True):
        assert row["io"] == io.strip() and row["s"] == s.strip()
        assert row["order"] == ("ABBA" if text.index(row["io"]) < text.index(row["s"]) else "BABA")
    assert {r["order"] for r in attrs} == {"ABBA", "BABA"}
    sup = ilab.das.supervised_dictionary(model, pairs, SITE)
    x = source_values(model, SITE, pairs.clean, [-1])[:, 0].float()
    torch.testing.assert_close(sup.mean_D, x.mean(0))
    for a, feats in sup.features.items():  # each feature: its prompts' mean minus the overall mean
        for value, u in feats.items():
            torch.testing.assert_close(u, x[[r[a] == value for r in attrs]].mean(0) - x.mean(0))
    assert sup.reconstruct(attrs).shape == x.shape


def test_sufficiency_and_necessity(setup):
    model, pairs = setup
    sae = exact_sae(model.d_model)
    table = ilab.das.compare_dictionaries(model, pairs, SITE, saes={"exact": sae})
    assert list(table["dictionary"]) == ["supervised", "exact"]
    exact = table.set_index("dictionary").loc["exact"]
    assert exact["sufficiency"] == pytest.approx(1.0, abs=1e-4)  # writing x back changes nothing
    with pytest.raises(TypeError, match=r"saes\['x'\] must be an interplab SAE"):
        ilab.das.compare_dictionaries(model, pairs, SITE, saes={"x": "sae"})
    with pytest.raises(TypeError, match="pairs must be IOI PromptPairs"):
        ilab.das.ioi_attributes(["a"])
