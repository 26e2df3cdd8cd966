"""Sparse probing and first-letter absorption against sae-bench 0.6.0's own functions on the same inputs.

The inputs (``tests/reference/sae_bench/``: the tiny GPT-2's activations of labelled texts, a random SAE,
planted word activations and an SAE with planted absorption, interplab's probe directions and main
latents) come from ``tests/reference/sae_bench_inputs.py``; the fixture ``tests/reference/sae_bench_metrics.json``
from ``bash tests/reference/build_sae_bench.sh`` (its header names the command and versions), which
runs sae-bench's pooling, probe training and absorption calculator in their own environment
``.ref/sae-bench``. When that environment is built, :func:`test_the_fixture_is_what_sae_bench_gives_now`
regenerates the fixture and compares; otherwise the committed outputs are the reference.

Tolerances: pooling 1e-5 (float32 sums in a different order); scikit-learn probes on the same task give
the same test accuracy (exactly: a count of the same predictions); sae-bench's AdamW probe is rerun from
the torch generator state it started from, the same initialisation and batch order, so its accuracy
agrees to 1e-6 too; per-word absorption fractions to 1e-5 and the full-absorption flags exactly.
Whole-pipeline numbers are not compared draw for draw: sae-bench draws every probe's balanced task afresh
from torch's global generator, interplab draws one task per class from its own seeded generator.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from interplab.core.evals.absorption import absorption, absorption_scores, sae_bench_word_scores
from interplab.core.evals.probing import (
    adam_probe,
    adam_probe_accuracy,
    pooled,
    probe_accuracy,
    sae_bench_task,
    sparse_probing,
    top_latents,
)
from safetensors.torch import load_file

import interplab as ilab
from tests.tiny import no_forward, tiny_hf_model, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "reference"
FIXTURE = HERE / "sae_bench_metrics.json"
INPUTS = HERE / "sae_bench"
VENV = ROOT / ".ref" / "sae-bench" / "bin" / "python"


def _load() -> tuple[dict, dict, dict]:
    return json.loads(FIXTURE.read_text()), json.loads((INPUTS / "inputs.json").read_text()), load_file(
        INPUTS / "inputs.safetensors")  # fmt: skip


def _meaned(ref: dict, n: int) -> tuple[np.ndarray, np.ndarray]:
    m = ref["sparse_probing"]["meaned"]
    return tuple(np.array([m[kind][str(i)] for i in range(n)], dtype=np.float32) for kind in ("llm", "sae"))


def test_pooling_matches_sae_bench() -> None:
    ref, meta, _ = _load()
    model = ilab.load_model(tiny_hf_model("gpt2"), tokenizer=tiny_tokenizer())
    sae = ilab.load_sae(INPUTS / "probing_sae")
    X, Z = pooled(sae, model, meta["texts"], meta["site"], batch_size=16, progress=False)
    X_ref, Z_ref = _meaned(ref, len(meta["texts"]))
    np.testing.assert_allclose(X, X_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(Z, Z_ref, rtol=1e-5, atol=1e-5)


def test_sparse_probing_parts_match_sae_bench_on_its_tasks() -> None:
    ref, meta, _ = _load()
    X, Z = _meaned(ref, len(meta["texts"]))
    runs = ref["sparse_probing"]["runs"]
    assert {(r["probe"], r["k"]) for r in runs} == {("llm", None)} | {(p, k) for p in ("llm", "sae") for k in (1, 2, 5)}
    for run in runs:
        F = X if run["probe"] == "llm" else Z
        tr, te = run["train"]["texts"], run["test"]["texts"]
        y_tr, y_te = np.array(run["train"]["labels"]), np.array(run["test"]["labels"])
        # sae-bench's tasks: balanced, negatives from the other classes, train and test texts disjoint
        assert y_tr.sum() * 2 == len(tr) and y_te.sum() * 2 == len(te) and not set(tr) & set(te)
        assert all((meta["labels"][i] == run["class"]) == bool(y) for i, y in zip(tr + te, [*y_tr, *y_te], strict=True))
        if run["k"] is None:
            state = torch.tensor(np.frombuffer(bytes.fromhex(run["rng_state"]), dtype=np.uint8).copy())
            probe, acc = adam_probe(F[tr], y_tr, F[te], y_te, seed=state)
            torch.testing.assert_close(probe.weight.detach().flatten(), torch.tensor(run["weight"]), rtol=1e-5,
                                       atol=1e-6)  # fmt: skip
            assert float(probe.bias) == pytest.approx(run["bias"], abs=1e-6)
        else:
            idx = top_latents(F[tr], y_tr, run["k"])
            assert sorted(idx.tolist()) == run["selected"], (run["probe"], run["k"], run["class"])
            acc = probe_accuracy(F[tr][:, idx], y_tr, F[te][:, idx], y_te, convention="sae-bench")
        assert acc == pytest.approx(run["accuracy"], abs=1e-6), (run["probe"], run["k"], run["class"])
    # the inputs are not trivial: the full-activation probe separates every class, one latent does not
    assert all(r["accuracy"] == 1.0 for r in runs if r["k"] is None)
    assert min(r["accuracy"] for r in runs if r["probe"] == "sae" and r["k"] == 1) < 0.9


def test_sae_bench_task_samples_as_sae_bench() -> None:
    labels = np.array(["a"] * 12 + ["b"] * 30 + ["c"] * 6)
    tr, y_tr, te, y_te = sae_bench_task(labels, "a", 0.25, seed=3)
    assert not set(tr) & set(te) and y_tr.sum() * 2 == len(tr) and y_te.sum() * 2 == len(te)
    assert (labels[tr[y_tr == 1]] == "a").all() and len(tr) == 2 * 9 and len(te) == 2 * 3
    # negatives: ceil(9 / 2) = 5 drawn from each other class, then 9 of those 10: both classes appear
    neg = labels[tr[y_tr == 0]]
    assert set(neg) == {"b", "c"} and (neg == "b").sum() <= 5 and (neg == "c").sum() <= 5
    # the same seed gives the same task; the test texts are a quarter of each class
    assert all(np.array_equal(u, v) for u, v in zip(sae_bench_task(labels, "a", 0.25, 3), (tr, y_tr, te, y_te),
                                                    strict=True))  # fmt: skip


def test_sparse_probing_sae_bench_convention_end_to_end() -> None:
    ref, meta, _ = _load()
    model = ilab.load_model(tiny_hf_model("gpt2"), tokenizer=tiny_tokenizer())
    sae = ilab.load_sae(INPUTS / "probing_sae")
    result = sparse_probing(sae, model, meta["texts"], meta["labels"], ks=(1, 2, 5), test_fraction=1 / 3, seed=0,
                            batch_size=16, progress=False, convention="sae-bench")  # fmt: skip
    # the convention is sae-bench's parts (each checked above against sae-bench) on interplab's own draws
    X, Z = _meaned(ref, len(meta["texts"]))
    labels = np.array(meta["labels"])
    for cls in ("animal", "colour", "mood"):
        tr, y_tr, te, y_te = sae_bench_task(labels, cls, 1 / 3, 0)
        assert len(tr) == 32 and len(te) == 16  # as sae-bench's tasks on the fixture's split
        llm = adam_probe_accuracy(X[tr], y_tr, X[te], y_te, seed=0)
        assert result.scores.loc[cls, "llm_accuracy"] == pytest.approx(llm, abs=1e-6)
        for k in (1, 2, 5):
            idx = top_latents(Z[tr], y_tr, k)
            assert result.selected[cls][k] == idx.tolist()
            acc = probe_accuracy(Z[tr][:, idx], y_tr, Z[te][:, idx], y_te, convention="sae-bench")
            assert result.scores.loc[cls, f"sae_top_{k}_accuracy"] == pytest.approx(acc, abs=1e-6)
    runs = ref["sparse_probing"]["runs"]
    for k in (1, 2, 5):  # other draws of the same kind of task: the same level, not the same numbers
        theirs = np.mean([r["accuracy"] for r in runs if r["probe"] == "sae" and r["k"] == k])
        assert abs(result.scores.loc["mean", f"sae_top_{k}_accuracy"] - theirs) <= 0.2, (k, theirs)
    default = sparse_probing(sae, model, meta["texts"], meta["labels"], ks=(1, 2, 5), test_fraction=1 / 3, seed=0,
                             batch_size=16, progress=False)  # fmt: skip
    assert not default.scores.equals(result.scores)


def _absorption_case() -> tuple[dict, dict, np.ndarray, np.ndarray, np.ndarray]:
    """The fixture, the absorption inputs' metadata, their activations, the SAE's latents and decoder rows."""
    ref, meta, tensors = _load()
    sae = ilab.load_sae(INPUTS / "absorption_sae")
    X = tensors["absorption_X"].numpy()
    with torch.no_grad():
        Z = sae.encode(torch.tensor(X)).numpy()
    return ref, meta["absorption"], X, Z, sae.W_dec.detach().numpy()


def test_absorption_word_rule_matches_sae_bench() -> None:
    ref, a, X, Z, W_dec = _absorption_case()
    row = {w: i for i, w in enumerate(a["words"])}
    for c, theirs in ref["absorption"]["letters"].items():
        rows = [row[w] for w in theirs["words"]]
        assert theirs["main"] == a["main"][c]
        fraction, full = sae_bench_word_scores(X[rows], Z[rows], W_dec, np.array(a["directions"][c]), a["main"][c])
        assert full.tolist() == theirs["is_full_absorption"], c
        np.testing.assert_allclose(fraction, theirs["absorption_fraction"], atol=1e-5)
        p = np.array(a["directions"][c])
        np.testing.assert_allclose(X[rows] @ (p / np.linalg.norm(p)), theirs["probe_projection"], atol=1e-5)
    planted = ref["absorption"]["letters"]["a"]
    assert sum(planted["is_full_absorption"]) >= 3  # the planted absorbers are found by sae-bench too
    assert not any(ref["absorption"]["letters"]["b"]["is_full_absorption"])


def test_sae_bench_word_rule_branches() -> None:
    """The fraction's three branches on hand-made words: main latent carries the letter, absorbed, shared."""
    W_dec = np.array([[1.0, 0, 0], [1.6, 1.2, 0], [0, 0, 1.0]])  # main along p; absorber cos 0.8 (norm 2); noise
    p = np.array([1.0, 0, 0])
    X = np.array([[2.0, 0, 0], [2.0, 0, 0], [2.0, 0, 0]])
    Z = np.array([[2.0, 0, 1], [0.0, 2.5, 0], [1.0, 1.0, 0]])
    fraction, full = sae_bench_word_scores(X, Z, W_dec, p, [0])
    # word 0: main projection 2 >= x.p 2 -> 0; word 1: main off, absorber 2.5 * 0.8 = 2 -> 1 and full;
    # word 2: main 1, absorber 0.8 (0.4 of 2) -> min(0.8, 2 - 1) / (0.8 + 1)
    np.testing.assert_allclose(fraction, [0.0, 1.0, 0.8 / 1.8], atol=1e-6)
    assert full.tolist() == [False, True, False]


