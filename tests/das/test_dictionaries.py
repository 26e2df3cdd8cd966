"""Supervised IOI dictionaries: attributes, attribute-conditional means, sufficiency and necessity beside an SAE."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from interplab.core.das.controllability import sparse_edit
from interplab.core.das.intervene import source_values
from transformers import GPT2Config, GPT2LMHeadModel

import interplab as ilab
from tests.tiny import VOCAB_SIZE, no_forward, tiny_model, tiny_tokenizer

SITE = "blocks.0.hook_resid_post"


@pytest.fixture(scope="module")
def setup():
    model = tiny_model("gpt2")
    pairs = ilab.patching.ioi(model, n=8, names=["Mary", "John", "cat", "dog"], corruption="flip")
    return model, pairs


@pytest.fixture(scope="module")
def sharp():
    """A tiny GPT-2 with large untied random weights, so patching block 0 at the last token changes its answers."""
    torch.manual_seed(1)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=128, vocab_size=VOCAB_SIZE, bos_token_id=1,
                        eos_token_id=2, pad_token_id=0, tie_word_embeddings=False, initializer_range=0.3)  # fmt: skip
    model = ilab.load_model(GPT2LMHeadModel(config).eval(), tokenizer=tiny_tokenizer())
    return model, ilab.patching.ioi(model, n=8, names=["Mary", "John", "cat", "dog"], corruption="flip")


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
    table = ilab.das.compare_dictionaries(model, pairs, SITE, saes={"exact": sae}, ks=[1]).table
    assert list(table["dictionary"]) == ["supervised", "exact"]
    exact = table.set_index("dictionary").loc["exact"]
    assert exact["sufficiency"] == pytest.approx(1.0, abs=1e-4)  # writing x back changes nothing
    with pytest.raises(TypeError, match=r"saes\['x'\] must be an interplab SAE"):
        ilab.das.compare_dictionaries(model, pairs, SITE, saes={"x": "sae"})
    with pytest.raises(TypeError, match="pairs must be IOI PromptPairs"):
        ilab.das.ioi_attributes(["a"])


def hooked_last(model, text, write=None):
    """Brute force with plain HF forwards: block 0's output at the last token (read, or replaced by ``write``),
    and the top next token."""
    seen = {}

    def hook(_m, _i, o):
        x = (o[0] if isinstance(o, tuple) else o).clone()
        seen["x"] = x[0, -1].detach().clone()
        if write is not None:
            x[0, -1] = write.to(x.dtype)
        return (x, *o[1:]) if isinstance(o, tuple) else x

    handle = model.module.transformer.h[0].register_forward_hook(hook)
    try:
        with torch.no_grad():
            logits = model.module(**model.to_tokens(text)).logits
    finally:
        handle.remove()
    return seen["x"].float(), int(logits[0, -1].argmax())


def brute_force_controllability(model, pairs, sup, sae, ks):
    """Every edit written out by hand: counterfactual text, codes, the k largest changes by sorting, forwards."""
    attrs = ilab.das.ioi_attributes(pairs)
    values = {a: sorted({r[a] for r in attrs}) for a in ("io", "s")}
    keys = [(a, v) for a in ("io", "s", "order") for v in sup.features[a]]
    W_sup = torch.stack([sup.features[a][v] for a, v in keys])
    dictionaries = {"supervised": (lambda x, row: torch.tensor([float(row[a] == v) for a, v in keys]), W_sup),
                    "exact": (lambda x, row: sae.encode(x[None])[0].detach(), sae.W_dec.detach())}  # fmt: skip
    results = {}
    for i, (text, row) in enumerate(zip(pairs.clean, attrs, strict=True)):
        todo = []
        for a in ("io", "s"):
            choices = [v for v in values[a] if v not in (row["io"], row["s"])]
            new = choices[i % len(choices)]
            todo.append((a, re.sub(rf"\b{row[a]}\b", new, text), {**row, a: new}))
        first, second = sorted([row["io"], row["s"]], key=text.index)
        swapped = text.replace(first, "\0", 1).replace(second, first, 1).replace("\0", second, 1)
        todo.append(("order", swapped, {**row, "order": "BABA" if row["order"] == "ABBA" else "ABBA"}))
        x, own = hooked_last(model, text)
        for a, cf_text, cf_row in todo:
            x_cf, _ = hooked_last(model, cf_text)
            _, target = hooked_last(model, text, write=x_cf)
            if target == own:
                continue
            for name, (code, W) in dictionaries.items():
                delta = code(x_cf, cf_row) - code(x, row)
                order = sorted(range(len(delta)), key=lambda f: -float(delta[f].abs() * W[f].norm()))
                for k in ks:
                    edited = x + sum(delta[f] * W[f] for f in order[:k])
                    _, top = hooked_last(model, text, write=edited)
                    results.setdefault((name, a, k), []).append(top == target)
    return results


def test_sparse_controllability_against_brute_force(sharp):
    model, pairs = sharp
    sae = exact_sae(model.d_model)
    result = ilab.das.compare_dictionaries(model, pairs, SITE, saes={"exact": sae}, ks=[3, 1, 2, 10])
    control = result.controllability
    assert list(control.columns) == ["dictionary", "attribute", "k", "success", "n_edits"]
    assert sorted(set(control["k"])) == [1, 2, 3, 10]
    expected = brute_force_controllability(model, pairs, result_sup := ilab.das.supervised_dictionary(
        model, pairs, SITE), sae, [1, 2, 3, 10])  # fmt: skip
    assert result_sup.site == result.site
    assert sum(len(v) for v in expected.values()) >= 20, "too few edits change the tiny model's answer"
    for r in control.itertuples():
        hits = expected.get((r.dictionary, r.attribute, r.k), [])
        assert r.n_edits == len(hits), (r.dictionary, r.attribute, r.k)
        if hits:
            assert r.success == pytest.approx(sum(hits) / len(hits)), (r.dictionary, r.attribute, r.k)
    # Changing every latent of an exact SAE rebuilds the counterfactual's activation.
    x, c = torch.randn(2, 5, model.d_model).unbind()
    code, target = (sae.encode(v).detach() for v in (x, c))
    torch.testing.assert_close(sparse_edit(x, code, target, sae.W_dec.detach(), 64), c)
    # The supervised edit of one attribute moves two latents: k = 2 is the whole edit, k = 10 changes nothing more.
    sup_rows = control[control["dictionary"] == "supervised"].set_index(["attribute", "k"])["success"]
    for a in ("io", "s", "order"):
        assert sup_rows[(a, 2)] == sup_rows[(a, 10)] or np.isnan(sup_rows[(a, 2)])
    assert result.chart().to_dict()["vconcat"]
    assert "sufficiency" in result._repr_html_() and "n_edits" in repr(result)


def test_controllability_refuses_bad_k_before_any_forward_pass(setup):
    model, pairs = setup
    small = ilab.SAE.create("standard", d_in=model.d_model, d_sae=4, site=SITE)
    with no_forward(model):
        with pytest.raises(ValueError, match="k must be a positive integer, got 0"):
            ilab.das.compare_dictionaries(model, pairs, SITE, ks=[1, 0])
        with pytest.raises(ValueError, match=r"k=99 is larger than the dictionary 'supervised', which has \d+ latents"):
            ilab.das.compare_dictionaries(model, pairs, SITE, ks=[99])
        with pytest.raises(ValueError, match=r"k=5 is larger than the dictionary 'small', which has 4 latents"):
            ilab.das.compare_dictionaries(model, pairs, SITE, saes={"small": small}, ks=[5])
        with pytest.raises(TypeError, match="ks must be a non-empty list"):
            ilab.das.compare_dictionaries(model, pairs, SITE, ks=[])
        with pytest.raises(ValueError, match="Position 99 is outside"):
            ilab.das.compare_dictionaries(model, pairs, SITE, position=99)


def test_the_supervised_dictionary_is_fitted_on_fit_pairs_and_judged_on_pairs(setup):
    model, pairs = setup
    fit_pairs = ilab.patching.ioi(model, n=16, names=["Mary", "John", "cat", "dog"], corruption="flip", seed=3)
    held = ilab.das.compare_dictionaries(model, pairs, SITE, ks=[1], fit_pairs=fit_pairs)
    own = ilab.das.compare_dictionaries(model, pairs, SITE, ks=[1])
    sup = ilab.das.supervised_dictionary(model, fit_pairs, SITE)
    x = source_values(model, SITE, pairs.clean, [-1])[:, 0].float()
    r = sup.reconstruct(ilab.das.ioi_attributes(pairs))
    assert not torch.allclose(r, ilab.das.supervised_dictionary(model, pairs, SITE).reconstruct(
        ilab.das.ioi_attributes(pairs)))  # fmt: skip
    suff = held.table.set_index("dictionary").loc["supervised", "sufficiency"]
    assert suff != own.table.set_index("dictionary").loc["supervised", "sufficiency"]
    assert x.shape == r.shape
    narrow = ilab.patching.ioi(model, n=4, names=["Mary", "John"], corruption="flip")
    with no_forward(model), pytest.raises(ValueError, match=r"io='cat' of pairs is never in fit_pairs, which has "):
        ilab.das.compare_dictionaries(model, pairs, SITE, ks=[1], fit_pairs=narrow)
