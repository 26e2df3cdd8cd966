"""Training SAEs (``train_sae``, ``train_saes``) on a real on-disk store of planted sparse features and
from a tiny model: what they learn, the folded input scale, dead latents, bad data and bad inputs.
"""

from __future__ import annotations

import math
import re

import interplab.core.saes.training.trainer as train_mod
import pytest
import torch
from interplab.core.saes import SAE, TopKSAE, train_sae, train_saes

from tests.saes.helpers import (
    ARCHS,
    BATCH,
    D_A,
    D_B,
    SITE_A,
    SITE_B,
    assert_same_weights,
    first_batch,
    fvu,
    fvu_at_init,
    write_store,
)
from tests.tiny import WORDS


def test_sae_train_is_the_torch_mode_switch_and_train_sae_trains():
    """``sae.train()`` / ``sae.train(False)`` switch torch's mode; ``train_sae`` trains a new SAE."""
    sae = SAE.create("standard", d_in=8, d_sae=16)
    assert sae.train(False) is sae and not sae.training
    assert sae.train() is sae and sae.training
    with pytest.raises(TypeError, match="ActivationStore"):
        train_sae(42, arch="topk", width=16, k=2)


def test_train_topk_on_planted_features(store, x_a, monkeypatch):
    norms_seen = []
    original = TopKSAE.training_loss

    def spy(self, x, dead=None):
        norms_seen.append(self.W_dec.detach().norm(dim=1).clone())
        return original(self, x, dead=dead)

    monkeypatch.setattr(TopKSAE, "training_loss", spy)
    k = 3
    x0 = first_batch(store)
    scale = math.sqrt(D_A) / float(x0.norm(dim=-1).mean())
    sae = train_saes(
        store,
        [{"arch": "topk", "width": 64, "k": k, "lr": 1e-2}],
        n_tokens=BATCH * 150,
        batch_size=BATCH,
        progress=False,
    )[0]
    assert type(sae) is TopKSAE and sae.site == SITE_A and sae.d_in == D_A and sae.d_sae == 64
    assert sae.cfg.model_name == "planted" and not sae.training
    before = fvu_at_init(sae, k, x0, x_a)
    with torch.no_grad():
        after = fvu(sae(x_a), x_a)  # RAW activations: the input scale is folded into the weights
        acts = sae.encode(x_a)
    assert before > 0.5 and after < 0.3 and after < before / 2, (before, after)
    l0 = (acts != 0).sum(-1)
    assert l0.max() <= k and float(l0.float().mean()) > k - 0.05
    # decoder rows were unit norm at every step of training...
    assert len(norms_seen) == 150
    for n in norms_seen:
        torch.testing.assert_close(n, torch.ones(64))
    # ...and the folded scale is the one measured on the first batch: rows now have norm 1/scale
    assert sae.cfg.metadata["input_scale"] == pytest.approx(scale, rel=1e-5)
    assert sae.cfg.metadata["training_tokens"] == BATCH * 150
    torch.testing.assert_close(sae.W_dec.detach().norm(dim=1), torch.full((64,), 1 / scale), rtol=1e-4, atol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_returned_sae_reads_raw_activations(store, x_a, monkeypatch, arch):
    """Folding the input scale changes the weights, not the behaviour: sae(x) == unfolded(x * s) / s."""
    import copy

    unfolded = []
    original = SAE.fold_input_scale

    def keep_copy(self, scale):
        unfolded.append((copy.deepcopy(self), scale))
        return original(self, scale)

    monkeypatch.setattr(SAE, "fold_input_scale", keep_copy)
    spec = {"arch": arch, "width": 32, "lr": 1e-2, **({"k": 3} if "topk" in arch else {})}
    sae = train_saes(store, [spec], n_tokens=BATCH * 10, batch_size=BATCH, progress=False)[0]
    ((before, scale),) = unfolded
    assert scale == pytest.approx(math.sqrt(D_A) / float(first_batch(store).norm(dim=-1).mean()), rel=1e-6)
    x = x_a[:512]
    with torch.no_grad():
        acts = sae.encode(x)
        torch.testing.assert_close(acts, before.encode(x * scale), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(sae(x), before(x * scale) / scale, rtol=1e-4, atol=1e-3)
    assert (acts != 0).any() and (acts == 0).any()


def test_train_saes_two_widths_two_sites(store2, x_a, x_b, monkeypatch):
    specs = [
        {"arch": "topk", "width": 64, "k": 3, "lr": 1e-2, "site": SITE_A},
        {"arch": "topk", "width": 48, "k": 3, "lr": 1e-2, "site": SITE_A},
        {"arch": "batchtopk", "width": 48, "k": 2, "lr": 1e-2, "site": SITE_B},
    ]
    kw = {"n_tokens": BATCH * 100, "batch_size": BATCH, "progress": False}
    saes = train_saes(store2, specs, **kw)
    assert [(s.arch, s.d_sae, s.site, s.d_in) for s in saes] == [
        ("topk", 64, SITE_A, D_A),
        ("topk", 48, SITE_A, D_A),
        ("batchtopk", 48, SITE_B, D_B),
    ]
    for sae, spec, x in zip(saes, specs, [x_a, x_a, x_b], strict=True):
        first = first_batch(store2, spec["site"])
        assert fvu(sae(x).detach(), x) < fvu_at_init(sae, spec["k"], first, x) / 2
        # each site's scale is measured on that site's data
        scale = math.sqrt(sae.d_in) / float(first.norm(dim=-1).mean())
        assert sae.cfg.metadata["input_scale"] == pytest.approx(scale, rel=1e-5)
    # one stream, no interference: each equals its spec trained alone (given the same initialisation seed)
    original = SAE.init_weights
    for i, spec in enumerate(specs):
        monkeypatch.setattr(SAE, "init_weights", lambda self, seed=0, i=i: original(self, i))
        alone = train_saes(store2, [spec], **kw)[0]
        assert_same_weights(saes[i], alone)


def test_train_from_tiny_model(gpt2):
    import random

    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(30)) for _ in range(120)]
    kw = {
        "arch": "topk",
        "width": 64,
        "k": 4,
        "lr": 1e-2,
        "site": SITE_A,
        "corpus": corpus,
        "batch_size": 128,
        "progress": False,
    }
    sae = train_sae(gpt2, n_tokens=128 * 24, **kw)
    one_step = train_sae(gpt2, n_tokens=128, **kw)
    assert type(sae) is TopKSAE and sae.site == SITE_A and sae.d_in == 32 and sae.cfg.model_name == gpt2.name
    assert sae.cfg.metadata["training_tokens"] == 128 * 24
    acts = gpt2.collect(corpus[:4], sites=[SITE_A])
    x = acts[SITE_A][:, 1:][acts.mask[:, 1:]]  # real tokens after BOS, as in training
    assert x.shape == (4 * 30, 32)
    with torch.no_grad():
        assert fvu(sae(x), x) < 0.6 and fvu(sae(x), x) < fvu(one_step(x), x) - 0.1
        assert (sae.encode(x) != 0).sum(-1).max() <= 4
    with pytest.raises(ValueError, match="site="):
        train_saes(gpt2, [{"arch": "topk", "width": 16, "k": 2}], n_tokens=256, batch_size=128)


