"""Feature dashboard data: the streaming pass against brute force, resume, save/load, search, labels."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
from interplab.core.features import FeatureData, feature_data
from interplab.core.features.folder_format import CHECKPOINT
from interplab.core.features.labels import labels_path, load_labels, set_label, suggest_label
from interplab.core.features.search import (
    active_latents,
    decoder_through_norm,
    latents_for_token,
    logit_effects,
    nearest_latents,
)
from interplab.core.features.stats import hash_keys
from interplab.core.saes import load_sae

import interplab as ilab
from tests.bars import RecordingBar
from tests.tiny import TEXTS, tiny_model

SITE = "blocks.1.hook_resid_post"
LONG = " ".join(TEXTS * 2)  # longer than a row: split into pieces
CORPUS = [*TEXTS, LONG, "the cat", "Mary gave a drink to John", *TEXTS[::-1]]
SETTINGS = dict(n_top=4, n_quantile=3, context=5, lead=3, n_bins=8, seq_len=9, batch_size=3)


def make_sae(arch: str = "standard", d_sae: int = 48, seed: int = 0) -> ilab.SAE:
    kwargs = {"k": 6} if arch in ("topk", "batchtopk") else {}
    sae = ilab.SAE.create(arch, d_in=32, d_sae=d_sae, site=SITE, **kwargs)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        sae.W_enc.copy_(torch.randn(32, d_sae, generator=gen) / 4)
        sae.b_enc.copy_(torch.randn(d_sae, generator=gen) / 4 - 0.2)
        sae.W_dec.copy_(torch.randn(d_sae, 32, generator=gen))
    return sae


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPLAB_CACHE", str(tmp_path / "cache"))


# ----------------------------------------------------------------- brute force
def brute_force(model, sae, texts, seq_len, batch_size):
    """Every activation of the corpus in memory: [N, d_sae] plus, per token, its row, column, doc and position.

    Rows are cut here independently ([BOS] + pieces of seq_len - 1 tokens); each batch runs the same
    forward and encode as the streaming pass, so values are bit-identical and selection can be exact.
    """
    tok = model.tokenizer
    rows = []
    for doc, text in enumerate(texts):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        for start in range(0, len(ids), seq_len - 1):
            rows.append(([tok.bos_token_id, *ids[start : start + seq_len - 1]], doc, start))
    acts, info, row_tokens = [], [], []
    for b in range(0, len(rows), batch_size):
        chunk = rows[b : b + batch_size]
        L = max(len(r[0]) for r in chunk)
        ids = torch.zeros(len(chunk), L, dtype=torch.int64)
        mask = torch.zeros(len(chunk), L, dtype=torch.int64)
        for i, (r, _, _) in enumerate(chunk):
            ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
            row_tokens.append(r)
        x = model.run_sites({"input_ids": ids, "attention_mask": mask}, model.parse_sites(SITE))[0]
        valid = mask.bool().clone()
        valid[:, 0] = False
        with torch.no_grad():
            acts.append(sae.encode(x[valid]))
        for i, c in valid.nonzero().tolist():
            _, doc, start = chunk[i]
            info.append((b + i, c, doc, start + c))
    return torch.cat(acts).numpy(), np.array(info), row_tokens


def expected_examples(A, info, row_tokens, order, m, context, lead):
    """Context windows (token ids, this latent's acts) for the chosen token indexes of latent m."""
    index = {(r, c): n for n, (r, c, _, _) in enumerate(info.tolist())}
    tokens, acts = [], []
    for n in order:
        r, c = info[n, 0], info[n, 1]
        cols = range(c - lead, c - lead + context)
        tokens.append([row_tokens[r][j] if 1 <= j < len(row_tokens[r]) else -1 for j in cols])
        acts.append([A[index[(r, j)], m] if (r, j) in index else 0.0 for j in cols])
    return np.array(tokens, dtype=np.int32).reshape(-1, context), np.array(acts, dtype=np.float32).reshape(-1, context)


@pytest.mark.parametrize("arch", ["standard", "topk"])
def test_pass_equals_brute_force(arch):
    model = tiny_model("gemma3")
    sae = make_sae(arch)
    data = feature_data(sae, model, CORPUS, progress=False, **SETTINGS)
    A, info, row_tokens = brute_force(model, sae, CORPUS, SETTINGS["seq_len"], SETTINGS["batch_size"])
    n_top, n_q, C, lead = SETTINGS["n_top"], SETTINGS["n_quantile"], SETTINGS["context"], SETTINGS["lead"]
    N = len(A)
    assert data.n_tokens == N
    fired = A > 0
    np.testing.assert_array_equal(data.density, (fired.sum(0) / N).astype(np.float32))
    np.testing.assert_array_equal(data.max_act, A.max(0))
    mean = np.where(fired.any(0), (A * fired).sum(0, dtype=np.float64) / np.maximum(fired.sum(0), 1), 0)
    np.testing.assert_allclose(data.mean_act, mean.astype(np.float32), rtol=1e-6)
    gid = info[:, 0].astype(np.int64) * SETTINGS["seq_len"] + info[:, 1]
    alive = 0
    for m in range(sae.d_sae):
        idx = np.flatnonzero(fired[:, m])
        # top: by value desc, earlier token first
        top = idx[np.lexsort((idx, -A[idx, m]))][:n_top]
        k = len(top)
        np.testing.assert_array_equal(data.top_max[m, :k], A[top, m])
        assert (data.top_max[m, k:] == 0).all() and (data.top_where[m, k:] == -1).all()
        np.testing.assert_array_equal(data.top_where[m, :k], info[top][:, 2:])
        tokens, acts = expected_examples(A, info, row_tokens, top, m, C, lead)
        np.testing.assert_array_equal(data.top_tokens[m, :k], tokens)
        np.testing.assert_array_equal(data.top_acts[m, :k], acts)
        # quantiles: the sample of the n_reservoir largest hash keys, below the top examples (none when
        # the latent fired no more than n_top times), sorted by value, spread over ranks
        keys = hash_keys(torch.from_numpy(gid[idx]), torch.full((len(idx),), m), sae.d_sae).numpy()
        sample = idx[np.argsort(-keys)][: 4 * n_q]
        sample_keys = np.sort(keys)[::-1][: 4 * n_q]
        below = A[sample, m] < (A[top[-1], m] if k == n_top else 0)
        sample, sample_keys = sample[below], sample_keys[below]
        sample = sample[np.lexsort((-sample_keys, -A[sample, m]))]
        f = len(sample)
        picks = [((2 * j + 1) * f) // (2 * n_q) for j in range(n_q)] if f >= n_q else list(range(f))
        chosen = sample[picks]
        np.testing.assert_array_equal(data.quantile_max[m, : len(chosen)], A[chosen, m])
        np.testing.assert_array_equal(data.quantile_where[m, : len(chosen)], info[chosen][:, 2:])
        tokens, acts = expected_examples(A, info, row_tokens, chosen, m, C, lead)
        np.testing.assert_array_equal(data.quantile_tokens[m, : len(chosen)], tokens)
        np.testing.assert_array_equal(data.quantile_acts[m, : len(chosen)], acts)
        # histogram: every firing value counted in the returned linear bins
        edges = data.hist_edges[m]
        if len(idx):
            alive += 1
            np.testing.assert_allclose(np.diff(edges), np.diff(edges)[0], rtol=1e-6)
            assert edges[0] == 0 and A[idx, m].max() < edges[-1] <= A[idx, m].max() * 1.125 + 1e-6
            np.testing.assert_array_equal(data.hist_counts[m], np.histogram(A[idx, m], bins=edges)[0])
        else:
            assert data.hist_counts[m].sum() == 0
    assert alive > sae.d_sae // 2  # the test exercised real latents
    assert (data.top_max[:, :-1] >= data.top_max[:, 1:]).all()
    assert (data.quantile_max[:, :-1] >= data.quantile_max[:, 1:]).all()


def test_quantile_examples_never_repeat_top_examples():
    """Quantile examples are drawn from the firing tokens that are not top examples, so none repeats one."""
    model = tiny_model("gemma3")
    sae = make_sae("standard")
    settings = {**SETTINGS, "n_top": 3, "n_quantile": 6}
    data = feature_data(sae, model, CORPUS, progress=False, **settings)
    checked = 0
    for m in range(sae.d_sae):
        top = {tuple(w) for w, v in zip(data.top_where[m].tolist(), data.top_max[m]) if v > 0}
        quant = [tuple(w) for w, v in zip(data.quantile_where[m].tolist(), data.quantile_max[m]) if v > 0]
        assert not top & set(quant), m
        assert len(set(quant)) == len(quant)
        if quant:
            checked += 1
            assert max(data.quantile_max[m]) < data.top_max[m, -1]  # all below the smallest top example
        if data.top_max[m, -1] == 0:  # fired fewer than n_top times: everything is a top example already
            assert not quant
    assert checked > sae.d_sae // 4


def test_where_points_at_the_max_token():
    model = tiny_model("llama")
    sae = make_sae()
    data = feature_data(sae, model, CORPUS, progress=False, **SETTINGS)
    checked = 0
    for m in range(sae.d_sae):
        for j in np.flatnonzero(data.top_max[m] > 0):
            doc, pos = data.top_where[m, j]
            tokens = model.to_tokens(CORPUS[doc])["input_ids"][0]  # BOS at position 0
            assert tokens[pos] == data.top_tokens[m, j, data.lead]
            assert data.top_acts[m, j, data.lead] == data.top_max[m, j]
            checked += 1
    assert checked > 20


def test_gpt2_layernorm_family_and_token_cap():
    model = tiny_model("gpt2")
    sae = make_sae()
    data = feature_data(sae, model, CORPUS, progress=False, n_tokens=25, **SETTINGS)
    assert data.n_tokens == 25
    assert data.density.max() <= 1.0


def test_resume_equals_uninterrupted(tmp_path):
    model = tiny_model("gemma3")
    sae = make_sae()
    full = feature_data(sae, model, CORPUS, progress=False, **SETTINGS)
    path = tmp_path / "dash"
    part = feature_data(sae, model, CORPUS, progress=False, path=path, max_batches=2, **SETTINGS)
    assert not part.complete and 0 < part.n_tokens < full.n_tokens
    assert (path / CHECKPOINT).exists() and not (path / "meta.json").exists()
    part2 = feature_data(sae, model, CORPUS, progress=False, path=path, max_batches=1, **SETTINGS)
    assert not part2.complete and part.n_tokens < part2.n_tokens < full.n_tokens
    done = feature_data(sae, model, CORPUS, progress=False, path=path, **SETTINGS)
    assert done.complete and (path / "meta.json").exists() and not (path / CHECKPOINT).exists()
    for name in (
        "density",
        "max_act",
        "hist_counts",
        "hist_edges",
        "top_tokens",
        "top_acts",
        "top_max",
        "top_where",
        "quantile_tokens",
        "quantile_acts",
        "quantile_max",
        "quantile_where",
    ):
        np.testing.assert_array_equal(getattr(done, name), getattr(full, name), err_msg=name)
    np.testing.assert_allclose(done.mean_act, full.mean_act, rtol=1e-6)
    again = feature_data(sae, model, CORPUS, progress=False, path=path, max_batches=1, **SETTINGS)
    assert again.complete  # loaded from disk, not recomputed (a recomputation would stop after one batch)
    with pytest.raises(ValueError, match=r"other inputs than this call's \(n_top: 4 there, 5 now\)"):
        feature_data(sae, model, CORPUS, progress=False, path=path, **{**SETTINGS, "n_top": 5})


def test_save_load_round_trip(tmp_path):
    model = tiny_model("gemma3")
    sae = make_sae()
    data = feature_data(sae, model, CORPUS, progress=False, **SETTINGS)
    data.labels[3] = "a <b>label</b>"
    data.save(tmp_path / "d")
    data.save(tmp_path / "d")  # overwriting is atomic too
    back = FeatureData.load(tmp_path / "d")
    from interplab.core.features.folder_format import ARRAYS

    for name in ARRAYS:
        a, b = getattr(data, name), getattr(back, name)
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert back.token_strings == data.token_strings and back.labels == {3: "a <b>label</b>"}
    assert (back.site, back.n_tokens, back.context, back.lead, back.config) == (
        data.site,
        data.n_tokens,
        data.context,
        data.lead,
        data.config,
    )
    assert back.latent(5) == data.latent(5)
    assert list(back.table().columns) == ["label", "density", "max_act", "mean_act", "promotes", "suppresses"]
    assert back.table().loc[3, "label"] == "a <b>label</b>"
    np.save(tmp_path / "d" / "density.npy", np.array([object()] * data.d_sae), allow_pickle=True)
    with pytest.raises(ValueError):
        FeatureData.load(tmp_path / "d")
    with pytest.raises(FileNotFoundError):
        FeatureData.load(tmp_path / "nothing")
    precious = tmp_path / "my_sae"
    sae.save(precious)
    with pytest.raises(ValueError, match="holds other files"):
        data.save(precious)
    with pytest.raises(ValueError, match="holds other files"):
        feature_data(sae, model, CORPUS, path=precious, **SETTINGS)
    assert (precious / "cfg.json").exists()


def test_latent_card_is_plain_data():
    model = tiny_model("gemma3")
    sae = make_sae()
    data = feature_data(sae, model, CORPUS, progress=False, **SETTINGS)
    m = int(np.argmax(data.density))
    card = data.latent(m)
    json.dumps(card)  # plain Python data only
    assert card["top"][0]["max"] == pytest.approx(float(data.max_act[m]))
    assert card["top"][0]["tokens"][data.lead] == model.tokenizer.decode([int(data.top_tokens[m, 0, data.lead])])
    assert len(card["hist"]["counts"]) == 8 and len(card["logits"]["top"]) == 10
    with pytest.raises(IndexError, match="out of range"):
        data.latent(sae.d_sae)


# ---------------------------------------------------------------- logit effects
@pytest.mark.parametrize("family", ["gemma3", "gpt2", "llama"])
def test_logit_effects_match_dense(family):
    model = tiny_model(family)
    sae = make_sae()
    hf = model.module
    W_U = hf.lm_head.weight.detach()
    W = torch.nn.functional.normalize(sae.W_dec.detach(), dim=1)  # unit decoder rows, as sae_vis / Neuronpedia
    if family == "gemma3":
        W = W * (1 + hf.model.norm.weight.detach())
    elif family == "gpt2":
        W = (W - W.mean(1, keepdim=True)) * hf.transformer.ln_f.weight.detach()
    else:
        W = W * hf.model.norm.weight.detach()
    dense = (W @ W_U.T).numpy()
    got = logit_effects(sae, model, n=7, chunk=10)  # chunks smaller than the vocabulary: the merge is exercised
    want_top = np.argsort(-dense, axis=1, kind="stable")[:, :7]
    want_bot = np.argsort(dense, axis=1, kind="stable")[:, :7]
    np.testing.assert_array_equal(got["logit_top_ids"], want_top)
    np.testing.assert_array_equal(got["logit_bottom_ids"], want_bot)
    np.testing.assert_allclose(got["logit_top_values"], np.take_along_axis(dense, want_top, 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["logit_bottom_values"], np.take_along_axis(dense, want_bot, 1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", ["gemma3", "gpt2", "llama"])
def test_logit_effect_is_what_the_model_does(family):
    """A decoder direction alone in the residual moves the real final norm + unembedding as predicted."""
    model = tiny_model(family)
    sae = make_sae()
    hf = model.module
    norm = hf.transformer.ln_f if family == "gpt2" else hf.model.norm
    with torch.no_grad():
        norm.weight.copy_(torch.randn(32))  # not the default ones/zeros: (1 + w) versus w matters
        zero = torch.zeros(1, 32)
        delta = hf.lm_head(norm(zero + 10 * sae.W_dec[5])) - hf.lm_head(norm(zero))
    predicted = decoder_through_norm(sae, model)[5] @ hf.lm_head.weight.detach().T
    assert torch.corrcoef(torch.stack([delta[0], predicted]))[0, 1] > 0.9999


def test_logit_effects_report_one_step_per_vocabulary_slice(monkeypatch):
    """The slow part of a large SAE's finish has a bar: one step per slice of the unembedding."""
    from interplab.core.features import search

    model, sae = tiny_model("gpt2"), make_sae()
    whole = logit_effects(sae, model, n=5)  # the control: one slice
    monkeypatch.setattr(search, "SLICE_ROWS", 16)
    bar = RecordingBar()
    sliced = logit_effects(sae, model, n=5, progress=bar)
    assert (bar.total, bar.n) == (4, 4)  # 64 tokens in slices of 16
    for key in whole:
        np.testing.assert_allclose(sliced[key], whole[key], rtol=1e-6, atol=1e-6)


def test_logit_effects_do_not_depend_on_the_decoder_scale():
    """Effects come from the unit decoder row: rescaling a latent's decoder (and its activations the other
    way, the same SAE) leaves them unchanged, so they compare with sae_vis and Neuronpedia."""
    model = tiny_model("gemma3")
    sae = make_sae()
    before = logit_effects(sae, model, n=5)
    with torch.no_grad():
        sae.W_dec[3] *= 250.0
    after = logit_effects(sae, model, n=5)
    for key in before:
        np.testing.assert_allclose(after[key], before[key], rtol=1e-5, atol=1e-6)
    norm = model.module.model.norm.weight.detach()
    unit = sae.W_dec[3].detach() / sae.W_dec[3].detach().norm()
    dense = (unit * (1 + norm)) @ model.module.lm_head.weight.detach().T
    np.testing.assert_allclose(after["logit_top_values"][3], dense.topk(5).values.numpy(), rtol=1e-5)


# --------------------------------------------------------------------- search
def test_search_functions():
    model = tiny_model("gemma3")
    sae = make_sae()
    found = active_latents(sae, model, "the cat sat on the mat", top=3)
    assert found.tokens == ["the", "cat", "sat", "on", "the", "mat"]
    acts = model.collect("the cat sat on the mat", SITE)[SITE][0, 1:]
    dense = sae.encode(acts).detach()
    np.testing.assert_array_equal(found.ids, dense.topk(3, dim=1).indices.numpy())
    np.testing.assert_allclose(found.values, dense.topk(3, dim=1).values.numpy(), rtol=1e-6)

    ranked = latents_for_token(sae, model, "cat", top=5)
    cat = model.tokenizer("cat", add_special_tokens=False)["input_ids"][0]
    column = decoder_through_norm(sae, model) @ model.module.lm_head.weight[cat].detach()
    np.testing.assert_array_equal(ranked.ids, column.topk(5).indices.numpy())
    with pytest.raises(ValueError, match=r"2 tokens, not one: \['cat', 'dog'\]"):
        latents_for_token(sae, model, "cat dog")

    data = feature_data(sae, model, CORPUS, progress=False, **SETTINGS)
    stored = latents_for_token(data, model, "cat")
    for i, v in zip(stored.ids, stored.values):
        assert cat in data.logit_top_ids[i] and v == data.logit_top_values[i][list(data.logit_top_ids[i]).index(cat)]

    near = nearest_latents(sae, 7, top=4)
    W = torch.nn.functional.normalize(sae.W_dec.detach(), dim=1)
    cos = W @ W[7]
    cos[7] = -2
    np.testing.assert_array_equal(near.ids, cos.topk(4).indices.numpy())
    np.testing.assert_allclose(near.values, cos.topk(4).values.numpy(), rtol=1e-5)
    np.testing.assert_array_equal(data.neighbour_ids[7, :4], near.ids)
    with pytest.raises(IndexError):
        nearest_latents(sae, sae.d_sae)


# --------------------------------------------------------------------- labels
def test_labels_saved_and_suggested(tmp_path):
    model = tiny_model("gemma3")
    sae = make_sae()
    path = set_label(sae, 4, "cats and dogs")
    assert path.parent == tmp_path / "cache" / "labels"  # no known folder: the cache, keyed by the weights
    assert load_labels(sae) == {4: "cats and dogs"} and load_labels(make_sae(seed=1)) == {}
    data = feature_data(sae, model, CORPUS, progress=False, **SETTINGS)
    assert data.labels == {4: "cats and dogs"} and data.table().loc[4, "label"] == "cats and dogs"
    data.set_label(9, "nine")
    assert load_labels(sae) == {4: "cats and dogs", 9: "nine"}
    set_label(sae, 4, "")
    assert load_labels(sae) == {9: "nine"}
    data.save(tmp_path / "saved")
    set_label(sae, 2, "set after the save")
    assert FeatureData.load(tmp_path / "saved").labels == data.labels == {4: "cats and dogs", 9: "nine"}  # as saved
    assert FeatureData.load(tmp_path / "saved", sae=sae).labels == {2: "set after the save", 9: "nine"}  # the SAE's

    folder = tmp_path / "my_sae"
    sae.save(folder)
    loaded = load_sae(folder)  # load_sae records where it came from
    assert labels_path(loaded) == folder / "labels.json"
    assert labels_path(load_sae("embedded", layer=6)).parent == tmp_path / "cache" / "labels"  # package: read-only
    sae.source_path = str(folder)
    set_label(sae, 1, "beside")
    assert json.loads((folder / "labels.json").read_text()) == {"1": "beside"}

    # An SAE saved anywhere inside a source checkout (an editable install) keeps its labels beside it too;
    # only SAEs shipped inside the engine's own folder (the packaged suite) use the cache.
    inside = Path(__file__).resolve().parents[2] / ".pytest-scratch" / f"labels-{uuid.uuid4().hex}" / "sae"
    try:
        sae.save(inside)
        assert labels_path(load_sae(inside)) == inside / "labels.json"
    finally:
        shutil.rmtree(inside.parent, ignore_errors=True)

    m = int(np.argmax(data.density))
    label = suggest_label(data, m)
    top_token = model.tokenizer.decode([int(data.top_tokens[m, 0, data.lead])])
    promoted = model.tokenizer.decode([int(data.logit_top_ids[m, 0])])
    assert repr(promoted) in label and "→" in label
    assert repr(top_token) in label or "/" in label
    with pytest.raises(IndexError):
        set_label(sae, 999, "x")


# ------------------------------------------------------------------ bad input
def test_bad_input_is_refused_before_work():
    model = tiny_model("gemma3")
    sae = make_sae()
    with pytest.raises(ValueError, match="n_top must be a positive integer, got 0"):
        feature_data(sae, model, CORPUS, n_top=0)
    with pytest.raises(ValueError, match=r"lead .*must be an integer in 0\.\.3, got 4"):
        feature_data(sae, model, CORPUS, context=4, lead=4)
    with pytest.raises(ValueError, match="texts is empty"):
        feature_data(sae, model, [])
    with pytest.raises(ValueError, match=r"texts\[1\] is empty"):
        feature_data(sae, model, ["the cat", " "])
    with pytest.raises(ValueError, match="Give texts"):
        feature_data(sae, model)
    far = ilab.SAE.create("standard", d_in=32, d_sae=8, site="blocks.5.hook_resid_post")
    with pytest.raises(ValueError, match="does not have"):
        feature_data(far, model, CORPUS)
    wide = ilab.SAE.create("standard", d_in=64, d_sae=8, site=SITE)
    with pytest.raises(ValueError, match="d_in=64"):
        feature_data(wide, model, CORPUS)
    with pytest.raises(TypeError, match="Model or an ActivationStore"):
        feature_data(sae, 42, CORPUS)


def test_activation_store_source(tmp_path):
    model = tiny_model("gemma3")
    sae = make_sae()
    store = model.cache(CORPUS, SITE, tmp_path / "acts", n_tokens=60, context_size=8, shard_tokens=25)
    with pytest.raises(ValueError, match="needs model="):
        feature_data(sae, store)
    data = feature_data(sae, store, model=model, n_top=3, n_quantile=2, context=5, lead=2, batch_size=2, progress=False)
    assert data.n_tokens == 60
    with torch.no_grad():
        A = sae.encode(store.read(SITE)).numpy()
    tokens = store.tokens().numpy()
    np.testing.assert_array_equal(data.density, ((A > 0).sum(0) / 60).astype(np.float32))
    np.testing.assert_allclose(data.top_max[:, 0], A.max(0), rtol=1e-6)
    for m in range(sae.d_sae):
        for j in np.flatnonzero(data.top_max[m] > 0):
            window, pos = data.top_where[m, j]  # position counts the BOS the store left out
            assert tokens[window * 7 + pos - 1] == data.top_tokens[m, j, data.lead]


# ---------------------------------------------------------------- embedded
def first_latents(sae: ilab.SAE, n: int) -> ilab.SAE:
    """The first n latents of a BatchTopK SAE as an SAE of its own (encode is per latent, so they are unchanged)."""
    part = ilab.SAE.create("batchtopk", d_in=sae.d_in, d_sae=n, k=32, site=sae.site)
    with torch.no_grad():
        part.W_enc.copy_(sae.W_enc[:, :n])
        part.b_enc.copy_(sae.b_enc[:n])
        part.W_dec.copy_(sae.W_dec[:n])
        part.b_dec.copy_(sae.b_dec)
        part.topk_threshold.copy_(sae.topk_threshold)
    return part


@pytest.mark.embedded
def test_embedded_layer6(embedded):
    """The pretrained layer-6 SAE on the real model (its first 512 latents: logit effects over 262k tokens
    for all 4096 take about 40 s here; the benchmark runs them all)."""
    full = ilab.load_sae("embedded", layer=6)
    sae = first_latents(full, 512)
    texts = [
        "The capital of France is Paris, and the capital of Italy is Rome.",
        "def add(a, b):\n    return a + b\n",
        "When Mary and John went to the store, John gave a drink to Mary.",
    ]
    data = feature_data(sae, embedded, texts, n_top=5, n_quantile=4, batch_size=3, progress=False)
    n = sum(len(embedded.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
    assert data.n_tokens == n and data.d_sae == 512
    x = embedded.collect(texts[0], full.site)[full.site][0, 1:]
    with torch.no_grad():
        np.testing.assert_array_equal(sae.encode(x).numpy(), full.encode(x)[:, :512].numpy())
        l0 = float((full.encode(x) > 0).sum(1).float().mean())
    assert 10 < l0 < 80  # BatchTopK, k=32
    assert (data.density > 0).sum() > 20
    m = int(np.argmax(data.max_act))
    card = data.latent(m)
    assert card["top"][0]["tokens"][data.lead] in "".join(texts)
    doc, pos = data.top_where[m, 0]
    assert embedded.to_tokens(texts[doc])["input_ids"][0, pos] == data.top_tokens[m, 0, data.lead]
    paris = embedded.tokenizer(" Paris", add_special_tokens=False)["input_ids"][0]
    ranked = latents_for_token(sae, embedded, " Paris", top=3)
    hf = embedded.module
    W = torch.nn.functional.normalize(sae.W_dec.detach(), dim=1) * (1 + hf.model.norm.weight.detach().float())
    column = W @ hf.lm_head.weight[paris].detach().float()  # the model may be bfloat16
    np.testing.assert_array_equal(ranked.ids, column.topk(3).indices.numpy())
    best = ranked.ids[0]  # its promoted list holds ' Paris' or tokens promoted even more
    row = list(data.logit_top_ids[best])
    assert (
        paris in row and data.logit_top_values[best][row.index(paris)] == pytest.approx(ranked.values[0], rel=1e-4)
    ) or data.logit_top_values[best, -1] >= ranked.values[0] - 1e-4
    with pytest.raises(ValueError, match="not one"):
        latents_for_token(sae, embedded, " Parisians and Romans")


def test_search_latents_by_id_label_and_top_token():
    """The dashboard's search finds latents by id, by label and by their top tokens ("Sunday")."""
    from interplab.core.features import search_latents

    from tests.widgets.test_dashboard import hand_feature_data

    data = hand_feature_data()  # latent i's top tokens are " tok{t}" for its context ids; latent 11 never fired
    data.token_strings[23] = " Sunday"
    lead = data.top_tokens[:, :, data.lead]
    sunday = sorted({int(m) for m, j in zip(*np.nonzero(lead == 23)) if data.top_max[m, j] > 0})
    assert sunday and search_latents(data, "Sunday").tolist() == sunday
    assert search_latents(data, "  sUNDAY ").tolist() == sunday  # case and spaces aside
    assert search_latents(data, "sund").tolist() == sunday  # part of a token
    assert search_latents(data, "second").tolist() == [2]  # the label
    assert {1, 10, 11} <= set(search_latents(data, "1").tolist())  # ids starting with the digits
    assert set(range(data.d_sae)) == set(search_latents(data, "").tolist())
    never = int(np.flatnonzero(data.top_max.max(1) == 0)[0])
    data.token_strings[int(data.top_tokens[never, 0, data.lead])] = " Zanzibar"
    assert never not in search_latents(data, "zanzibar")  # an empty example slot is no top token
    with pytest.raises(TypeError, match="query is a string"):
        search_latents(data, 5)
