"""Linear probes: the solver against scikit-learn's LogisticRegression, train() on tiny models, results and files."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.probes.features import sequence_features, token_features
from interplab.core.probes.solver import fit_logistic, predict
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

import interplab as ilab
from tests.tiny import no_forward, tiny_model

WORDS = ("the cat sat on the mat", "the dog ran to the house", "Mary gave a drink to John", "a big red bird",
         "the quick fox jumps", "the lazy dog sat", "John went to the store", "a small green tree",
         "the happy cat ran", "a sad dog", "Mary and John", "the blue bird sat on the tree")  # fmt: skip


def synthetic(n: int, d: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    centres = rng.normal(0, 1.0, (classes, d))
    x = centres[y] + rng.normal(0, 2.0, (n, d)) + 5.0 * rng.normal(size=d)  # offset: standardisation matters
    return x.astype(np.float32), y


def sklearn_fit(x: np.ndarray, y: np.ndarray, C: float) -> tuple[StandardScaler, LogisticRegression]:
    scaler = StandardScaler().fit(x)
    return scaler, LogisticRegression(C=C, max_iter=5000, tol=1e-8).fit(scaler.transform(x), y)


@pytest.mark.parametrize("classes", [2, 4])
@pytest.mark.parametrize("C", [0.05, 1.0])
def test_solver_matches_sklearn(classes, C):
    x, y = synthetic(600, 24, classes, seed=classes)
    fit = fit_logistic(torch.from_numpy(x[:400]), torch.from_numpy(y[:400]), classes, C, tol=1e-8)
    scaler, ref = sklearn_fit(x[:400], y[:400], C)
    quick = fit_logistic(torch.from_numpy(x[:400]), torch.from_numpy(y[:400]), classes, C)  # tol 1e-4, as sklearn
    assert (predict(quick, torch.from_numpy(x[400:])) == predict(fit, torch.from_numpy(x[400:]))).float().mean() > 0.98
    ours = predict(fit, torch.from_numpy(x[400:])).numpy()
    theirs = ref.predict(scaler.transform(x[400:]))
    assert abs((ours == y[400:]).mean() - (theirs == y[400:]).mean()) <= 0.01
    assert (ours == theirs).mean() >= 0.99
    # The same optimum: raw-space weights are sklearn's standardised ones divided by the scale.
    W_ref = ref.coef_ / scaler.scale_
    torch.testing.assert_close(fit.W_CD, torch.from_numpy(W_ref).float(), rtol=2e-3, atol=2e-3)
    assert fit.converged


def test_solver_separates_what_is_separable():
    x = torch.cat([torch.randn(50, 3) + 4, torch.randn(50, 3) - 4])
    y = torch.cat([torch.ones(50), torch.zeros(50)]).long()
    fit = fit_logistic(x, y, 2, C=1.0)
    assert (predict(fit, x) == y).all() and fit.W_CD.shape == (1, 3)


def labels_of(texts: list[str]) -> list[int]:
    return [int("the" in t.split()) for t in texts]


@pytest.fixture(scope="module")
def gpt2():
    return tiny_model("gpt2")


def test_train_sequence_level_every_layer_agrees_with_sklearn(gpt2):
    texts = list(WORDS) * 3
    labels = labels_of(texts)
    res = ilab.probes.train(gpt2, texts, labels, sites="resid_post", position="mean", cv=3, progress=False)
    assert res.sites == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    assert res.level == "sequence" and res.classes == [0, 1]
    assert res.n_train + res.n_test == len(texts)
    assert res.balance["1"] == pytest.approx(np.mean(labels))
    feats = sequence_features(gpt2, texts, res.sites, "mean", progress=False)
    perm = torch.randperm(len(texts), generator=torch.Generator().manual_seed(0))
    test = torch.zeros(len(texts), dtype=torch.bool)
    test[perm[: round(0.25 * len(texts))]] = True
    y = np.array(labels)
    for site in res.sites:
        x = feats[site].numpy()
        scaler, ref = sklearn_fit(x[~test.numpy()], y[~test.numpy()], 1.0)
        acc = (ref.predict(scaler.transform(x[test.numpy()])) == y[test.numpy()]).mean()
        assert abs(res.accuracy[site] - acc) <= 0.01, site
        assert not np.isnan(res.cv_mean[site])
        # The probe scores raw activations: the same predictions as sklearn on the same texts.
        assert res[site].predict(feats[site][test]) == ref.predict(scaler.transform(x[test.numpy()])).tolist()


def test_train_token_level(gpt2):
    texts = list(WORDS) * 2
    labels = [[None] + [w for w in t.split()] for t in texts]  # BOS skipped; the word itself is the class
    labels = [[None if x is None else ("name" if x in ("Mary", "John") else "word") for x in row] for row in labels]
    res = ilab.probes.train(gpt2, texts, labels, sites=["blocks.0.hook_resid_pre", "blocks.1.hook_mlp_out"],
                            progress=False)  # fmt: skip
    assert res.level == "token" and res.classes == ["name", "word"]
    _, kept, groups = token_features(gpt2, texts, labels, res.sites, progress=False)
    assert len(kept) == sum(len(t.split()) for t in texts) == len(groups)
    # Token embeddings of a word-level vocabulary separate names from other words exactly.
    assert res.accuracy["blocks.0.hook_resid_pre"] == 1.0
    assert res.chance == pytest.approx(max(res.balance.values()))


def test_result_chart_save_load_and_steering(gpt2, tmp_path):
    texts = list(WORDS) * 2
    res = ilab.probes.train(gpt2, texts, labels_of(texts), progress=False)
    spec = res.chart().to_dict()
    assert "layer" in str(spec) and len(res.to_pandas()) == 2
    back = ilab.probes.ProbeResult.load(res.save(tmp_path / "probe.safetensors"))
    assert back.sites == res.sites and back.accuracy == res.accuracy and back.classes == res.classes
    assert torch.equal(back.direction, res.direction)
    vec = ilab.steering.from_probe(res)
    assert vec.site == res.best_site and vec.direction.norm() == pytest.approx(1.0)
    torch.testing.assert_close(vec.direction, res.direction / res.direction.norm())
    assert vec.provenance["source"] == "ProbeResult"
    # Steering along the probe raises the probe's own score: the vector points towards class 1.
    steered = ilab.steering.from_probe(res[res.sites[0]])
    assert steered.site == res.sites[0]


def test_bad_input_is_refused_before_any_forward_pass(gpt2, tmp_path):
    texts = list(WORDS)
    with no_forward(gpt2):
        with pytest.raises(ValueError, match="12 texts but 11 labels"):
            ilab.probes.train(gpt2, texts, labels_of(texts)[:-1])
        with pytest.raises(ValueError, match=r"labels\[0\] has 2 entries but text 0 has 7 tokens"):
            ilab.probes.train(gpt2, texts, [[0, 1]] * len(texts))
        with pytest.raises(ValueError, match="at least two classes"):
            ilab.probes.train(gpt2, texts, [1] * len(texts))
        with pytest.raises(ValueError, match=r"sites='resid'|Unknown site"):
            ilab.probes.train(gpt2, texts, labels_of(texts), sites="resid")
        with pytest.raises(ValueError, match="position=40 is outside"):
            ilab.probes.train(gpt2, texts, labels_of(texts), position=40)
        with pytest.raises(ValueError, match="cv must be 0"):
            ilab.probes.train(gpt2, texts, labels_of(texts), cv=1)
    with pytest.raises(ValueError, match=r"format.*not an interplab probe result"):
        bad = tmp_path / "x.safetensors"
        from safetensors.torch import save_file

        save_file({"W.0": torch.zeros(1, 3)}, bad, metadata={"format": "nope"})
        ilab.probes.ProbeResult.load(bad)


def _rewrite_probe(file, change=None, tensors=None):
    """Rewrite a probe file with ``change`` merged into its JSON metadata and ``tensors`` into its arrays."""
    import json

    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(str(file), framework="pt") as f:
        meta = f.metadata()
    info = {**json.loads(meta["interplab"]), **(change or {})}
    save_file({**load_file(str(file)), **(tensors or {})}, str(file),
              metadata={**meta, "interplab": json.dumps(info)})  # fmt: skip


@pytest.mark.parametrize(("change", "tensors", "match"), [
    ({"accuracy": "abc"}, None, "accuracy must be a JSON object, got str"),
    ({"accuracy": [1]}, None, "accuracy must be a JSON object, got list"),
    ({"cv_mean": {"blocks.1.hook_resid_post": "abc"}}, None, r"cv_mean\.blocks\.1\.hook_resid_post must be a number"),
    ({"accuracy": {"blocks.1.hook_resid_post": 7}}, None, r"accuracy\.blocks\.1\.hook_resid_post holds 7"),
    ({"classes": {"a": 0, "b": 1}}, None, "classes must be a list, got dict"),
    ({"classes": [[0], [1]]}, None, "classes must be distinct labels"),
    (None, {"W.0": torch.full((1, 32), float("nan"))}, r"W\.0 holds nan at \[0, 0\]: must be finite"),
    (None, {"b.0": torch.tensor([float("inf")])}, r"b\.0 holds inf"),
])  # fmt: skip
def test_a_crafted_probe_file_is_refused_naming_its_field(gpt2, tmp_path, change, tensors, match):
    from interplab.core.storage.readers import FileError

    texts = list(WORDS)
    res = ilab.probes.train(gpt2, texts, labels_of(texts), sites=["blocks.1.hook_resid_post"], progress=False)
    file = res.save(tmp_path / "probe.safetensors")
    _rewrite_probe(file, change, tensors)
    with pytest.raises(FileError, match=match):
        ilab.probes.ProbeResult.load(file)