def test_model_stream_running_out_says_how_large_the_corpus_was(gpt2):
    """When the corpus runs out, the error gives the corpus's own size, not only what training used."""
    corpus = ["the cat sat on the mat and the dog ran to the house"] * 5  # 13 tokens + EOS each
    with pytest.raises(ValueError, match=r"The corpus ran out: it holds 70 tokens in 5 documents \(0 windows of 128\)"):
        train_saes(gpt2, [{"arch": "topk", "width": 16, "k": 2}], site=SITE_A, corpus=corpus, n_tokens=256,
                   batch_size=128, progress=False)  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ({"arch": "relu2", "width": 16}, r"relu2.*batchtopk"),
        ({"arch": "topk", "width": 16, "k": 0}, r"k of a topk SAE"),
    ],
)
def test_architecture_and_k_are_checked_before_n_tokens(store, spec, match):
    """A wrong architecture or k is the error given, even when n_tokens < batch_size too."""
    with pytest.raises(ValueError, match=match):
        train_saes(store, [spec], n_tokens=100, batch_size=BATCH, progress=False)


def test_auxk_used_in_training_when_latents_are_dead(store, monkeypatch):
    calls = []
    original = TopKSAE._auxk

    def spy(self, x, recon, dead):
        calls.append(int(dead.sum()))
        return original(self, x, recon, dead)

    monkeypatch.setattr(TopKSAE, "_auxk", spy)
    sae = train_saes(
        store,
        [{"arch": "topk", "width": 128, "k": 1}],
        n_tokens=BATCH * 12,
        batch_size=BATCH,
        dead_tokens=BATCH,
        progress=False,
    )[0]
    assert calls and max(calls) > 0
    assert 0.0 <= sae.cfg.metadata["dead_fraction"] <= 1.0
    calls.clear()
    train_saes(
        store,
        [{"arch": "topk", "width": 128, "k": 1}],
        n_tokens=BATCH * 12,
        batch_size=BATCH,
        dead_tokens=10**9,
        progress=False,
    )
    assert calls == [], "no latent is dead when dead_tokens is never reached"