def test_absorption_scores_sae_bench_convention_on_the_planted_case() -> None:
    ref, a, X, Z, W_dec = _absorption_case()
    scores, main = absorption_scores(X, Z, W_dec, np.array(a["letters"]), test_fraction=a["test_fraction"],
                                     seed=a["seed"], min_words=5, convention="sae-bench")  # fmt: skip
    assert main == a["main"]
    theirs = ref["absorption"]["letters"]["a"]
    # every test a-word passes the probe here, so sae-bench's full-absorption rate is the count over them
    assert scores.loc["a", "probe_accuracy"] == 1.0
    assert scores.loc["a", "absorption_rate"] == pytest.approx(np.mean(theirs["is_full_absorption"]))
    assert scores.loc["a", "absorption_fraction"] == pytest.approx(np.mean(theirs["absorption_fraction"]), abs=1e-5)
    assert scores.loc["b", "absorption_rate"] == 0.0
    default, _ = absorption_scores(X, Z, W_dec, np.array(a["letters"]), test_fraction=a["test_fraction"],
                                   seed=a["seed"], min_words=5)  # fmt: skip
    assert "absorption_fraction" not in default.columns


def test_sae_bench_own_letter_probes_on_few_words() -> None:
    """Why the convention keeps interplab's ranking of main latents: sae-bench's Adam-trained probes take a fixed
    number of epochs of one batch (4096 words) each; on the 36 training words here they stay far from converged:
    its L1 probe ranks a noise latent first for every letter, where the mean difference finds the planted ones."""
    ref, meta, _ = _load()
    a = meta["absorption"]
    for li, c in enumerate(("a", "b", "c")):
        theirs = ref["absorption"]["letters"][c]
        assert a["main"][c][0] == li  # interplab: the planted "starts with c" latent comes first
        assert theirs["k_sparse_latents"]["1"][0] >= 8  # sae-bench: one of the noise latents 8..13
        d, o = np.array(theirs["sae_bench_probe_direction"]), np.array(a["directions"][c])
        assert d @ o / np.linalg.norm(d) / np.linalg.norm(o) < 0.9  # its letter probe: another direction


