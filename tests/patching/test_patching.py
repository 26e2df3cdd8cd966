"""Activation patching: batched exact grids against a one-forward-per-cell reference, attribution
against autograd through plain torch hooks, metrics, prompt datasets, remote-safety and results."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.model.sites import resolve, site_module_path

import interplab as ilab
from tests.tiny import tiny_model

CLEAN = "Mary and John went to the store and John gave a drink to"
CORRUPT = "Mary and John went to the store and Mary gave a drink to"
CLEAN2 = "cat and dog went to the house and dog gave a drink to"
CORRUPT2 = "cat and dog went to the house and cat gave a drink to"
KIND_HOOK = {"resid_pre": "hook_resid_pre", "resid_post": "hook_resid_post", "attn_out": "hook_attn_out",
             "mlp_out": "hook_mlp_out", "heads": "attn.hook_z"}  # fmt: skip


def metric():
    return ilab.patching.logit_diff(" Mary", " John")


# --------------------------------------------------------------- a slow, independent reference
def _module_and_io(model, site, layer):
    (parsed,) = model.parse_sites(f"blocks.{layer}.{KIND_HOOK[site]}")
    path, io = site_module_path(model.family, parsed)
    return resolve(model.module, path), io


def hf_run(model, ids, site=None, layer=None, edit=None, grad=False):
    """Final-position logits of a plain HF forward, with ``edit(value) -> value`` applied at a site."""
    hf = model.module
    handles, captured = [], {}
    if site is not None:
        module, io = _module_and_io(model, site, layer)

        def pre(mod, args, kwargs):
            if args:
                value = edit(args[0])
                captured["x"] = value
                return (value, *args[1:]), kwargs
            value = edit(kwargs["hidden_states"])
            captured["x"] = value
            return args, {**kwargs, "hidden_states": value}

        def post(mod, args, out):
            first = out[0] if isinstance(out, tuple) else out
            value = edit(first)
            captured["x"] = value
            return (value, *out[1:]) if isinstance(out, tuple) else value

        if io == "input":
            handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        else:
            handles.append(module.register_forward_hook(post))
    try:
        with torch.set_grad_enabled(grad):
            logits = hf(input_ids=ids).logits[:, -1].float()
    finally:
        for h in handles:
            h.remove()
    return model.softcap(logits), captured.get("x")


def hf_site(model, ids, site, layer):
    _, value = hf_run(model, ids, site, layer, edit=lambda v: v)
    return value.detach().clone()


def slow_grid(model, clean, corrupt, site, positions=None, direction="denoise"):
    """One plain forward per cell (the definition of activation patching)."""
    ids_c, ids_x = model.to_tokens(clean)["input_ids"], model.to_tokens(corrupt)["input_ids"]
    base, src = (ids_x, ids_c) if direction == "denoise" else (ids_c, ids_x)
    n_pos = ids_c.shape[1]
    positions = list(range(n_pos)) if positions is None else positions
    a, w = (model.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (" Mary", " John"))
    cols = range(model.n_heads) if site == "heads" else positions
    out = np.zeros((model.n_layers, len(cols)))
    for layer in range(model.n_layers):
        src_val = hf_site(model, src, site, layer)
        for c, col in enumerate(cols):

            def edit(v, col=col, src_val=src_val):
                v = v.clone()
                if site == "heads":
                    sl = slice(col * model.d_head, (col + 1) * model.d_head)
                    v[:, positions, sl] = src_val[:, positions, sl]
                else:
                    v[:, col] = src_val[:, col]
                return v

            logits, _ = hf_run(model, base, site, layer, edit)
            out[layer, c] = float(logits[0, a] - logits[0, w])
    return out


# ----------------------------------------------------------------------------------- exact
@pytest.mark.parametrize("site", ilab.patching.SITES)
def test_batched_grid_equals_one_forward_per_cell(model, site):
    result = ilab.patching.grid(model, CLEAN, CORRUPT, metric(), site=site)
    expected = slow_grid(model, CLEAN, CORRUPT, site)
    n_pos = len(model.to_str_tokens(CLEAN))
    assert result.values.shape == (model.n_layers, model.n_heads if site == "heads" else n_pos)
    np.testing.assert_allclose(result.values, expected, atol=1e-4)
    assert np.abs(expected - result.corrupt_baseline).max() > 1e-4  # the patches do something


def test_grid_noise_direction_and_positions(model):
    result = ilab.patching.grid(model, CLEAN, CORRUPT, metric(), site="mlp_out", positions=[0, -1, 5],
                                direction="noise")  # fmt: skip
    n_pos = len(model.to_str_tokens(CLEAN))
    assert result.positions == [0, n_pos - 1, 5]
    expected = slow_grid(model, CLEAN, CORRUPT, "mlp_out", positions=[0, n_pos - 1, 5], direction="noise")
    np.testing.assert_allclose(result.values, expected, atol=1e-4)


def test_grid_endpoints_are_the_baselines(model):
    """The last layer's resid_post at the last position is all the logits see: patching it gives the
    clean run exactly; patching the shared first token changes nothing."""
    r = ilab.patching.grid(model, CLEAN, CORRUPT, metric(), site="resid_post")
    assert r.normalized[-1, -1] == pytest.approx(1.0, abs=1e-4)
    assert r.values[:, 0] == pytest.approx(np.full(model.n_layers, r.corrupt_baseline), abs=1e-5)
    noise = ilab.patching.grid(model, CLEAN, CORRUPT, metric(), site="resid_post", direction="noise")
    assert noise.normalized[-1, -1] == pytest.approx(0.0, abs=1e-4)
    logits = model.logits([CLEAN, CORRUPT])[:, 0]
    a, w = model.tokenizer(" Mary", add_special_tokens=False)["input_ids"][0], model.tokenizer(" John")["input_ids"][-1]
    assert r.clean_baseline == pytest.approx(float(logits[0, a] - logits[0, w]), abs=1e-5)
    assert r.corrupt_baseline == pytest.approx(float(logits[1, a] - logits[1, w]), abs=1e-5)


def test_several_pairs_average_and_batch_size_does_not_matter():
    m = tiny_model("llama")
    answers = ilab.patching.logit_diff([" Mary", " dog"], [" John", " cat"])
    both = ilab.patching.grid(m, [CLEAN, CLEAN2], [CORRUPT, CORRUPT2], answers, site="attn_out", batch_size=3)
    one = ilab.patching.grid(m, CLEAN, CORRUPT, metric(), site="attn_out", batch_size=1)
    two = ilab.patching.grid(m, CLEAN2, CORRUPT2, ilab.patching.logit_diff(" dog", " cat"), site="attn_out")
    np.testing.assert_allclose(both.values, (one.values + two.values) / 2, atol=1e-5)
    assert both.clean_baseline == pytest.approx((one.clean_baseline + two.clean_baseline) / 2, abs=1e-5)
    assert both.tokens == m.to_str_tokens(CLEAN)


@pytest.mark.parametrize("fam", ["gpt2", "gemma3"])
def test_remote_local_matches_local(fam):
    local, remote = tiny_model(fam), tiny_model(fam, remote="local")
    for site in ("resid_pre", "heads"):
        a = ilab.patching.grid(local, CLEAN, CORRUPT, metric(), site=site, positions=[-1, -3])
        b = ilab.patching.grid(remote, CLEAN, CORRUPT, metric(), site=site, positions=[-1, -3])
        np.testing.assert_allclose(a.values, b.values, atol=1e-5)
    for steps, path in ((1, "embeddings"), (3, "embeddings"), (3, "site")):
        a = ilab.patching.attribution(local, CLEAN, CORRUPT, metric(), steps=steps, path=path)
        b = ilab.patching.attribution(remote, CLEAN, CORRUPT, metric(), steps=steps, path=path)
        for site in ilab.patching.SITES:
            np.testing.assert_allclose(a[site].values, b[site].values, atol=1e-5)


def test_top_tokens_of_each_patch(model):
    r = ilab.patching.grid(model, CLEAN, CORRUPT, metric(), site="resid_post", top_k=3)
    assert r.top_ids.shape == (model.n_layers, r.values.shape[1], 3)
    assert np.all(np.diff(r.top_probs, axis=-1) <= 1e-7)  # sorted
    # The cell that makes the run fully clean predicts the clean run's top tokens.
    clean_logits = model.logits(CLEAN)[0, 0]
    assert r.top_ids[-1, -1].tolist() == clean_logits.topk(3).indices.tolist()
    tops = r.top(model.n_layers - 1, r.values.shape[1] - 1)
    assert [t for t, _ in tops] == [model.tokenizer.decode([i]) for i in r.top_ids[-1, -1]]


# ------------------------------------------------------------------------------ attribution
def test_attribution_is_gradient_times_difference(model):
    ids_c, ids_x = model.to_tokens(CLEAN)["input_ids"], model.to_tokens(CORRUPT)["input_ids"]
    a, w = (model.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (" Mary", " John"))
    result = ilab.patching.attribution(model, CLEAN, CORRUPT, metric())
    assert set(result) == set(ilab.patching.SITES)
    for site in ilab.patching.SITES:
        r = result[site]
        assert r.method == "attribution" and r.site == site
        for layer in range(model.n_layers):
            clean_val = hf_site(model, ids_c, site, layer)
            holder = {}

            def edit(v, holder=holder):
                v = v.detach().requires_grad_(True)
                holder["v"] = v
                return v

            logits, _ = hf_run(model, ids_x, site, layer, edit, grad=True)
            (grad,) = torch.autograd.grad(logits[0, a] - logits[0, w], holder["v"])
            prod = ((clean_val - holder["v"].detach()) * grad)[0]
            if site == "heads":
                expected = prod.reshape(prod.shape[0], model.n_heads, -1).sum(dim=(0, 2))
            else:
                expected = prod.sum(-1)
            np.testing.assert_allclose(r.values[layer] - r.corrupt_baseline, expected.numpy(), atol=1e-4)


def test_attribution_tracks_exact_on_attn_out():
    m = tiny_model("gpt2")
    exact = ilab.patching.grid(m, CLEAN, CORRUPT, metric(), site="attn_out")
    approx = ilab.patching.attribution(m, CLEAN, CORRUPT, metric(), sites="attn_out", positions=None)
    assert isinstance(approx, ilab.patching.PatchingResult)
    assert approx.clean_baseline == pytest.approx(exact.clean_baseline, abs=1e-5)
    assert np.corrcoef(exact.values.ravel(), approx.values.ravel())[0, 1] > 0.9


def _layer0_pre_hook(model, value):
    """A forward pre-hook on the first block that replaces its input (the embeddings) by ``value``."""
    block = resolve(model.module, f"{model.family.layers}.0")

    def pre(mod, args, kwargs):
        if args:
            return (value, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": value}

    return block.register_forward_pre_hook(pre, with_kwargs=True)


def ig_reference(model, ids_c, ids_x, site, layer, steps, answers, path="embeddings"):
    """Plain torch: d mean log P(answer) / d site, averaged over embeddings ``e_x + k/steps (e_c - e_x)``
    (``path="site"``: over the site's own values ``x_x + k/steps (x_c - x_x)``, the rest of the run corrupted)."""
    e_c, e_x = hf_site(model, ids_c, "resid_pre", 0), hf_site(model, ids_x, "resid_pre", 0)
    x_c, x_x = hf_site(model, ids_c, site, layer), hf_site(model, ids_x, site, layer)
    total = 0
    for k in range(steps):
        handle = _layer0_pre_hook(model, e_x + k / steps * (e_c - e_x) if path == "embeddings" else e_x)
        holder = {}

        def edit(v, holder=holder, k=k):
            v = (v if path == "embeddings" else x_x + k / steps * (x_c - x_x)).detach().requires_grad_(True)
            holder["v"] = v
            return v

        try:
            logits, _ = hf_run(model, ids_x, site, layer, edit, grad=True)
        finally:
            handle.remove()
        value = torch.log_softmax(logits, -1)[torch.arange(len(answers)), answers].mean()
        (grad,) = torch.autograd.grad(value, holder["v"])
        total = total + grad / steps
    return total


@pytest.mark.parametrize("path", ilab.patching.PATHS)
def test_integrated_gradients_equal_a_plain_torch_reference(model, monkeypatch, path):
    """Two pairs, a non-linear metric (its gradient differs at each point of the path), every site kind."""
    clean, corrupt = [CLEAN, CLEAN2], [CORRUPT, CORRUPT2]
    ids_c, ids_x = model.to_tokens(clean)["input_ids"], model.to_tokens(corrupt)["input_ids"]
    answers = torch.tensor([model.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (" Mary", " dog")])

    def prob(logits, pair):  # log P(answer of each pair): a custom metric
        return torch.log_softmax(logits, -1)[torch.arange(len(pair)), answers[pair]]

    plain = ilab.patching.attribution(model, clean, corrupt, prob)
    one = ilab.patching.attribution(model, clean, corrupt, prob, steps=1)
    for site in ilab.patching.SITES:  # steps=1 is plain attribution patching, bit for bit
        np.testing.assert_array_equal(one[site].values, plain[site].values)
    result = ilab.patching.attribution(model, clean, corrupt, prob, steps=3, path=path)
    changes = []
    for site in ilab.patching.SITES:
        r = result[site]
        for layer in range(model.n_layers):
            grad = ig_reference(model, ids_c, ids_x, site, layer, 3, answers, path)
            prod = (hf_site(model, ids_c, site, layer) - hf_site(model, ids_x, site, layer)) * grad
            if site == "heads":
                expected = prod.reshape(*prod.shape[:2], model.n_heads, -1).sum(dim=(0, 1, 3))
            else:
                expected = prod.sum(dim=(0, 2))
            np.testing.assert_allclose(r.values[layer] - r.corrupt_baseline, expected.numpy(), atol=1e-5)
        changes.append(np.abs(r.values - one[site].values).max() / np.abs(r.values - r.corrupt_baseline).max())
    assert max(changes) > 0.02  # the path changes the estimate (so the reference tells the two apart)
    # One point of the path per batch gives the same numbers as all points in one batch.
    monkeypatch.setattr(ilab.core.patching.exact, "MEMORY_BUDGET_BYTES", 1)
    chunked = ilab.patching.attribution(model, clean, corrupt, prob, sites="mlp_out", steps=3, path=path)
    np.testing.assert_allclose(chunked.values, result["mlp_out"].values, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("fam", ["gpt2", "gemma3"])
def test_integrated_gradients_are_complete_at_the_embeddings(fam):
    """Integrated gradients at the first block's input sum (over positions) to metric(clean) - metric(corrupt)."""
    m = tiny_model(fam)
    errors = []
    for steps in (1, 8, 64):
        r = ilab.patching.attribution(m, CLEAN, CORRUPT, metric(), sites="resid_pre", steps=steps)
        total = r.clean_baseline - r.corrupt_baseline
        errors.append(abs((r.values[0] - r.corrupt_baseline).sum() - total))
    assert abs(total) > 1e-3
    assert errors[2] < 0.02 * abs(total) and errors[2] < errors[1] / 3 and errors[2] < errors[0] / 3


# ---------------------------------------------------------------------------------- latents
def _tiny_sae(model, layer=1):
    sae = ilab.SAE.create("topk", d_in=model.d_model, d_sae=48, k=12, site=f"blocks.{layer}.hook_resid_post")
    sae.init_weights(seed=1)
    return sae


def test_latent_patching_matches_a_spliced_reference():
    m = tiny_model("gpt2")
    sae = _tiny_sae(m, layer=0)
    out = ilab.patching.latents(m, sae, CLEAN, CORRUPT, metric(), top=4, positions=[-1, -2, -3, 2])
    att, ex = out["attribution"], out["exact"]
    assert att.values.shape == ex.values.shape == (4, 4)
    assert att.rows == ex.rows and ex.site == "latents" and ex.row_name == "latent" and ex.layer == 0
    ids_c, ids_x = m.to_tokens(CLEAN)["input_ids"], m.to_tokens(CORRUPT)["input_ids"]
    x_c, x_x = hf_site(m, ids_c, "resid_post", 0), hf_site(m, ids_x, "resid_post", 0)
    f_c, f_x = sae.encode(x_c).detach(), sae.encode(x_x).detach()
    a, w = (m.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (" Mary", " John"))
    for r, lat in enumerate(ex.rows):
        for c, p in enumerate(ex.positions):
            # The SAE spliced in with its error term, latent `lat` at position `p` set to its clean value.
            def splice(v, lat=lat, p=p):
                f = sae.encode(v).detach()
                err = v - sae.decode(f)
                f[:, p, lat] = f_c[:, p, lat]
                return sae.decode(f) + err

            logits, _ = hf_run(m, ids_x, "resid_post", 0, splice)
            assert ex.values[r, c] == pytest.approx(float(logits[0, a] - logits[0, w]), abs=1e-4)
    # The top latents are the ones with the largest |attribution| anywhere.
    full = ilab.patching.latents(m, sae, CLEAN, CORRUPT, metric(), top=48, exact=False)["attribution"]
    best = np.abs(full.values - full.corrupt_baseline).max(axis=1)
    top4 = sorted(np.argsort(-best)[:4].tolist())
    assert sorted(np.asarray(full.rows)[top4].tolist()) == sorted(
        ilab.patching.latents(m, sae, CLEAN, CORRUPT, metric(), top=4, exact=False)["attribution"].rows
    )
    assert f_x.shape == f_c.shape


def test_latent_rows_carry_the_saes_labels(tmp_path, monkeypatch):
    from interplab.core.features.labels import set_label
    from interplab.widgets.patching import PatchingGrid

    monkeypatch.setenv("INTERPLAB_CACHE", str(tmp_path))
    m = tiny_model("gpt2")
    sae = _tiny_sae(m, layer=0)
    first = ilab.patching.latents(m, sae, CLEAN, CORRUPT, metric(), top=3, exact=False)["attribution"]
    assert first.row_text == ["", "", ""]
    set_label(sae, first.rows[1], "names <b>")
    res = ilab.patching.latents(m, sae, CLEAN, CORRUPT, metric(), top=3, exact=False)["attribution"]
    assert res.row_text == ["", "names <b>", ""]
    assert res.row_labels[1] == f"#{res.rows[1]} · names <b>" and res.row_labels[0] == f"#{res.rows[0]}"
    res.save(tmp_path / "r.npz")
    assert ilab.patching.PatchingResult.load(tmp_path / "r.npz").row_text == res.row_text
    (grid,) = PatchingGrid(res).grids
    assert grid["row_text"] == ["", "names <b>", ""]


@pytest.mark.parametrize("path", ilab.patching.PATHS)
def test_latent_integrated_gradients_use_the_path_gradient(path):
    m = tiny_model("gemma3")
    sae = _tiny_sae(m, layer=1)
    answers = torch.tensor([m.tokenizer(" Mary", add_special_tokens=False)["input_ids"][0]])

    def prob(logits):  # log P(Mary)
        return torch.log_softmax(logits, -1)[:, answers[0]]

    out = ilab.patching.latents(m, sae, CLEAN, CORRUPT, prob, top=48, exact=False, steps=4, path=path)["attribution"]
    ids_c, ids_x = m.to_tokens(CLEAN)["input_ids"], m.to_tokens(CORRUPT)["input_ids"]
    grad = ig_reference(m, ids_c, ids_x, "resid_post", 1, 4, answers, path)[0]  # [P, D]
    f_c = sae.encode(hf_site(m, ids_c, "resid_post", 1)).detach()[0]
    f_x = sae.encode(hf_site(m, ids_x, "resid_post", 1)).detach()[0]
    expected = ((f_c - f_x) * (grad @ sae.W_dec.detach().T)).T  # [latents, P]
    scale = float(expected.abs().max())
    np.testing.assert_allclose(out.values - out.corrupt_baseline, expected[out.rows].numpy(), atol=1e-5)
    plain = ilab.patching.latents(m, sae, CLEAN, CORRUPT, prob, top=48, exact=False)["attribution"]
    one = ilab.patching.latents(m, sae, CLEAN, CORRUPT, prob, top=48, exact=False, steps=1)["attribution"]
    np.testing.assert_array_equal(one.values, plain.values)
    assert one.rows == plain.rows
    assert np.abs(plain.values[np.argsort(plain.rows)] - out.values[np.argsort(out.rows)]).max() > 1e-2 * scale


def test_latents_reject_a_sae_for_another_width():
    m = tiny_model("gpt2")
    sae = ilab.SAE.create("topk", d_in=m.d_model + 1, d_sae=8, k=2, site="blocks.0.hook_resid_post")
    with pytest.raises(ValueError, match="d_in"):
        ilab.patching.latents(m, sae, CLEAN, CORRUPT, metric())


# ---------------------------------------------------------------------------------- metrics
def test_metrics_values_and_errors():
    m = tiny_model("gpt2")
    p = ilab.patching.grid(m, CLEAN, CORRUPT, ilab.patching.prob(" Mary"), site="resid_post", positions=[-1])
    probs = torch.softmax(m.logits([CLEAN, CORRUPT])[:, 0], -1)
    mary = m.tokenizer(" Mary", add_special_tokens=False)["input_ids"][0]
    assert p.clean_baseline == pytest.approx(float(probs[0, mary]), rel=1e-5)
    assert p.corrupt_baseline == pytest.approx(float(probs[1, mary]), rel=1e-5)
    kl = ilab.patching.grid(m, CLEAN, CORRUPT, ilab.patching.kl_to_clean(), site="resid_post", positions=[-1])
    assert kl.clean_baseline == pytest.approx(0.0, abs=1e-6) and kl.corrupt_baseline > 0
    assert kl.values[-1, 0] == pytest.approx(0.0, abs=1e-5)
    custom = ilab.patching.grid(m, CLEAN, CORRUPT, lambda logits: logits[:, mary], site="resid_post", positions=[-1])
    assert custom.corrupt_baseline == pytest.approx(float(m.logits(CORRUPT)[0, 0, mary]), abs=1e-5)
    with_pair = ilab.patching.grid(m, CLEAN, CORRUPT, lambda logits, pair: logits[:, mary] + pair, positions=[-1])
    assert with_pair.corrupt_baseline == pytest.approx(custom.corrupt_baseline, abs=1e-5)
    with pytest.raises(ValueError, match="one value per row"):
        ilab.patching.grid(m, CLEAN, CORRUPT, lambda logits: logits[:, :2], positions=[-1])
    with pytest.raises(ValueError, match="not one"):
        ilab.patching.grid(m, CLEAN, CORRUPT, ilab.patching.logit_diff(" Mary John", " John"))
    with pytest.raises(ValueError, match="2 answers for 1 prompt pairs"):
        ilab.patching.grid(m, CLEAN, CORRUPT, ilab.patching.logit_diff([" Mary", " John"], " John"))
    with pytest.raises(TypeError, match="metric must be"):
        ilab.patching.grid(m, CLEAN, CORRUPT, 3)


def test_bad_inputs_fail_before_work():
    m = tiny_model("gpt2")
    with pytest.raises(ValueError, match=r"same number of tokens.*\['<bos>', 'Mary'"):
        ilab.patching.grid(m, CLEAN, "Mary went to the store", metric())
    with pytest.raises(ValueError, match="site='resid_mid' is not one of"):
        ilab.patching.grid(m, CLEAN, CORRUPT, metric(), site="resid_mid")
    with pytest.raises(ValueError, match="direction='up' is not one of"):
        ilab.patching.grid(m, CLEAN, CORRUPT, metric(), direction="up")
    with pytest.raises(ValueError, match="Position 40 is outside"):
        ilab.patching.grid(m, CLEAN, CORRUPT, metric(), positions=[40])
    with pytest.raises(ValueError, match="batch_size"):
        ilab.patching.grid(m, CLEAN, CORRUPT, metric(), batch_size=0)
    with pytest.raises(ValueError, match="same number of tokens; got lengths"):
        ilab.patching.grid(m, [CLEAN, "the cat sat"], [CORRUPT, "the dog sat"], metric())
    with pytest.raises(ValueError, match="sites"):
        ilab.patching.attribution(m, CLEAN, CORRUPT, metric(), sites=["resid", "heads"])
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match="steps must be a positive integer"):
            ilab.patching.attribution(m, CLEAN, CORRUPT, metric(), steps=bad)
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        ilab.patching.latents(m, _tiny_sae(m), CLEAN, CORRUPT, metric(), steps=-1)
    with pytest.raises(ValueError, match="path='layer' is not one of"):
        ilab.patching.attribution(m, CLEAN, CORRUPT, metric(), steps=2, path="layer")


# ---------------------------------------------------------------------------------- datasets
def test_ioi_pairs_structure():
    m = tiny_model("gpt2")
    names = ["Mary", "John", "cat", "dog", "bird", "fox"]
    pairs = ilab.patching.ioi(m, n=6, templates=["when{A} and{B} went to the store{S} gave a drink to"], names=names)
    assert len(pairs) == 6 and len(set(map(len, (pairs.clean, pairs.corrupt, pairs.answers, pairs.wrong)))) == 1
    for i, (c, x, a, w) in enumerate(zip(pairs.clean, pairs.corrupt, pairs.answers, pairs.wrong, strict=True)):
        words = c.split()
        first, second, s2 = words[1], words[3], words[-5]
        assert s2 == w.strip() and {first, second} == {a.strip(), w.strip()}
        assert (first == a.strip()) == (i % 2 == 0)  # mixed: ABBA then BABA
        assert not {a.strip(), w.strip()} & set(x.split())  # ABC: three other names
    flip = ilab.patching.ioi(m, n=2, order="BABA", corruption="flip", names=names,
                             templates=["when{A} and{B} went to the store{S} gave a drink to"])  # fmt: skip
    assert flip.corrupt[0].split()[-5] == flip.answers[0].strip()
    assert flip.clean[0].split()[1] == flip.wrong[0].strip()
    r = ilab.patching.grid(m, pairs, site="resid_pre", positions=[-1])  # metric defaults to logit_diff(IO, S)
    assert r.metric == "logit_diff" and r.values.shape == (2, 1)
    with pytest.raises(ValueError, match="not single tokens"):
        ilab.patching.ioi(m, names=["Mary", "Zebedee"])
    with pytest.raises(ValueError, match="order="):
        ilab.patching.ioi(m, order="AB")


def test_prompt_pairs_builder():
    m = tiny_model("gpt2")
    pairs = ilab.patching.prompt_pairs(m, [CLEAN], [CORRUPT], [" Mary"], [" John"])
    assert pairs.logit_diff().answer == [" Mary"]
    with pytest.raises(ValueError, match="answers\\[0\\] 'Mary cat' is 2 tokens"):
        ilab.patching.prompt_pairs(m, [CLEAN], [CORRUPT], ["Mary cat"], [" John"])
    with pytest.raises(ValueError, match="1 clean prompts but 2 corrupt"):
        ilab.patching.prompt_pairs(m, [CLEAN], [CORRUPT, CORRUPT], [" Mary"], [" John"])
    groups = ilab.patching.PromptPairs([CLEAN, "the cat sat"], [CORRUPT, "the dog sat"], ["a", "b"], ["c", "d"])
    assert sorted(len(g) for g in groups.by_length(m).values()) == [1, 1]


@pytest.mark.embedded
def test_ioi_on_the_embedded_tokenizer(embedded):
    names = ilab.patching.single_token_names(embedded)
    assert len(names) >= 10
    for template in ilab.patching.IOI_TEMPLATES:
        pairs = ilab.patching.ioi(embedded, n=4, templates=[template], seed=3)
        assert len(pairs.by_length(embedded)) == 1  # every name one token: all prompts align
        ilab.patching.prompt_pairs(embedded, pairs.clean, pairs.corrupt, pairs.answers, pairs.wrong)


# ---------------------------------------------------------------------------------- results
def test_result_frame_save_load(tmp_path):
    m = tiny_model("gpt2")
    r = ilab.patching.grid(m, CLEAN, CORRUPT, metric(), site="heads")
    frame = r.to_frame()
    assert len(frame) == r.values.size and set(frame.columns) >= {"layer", "head", "value", "normalized"}
    path = r.save(tmp_path / "grid.npz")
    back = ilab.patching.PatchingResult.load(path)
    np.testing.assert_array_equal(back.values, r.values)
    np.testing.assert_array_equal(back.top_ids, r.top_ids)
    assert back.tokens == r.tokens and back.site == "heads" and back.col_labels == ["H0", "H1", "H2", "H3"]
    assert "exact heads" in repr(back)


# ---------------------------------------------------------------------------------- widget
def test_patching_grid_widget_payloads_and_selection():
    from interplab.widgets._kit import payload_array

    m = tiny_model("gpt2")
    exact = ilab.patching.grid(m, CLEAN, CORRUPT, metric(), site="resid_pre")
    heads = ilab.patching.grid(m, CLEAN, CORRUPT, metric(), site="heads")
    approx = ilab.patching.attribution(m, CLEAN, CORRUPT, metric(), sites=["resid_pre", "heads"])
    w = ilab.widgets.PatchingGrid({"exact": exact, "heads": heads, "approx": approx["resid_pre"],
                                   "approx heads": approx["heads"]})  # fmt: skip
    assert [g["group"] for g in w.grids] == ["resid_pre", "heads", "resid_pre", "heads"]
    assert [g["method"] for g in w.grids] == ["exact", "exact", "attribution", "attribution"]
    g = w.grids[0]
    assert isinstance(g["values"]["view"], memoryview)  # binary, not JSON lists
    np.testing.assert_array_equal(payload_array(g["values"]), exact.values)
    np.testing.assert_allclose(payload_array(g["normalized"]), exact.normalized, atol=1e-6)
    assert g["col_tokens"] == m.to_str_tokens(CLEAN) and g["rows"] == [0, 1]
    idx = payload_array(g["top_index"])
    assert [g["top_vocab"][i] for i in idx[1, 3]] == [t for t, _ in exact.top(1, 3)]
    assert "top_index" not in w.grids[2]  # attribution: no patched run
    assert w.grids[1]["cols"] == ["H0", "H1", "H2", "H3"]

    assert w.tab == "exact" and w.selected_cell is None
    w.selected = [1, 5]
    cell = w.selected_cell
    assert cell["layer"] == 1 and cell["position"] == 5 and cell["token"] == exact.tokens[5]
    assert cell["value"] == pytest.approx(float(exact.values[1, 5]))
    assert [t for t, _ in cell["top"]] == [t for t, _ in exact.top(1, 5)]
    w.tab = "approx heads"
    w.selected = [0, 2]
    assert w.selected_cell["head"] == 2 and w.selected_cell["top"] == []
    with pytest.raises(Exception, match="not one of"):
        w.tab = "nope"
    with pytest.raises(TypeError, match="PatchingResult"):
        ilab.widgets.PatchingGrid({"x": exact.values})
    single = ilab.widgets.PatchingGrid(exact)
    assert single.tab == "resid_pre exact"


def test_results_display_as_patching_grids():
    from interplab.extension import DISPLAYS

    m = tiny_model("gpt2")
    r = ilab.patching.grid(m, CLEAN, CORRUPT, metric(), site="mlp_out", positions=[-1])
    widget = DISPLAYS[ilab.patching.PatchingResult](r)
    assert isinstance(widget, ilab.widgets.PatchingGrid) and widget.result is r


def test_grid_site_kinds_come_from_the_site_table():
    """patching used to restate the site table; its kinds now map onto interplab.core.model.sites.KINDS."""
    from interplab.core.model.sites import KINDS
    from interplab.core.patching.exact import ORDER, SITE_KIND, SITES, site_target

    assert [SITE_KIND.get(k, k) for k in ORDER] == list(KINDS) and set(SITES) <= set(ORDER)
    model = tiny_model("llama")
    for kind in SITES:
        envoy, io = site_target(model, kind, 1)
        name = f"blocks.1.{'attn.hook_z' if kind == 'heads' else 'hook_' + kind}"
        assert (envoy, io) == model.envoy(name)