def test_standard_resamples_dead_latents(store, monkeypatch):
    records = []
    original = train_mod._resample

    def spy(sae, opt, dead, x, recon, seed):
        before_dec = sae.W_dec.detach().clone()
        n = original(sae, opt, dead, x, recon, seed)
        records.append(
            (
                n,
                dead.clone(),
                before_dec,
                sae.W_dec.detach().clone(),
                sae.W_enc.detach().clone(),
                sae.b_enc.detach().clone(),
                opt.state[sae.W_dec]["exp_avg"].clone(),
            )
        )
        return n

    monkeypatch.setattr(train_mod, "_resample", spy)
    train_saes(
        store,
        [{"arch": "standard", "width": 64, "l1_coefficient": 5.0, "lr": 3e-2}],
        n_tokens=BATCH * 30,
        batch_size=BATCH,
        dead_tokens=BATCH,
        resample_every=3,
        progress=False,
    )
    assert records and all(step_n == int(dead.sum()) for step_n, dead, *_ in records)
    resampled = [r for r in records if r[0] > 0]
    assert resampled, "a large L1 penalty kills latents, and they get resampled"
    n, dead, before, after, W_enc, b_enc, exp_avg = resampled[0]
    assert not torch.allclose(after[dead], before[dead])
    assert torch.equal(after[~dead], before[~dead])
    torch.testing.assert_close(after[dead].norm(dim=1), torch.ones(n))
    cos = torch.nn.functional.cosine_similarity(W_enc[:, dead].T, after[dead], dim=1)
    torch.testing.assert_close(cos, torch.ones(n))
    assert (b_enc[dead] == 0).all()
    assert (exp_avg[dead] == 0).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_activations_stop_training_naming_batch_and_row(tmp_path, x_a, monkeypatch, bad):
    data = x_a.clone()
    token = 5000
    data[token, 7] = bad
    store = write_store(tmp_path / "acts", {SITE_A: data})
    where = [
        (b, int(r))
        for b, batch in enumerate(store.batches(BATCH, seed=0))
        for r in (~torch.isfinite(batch)).any(-1).nonzero().flatten()
    ]
    assert len(where) == 1 and where[0][0] > 0, where  # training has taken steps before it arrives
    batch_i, row = where[0]
    created = []
    original = SAE.create

    def record(*args, **kwargs):
        created.append(original(*args, **kwargs))
        return created[-1]

    monkeypatch.setattr(SAE, "create", staticmethod(record))
    with pytest.raises(ValueError, match=rf"{re.escape(SITE_A)}.*batch {batch_i}, row {row}\b"):
        train_saes(
            store,
            [{"arch": "topk", "width": 32, "k": 2}, {"arch": "standard", "width": 32}],
            n_tokens=BATCH * 32,
            batch_size=BATCH,
            checkpoint_dir=tmp_path / "ckpt",
            checkpoint_every=1,
            progress=False,
        )
    assert len(created) == 2
    for sae in created:
        for name, p in sae.named_parameters():
            assert torch.isfinite(p).all(), name
        assert not torch.equal(sae.b_dec, torch.zeros(D_A)), "training ran before the bad batch"
    state = train_mod.read_checkpoint(tmp_path / "ckpt" / train_mod.CHECKPOINT)
    assert state["step"] == batch_i
    for sd in state["saes"]:
        for name, t in sd.items():
            assert torch.isfinite(t).all(), name