def test_a_bad_convention_fails_before_any_forward_pass() -> None:
    model = ilab.load_model(tiny_hf_model("gpt2"), tokenizer=tiny_tokenizer())
    sae = ilab.SAE.create("standard", d_in=32, d_sae=40, site="blocks.0.hook_resid_post")
    texts, labels = ["the cat", "a dog", "red", "blue"] * 2, ["x", "y"] * 4
    bad = r"convention must be one of \('interplab', 'sae-bench'\), got "
    with no_forward(model), pytest.raises(ValueError, match=bad + "'saebench'"):
        sparse_probing(sae, model, texts, labels, ks=(1,), convention="saebench")
    with no_forward(model), pytest.raises(ValueError, match=bad + "'SAEBench'"):
        absorption(sae, model, words=["cat", "dog"], convention="SAEBench")


@pytest.mark.skipif(not VENV.exists(),
                    reason="sae-bench's environment is not built: bash tests/reference/build_sae_bench.sh")  # fmt: skip
def test_the_fixture_is_what_sae_bench_gives_now(tmp_path: Path) -> None:
    out = tmp_path / "sae_bench_metrics.json"
    subprocess.run([str(VENV), str(HERE / "sae_bench_metrics.py"), str(out)], check=True, cwd=ROOT,
                   capture_output=True, timeout=300)  # fmt: skip
    new, old = json.loads(out.read_text()), json.loads(FIXTURE.read_text())
    assert new["versions"]["sae-bench"] == old["versions"]["sae-bench"] == "0.6.0"
    for c, o in old["absorption"]["letters"].items():  # float sums differ in the last bits (threads, CPU type)
        n = new["absorption"]["letters"][c]
        np.testing.assert_allclose(n.pop("sae_bench_probe_direction"), o["sae_bench_probe_direction"], atol=1e-5)
        np.testing.assert_allclose(n.pop("probe_projection"), o["probe_projection"], rtol=1e-5, atol=1e-6)
        assert n == {k: v for k, v in o.items() if k not in ("sae_bench_probe_direction", "probe_projection")}
    strip = lambda runs: [{k: v for k, v in r.items() if k not in ("rng_state", "weight", "bias")}  # noqa: E731
                          for r in runs]  # fmt: skip
    assert strip(new["sparse_probing"]["runs"]) == strip(old["sparse_probing"]["runs"])
    for kind in ("llm", "sae"):
        n, o = new["sparse_probing"]["meaned"][kind], old["sparse_probing"]["meaned"][kind]
        np.testing.assert_allclose(np.array(list(n.values())), np.array(list(o.values())), atol=1e-6)
    assert sys.executable != str(VENV)