@pytest.mark.parametrize(
    ("source", "specs", "kwargs", "exc", "match"),
    [
        (
            "store",
            [{"arch": "topk", "width": 16, "k": 2}],
            {"n_tokens": 100, "batch_size": BATCH},
            ValueError,
            r"n_tokens \(at least one batch: >= batch_size=256\) must be an integer >= 256, got 100",
        ),
        ("store", [{"arch": "topk", "widht": 16}], {}, ValueError, r"'widht'.*'width'"),
        (
            "store",
            [{"arch": "topk", "width": 16, "k": 2, "site": "blocks.9.hook_resid_post"}],
            {},
            ValueError,
            r"blocks\.9\.hook_resid_post.*blocks\.0\.hook_resid_post",
        ),
        ("store", [], {}, ValueError, r"at least one SAE spec"),
        ("store", [{"arch": "relu2", "width": 16}], {}, ValueError, r"relu2.*batchtopk"),
        ("store", [{"arch": "topk", "width": 16, "k": 0}], {}, ValueError, r"k of a topk SAE .* must be"),
        (
            "store",
            [{"arch": "topk", "width": 16, "k": 2}],
            {"n_tokens": 16384, "batch_size": 16384},
            ValueError,
            r"8192 tokens, fewer than one batch of 16384",
        ),
        ("tensor", [{"arch": "topk", "width": 16, "k": 2}], {}, TypeError, r"ActivationStore.*Tensor"),
        ("missing", [{"arch": "topk", "width": 16, "k": 2}], {}, FileNotFoundError, r"no-such-store"),
    ],
)
def test_bad_training_inputs(store, tmp_path, source, specs, kwargs, exc, match):
    src = {"store": store, "tensor": torch.randn(100, D_A), "missing": tmp_path / "no-such-store"}[source]
    kwargs = {"n_tokens": BATCH * 4, "batch_size": BATCH, "progress": False, **kwargs}
    with pytest.raises(exc, match=match):
        train_saes(src, specs, checkpoint_dir=tmp_path / "ckpt", **kwargs)
    assert not (tmp_path / "ckpt").exists(), "nothing is written for a refused call"


def test_two_site_store_needs_a_site(store2):
    with pytest.raises(ValueError, match=r"several sites; pass site=.*blocks\.0\.hook_resid_post.*blocks\.1\."):
        train_saes(store2, [{"arch": "topk", "width": 16, "k": 2}], n_tokens=BATCH, batch_size=BATCH)


def test_train_sae_takes_every_keyword_of_train_saes():
    """``train_sae``'s keywords beyond one spec are exactly ``train_saes``'s (TrainOptions names them)."""
    import inspect

    from interplab.core.saes.training import TrainOptions

    keyword_only = [p.name for p in inspect.signature(train_saes).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert list(TrainOptions.__annotations__) == keyword_only


def test_train_sae_is_train_saes_with_one_spec(store):
    kw = {"n_tokens": BATCH * 4, "batch_size": BATCH, "progress": False, "seed": 2}
    one = train_sae(store, arch="jumprelu", width=32, l0=0.01, lr=3e-3, **kw)
    (same,) = train_saes(store, [{"arch": "jumprelu", "width": 32, "l0_coefficient": 0.01, "lr": 3e-3}], **kw)
    assert_same_weights(one, same)
