"""The defects a fault-and-bad-input probe found (issue 13), one test (or more) each, in the issue's order.

Defects 1 (feature_data's checkpoint write) and 6 (resuming with other inputs) are driven through
every file operation in ``tests/test_crash_safety.py``; 9 (a string blanking an exported page) renders
in Chromium in ``tests/browser/test_export_html.py``; 10 (the umask) is ``tests/test_writes.py``; 12's
list is also part of the table in ``tests/test_bad_input.py``. The tests here reproduce each defect
as the issue states it.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from interplab.core.data.store import ActivationStore
from interplab.core.features import FeatureData, feature_data
from interplab.core.memory.budget import MemoryBudgetError, set_memory_budget
from interplab.core.saes import SAE, load_sae, train_sae
from interplab.core.saes.training.trainer import CHECKPOINT, read_checkpoint, train_saes
from interplab.core.storage.readers import FileError
from safetensors.torch import load_file, save_file

import interplab as ilab
from tests.test_crash_safety import CORPUS, FEATURES, SITE, _sae
from tests.tiny import TEXTS, tiny_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gpt2():
    return tiny_model("gpt2")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    yield
    set_memory_budget(None)


def no_forward(model, monkeypatch):  # type: ignore[no-untyped-def]
    """Make any forward pass fail the test: a refusal must come before the work."""

    def boom(*_a, **_k):  # type: ignore[no-untyped-def]
        raise AssertionError("the model ran before the bad input was refused")

    monkeypatch.setattr(model, "run_sites", boom)
    handle = model.module.register_forward_pre_hook(lambda *_: boom())
    return handle


# -------------------------------------------------------------------------- 2
def test_2_a_tampered_dashboard_folder_writes_and_reads_only_inside_it(gpt2, tmp_path):
    data = feature_data(_sae(), gpt2, CORPUS[:6], **FEATURES)
    folder = tmp_path / "shared-dashboard"
    data.save(folder)
    victim = tmp_path / "victim.json"  # any file the user can write (~/.bashrc, a notebook, ...)
    victim.write_text(json.dumps({"1": "read from outside the folder"}))
    before = victim.read_bytes()
    meta = json.loads((folder / "meta.json").read_text())
    meta["labels_path"] = str(victim)  # what a tampered folder says
    meta["labels_file"] = "../victim.json"
    (folder / "meta.json").write_text(json.dumps(meta))

    loaded = FeatureData.load(folder)
    assert loaded.labels.get(1) != "read from outside the folder"
    loaded.set_label(3, "written by the dashboard")
    dash = ilab.widgets.FeatureDashboard(loaded, n_cards=2)
    dash.set_label(4, "from the widget")
    assert victim.read_bytes() == before, "the tampered path was followed"
    assert Path(loaded.labels_path) == folder / "labels.json"
    assert json.loads((folder / "labels.json").read_text()) == {"3": "written by the dashboard",
                                                                 "4": "from the widget"}  # fmt: skip
    assert FeatureData.load(folder).labels == {3: "written by the dashboard", 4: "from the widget"}
    # a labels file inside the folder that is not labels is refused, naming the file and the entry
    (folder / "labels.json").write_text(json.dumps({"5": ["not", "a", "string"]}))
    with pytest.raises(FileError, match=r"labels\.json': \['5'\] must be a string"):
        FeatureData.load(folder)


def test_2_labels_follow_the_sae_the_dashboard_was_made_from(gpt2, tmp_path):
    sae = _sae()
    sae.save(tmp_path / "my_sae")
    sae = load_sae(tmp_path / "my_sae")
    data = feature_data(sae, gpt2, CORPUS[:6], **FEATURES)
    data.save(tmp_path / "dash")
    dash = ilab.widgets.FeatureDashboard(FeatureData.load(tmp_path / "dash", sae=sae), sae=sae, n_cards=2)
    dash.set_label(2, "beside the SAE")
    assert json.loads((tmp_path / "my_sae" / "labels.json").read_text()) == {"2": "beside the SAE"}
    other = SAE.create("topk", d_in=32, d_sae=24, k=4, site=SITE)
    with pytest.raises(ValueError, match=r"made from SAE [0-9a-f]{16}, not from this one"):
        FeatureData.load(tmp_path / "dash", sae=other)


# -------------------------------------------------------------------------- 3
def test_3_generate_with_no_steering_ends_and_equals_plain_generation(gpt2):
    code = (
        "from tests.tiny import tiny_model\nimport interplab as ilab\nm = tiny_model('gpt2')\n"
        "assert ilab.steering.generate(m, 'the cat', [], max_new_tokens=2) == m.generate('the cat', max_new_tokens=2)\n"
        "assert ilab.steering.logits(m, 'the cat', []).equal(m.logits('the cat'))\nprint('done')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    try:  # before: it spun at 100% CPU forever
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=120)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("steering.generate(model, 'the cat', [], max_new_tokens=2) never returned")
    assert out.returncode == 0 and "done" in out.stdout, out.stderr[-2000:]


# -------------------------------------------------------------------------- 4
def test_4_a_missing_corpus_path_is_an_error_not_the_text(gpt2, monkeypatch):
    handle = no_forward(gpt2, monkeypatch)
    try:
        with pytest.raises(FileNotFoundError, match=r"Corpus path '/no/such/file\.jsonl' does not exist"):
            feature_data(_sae(), gpt2, "/no/such/file.jsonl")
        with pytest.raises(FileNotFoundError, match=r"/no/such/file\.jsonl"):
            gpt2.cache("/no/such/file.jsonl", SITE, "/tmp/never-written", n_tokens=10)
    finally:
        handle.remove()


# -------------------------------------------------------------------------- 5
def test_5_an_empty_corpus_is_refused_and_empty_texts_add_nothing(gpt2, tmp_path):
    with pytest.raises(ValueError, match=r"corpus \(a list of 200 texts.*\) gives no window of 16 tokens: it holds no "
                                         r"text"):  # fmt: skip
        gpt2.cache([""] * 200, SITE, tmp_path / "empty", n_tokens=1000, context_size=16)
    assert not (tmp_path / "empty").exists(), "nothing is written for an empty corpus"
    with pytest.raises(ValueError, match=r"corpus ran out: it holds 0 tokens"):
        train_saes(gpt2, [{"arch": "topk", "width": 16, "k": 2}], site=SITE, corpus=[""] * 200, n_tokens=64,
                   batch_size=64, progress=False)  # fmt: skip
    # empty documents inside a corpus are left out: no EOS run for them
    store = gpt2.cache(["", "the cat sat", "", "", "on the mat"] * 4, SITE, tmp_path / "mixed", n_tokens=20,
                       context_size=4)  # fmt: skip
    tokens = store.tokens().tolist()
    eos = gpt2.tokenizer.eos_token_id
    assert all(not (a == eos and b == eos) for a, b in itertools.pairwise(tokens)), tokens


# -------------------------------------------------------------------------- 6
def test_6_the_store_records_its_corpus_and_a_checkpoint_its_store(gpt2, tmp_path):
    path = tmp_path / "acts"
    store = gpt2.cache(CORPUS, SITE, path, n_tokens=100, context_size=16)
    assert store.manifest["corpus"].startswith("a list of 60 texts") and len(store.tokens_digest) == 64
    with pytest.raises(ValueError, match="made from another corpus"):
        gpt2.cache(CORPUS[::-1], SITE, path, n_tokens=200, context_size=16)
    ckpt = tmp_path / "ckpt"
    big = gpt2.cache(CORPUS, SITE, tmp_path / "big", n_tokens=256, context_size=16)
    first = train_saes(big, [{"arch": "topk", "width": 16, "k": 2}], n_tokens=128, batch_size=64,
                       checkpoint_dir=ckpt, progress=False)  # fmt: skip
    other = gpt2.cache(CORPUS[::-1], SITE, tmp_path / "other", n_tokens=256, context_size=16)
    with pytest.raises(ValueError, match=r"other inputs than this call's \(source\.tokens_sha256"):
        train_saes(other, [{"arch": "topk", "width": 16, "k": 2}], n_tokens=128, batch_size=64, checkpoint_dir=ckpt,
                   progress=False)  # before: the old SAE came back silently  # fmt: skip
    assert first


# -------------------------------------------------------------------------- 7
@pytest.fixture
def store(gpt2, tmp_path) -> ActivationStore:
    return gpt2.cache(CORPUS, SITE, tmp_path / "acts", n_tokens=512, context_size=16)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"arch": "standard", "l1": float("nan")}, r"l1_coefficient must be finite, got nan"),
        ({"arch": "jumprelu", "l0": float("inf")}, r"l0_coefficient must be finite, got inf"),
        ({"arch": "gated", "l1": -1.0}, r"l1_coefficient must be a finite number >= 0, got -1\.0"),
        ({"arch": "standard", "lr": float("nan")}, r"lr must be finite, got nan"),
    ],
)
def test_7_non_finite_settings_are_refused_before_training(store, kwargs, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        train_sae(store, width=16, n_tokens=128, batch_size=64, checkpoint_dir=tmp_path / "ck", progress=False,
                  **kwargs)  # fmt: skip
    assert not (tmp_path / "ck").exists()


def test_7_a_loss_or_weights_that_stop_being_finite_stop_training(store, tmp_path, monkeypatch):
    from interplab.core.saes.standard import StandardSAE

    real = StandardSAE.training_loss
    calls = [0]

    def diverging(self, x, dead=None):  # type: ignore[no-untyped-def]
        calls[0] += 1
        loss, info = real(self, x, dead)
        return (loss * float("nan") if calls[0] == 4 else loss), info

    monkeypatch.setattr(StandardSAE, "training_loss", diverging)
    with pytest.raises(
        ValueError,
        match=r"Training diverged at step 3 of 8: the training loss of StandardSAE.* is "
        r"nan",
    ):
        train_sae(store, arch="standard", width=16, n_tokens=512, batch_size=64, checkpoint_dir=tmp_path / "ck",
                  checkpoint_every=1, progress=False)  # fmt: skip
    assert read_checkpoint(tmp_path / "ck" / CHECKPOINT)["step"] == 3, "the last good checkpoint is kept"
    monkeypatch.setattr(StandardSAE, "training_loss", real)

    real_step = torch.optim.Adam.step

    def poisoning(self, *a, **k):  # type: ignore[no-untyped-def]
        out = real_step(self, *a, **k)
        with torch.no_grad():
            self.param_groups[0]["params"][2][0, 0] = float("inf")  # W_dec, while the loss stays finite
        return out

    monkeypatch.setattr(torch.optim.Adam, "step", poisoning)
    with pytest.raises(ValueError, match=r"weights of StandardSAE.* hold NaN or inf in W_dec after step 1"):
        train_sae(store, arch="standard", width=16, n_tokens=512, batch_size=64, checkpoint_dir=tmp_path / "ck2",
                  checkpoint_every=1, progress=False)  # fmt: skip
    assert not (tmp_path / "ck2" / CHECKPOINT).exists(), "nothing non-finite was saved"


# -------------------------------------------------------------------------- 8
D_IN, D_SAE = 16, 48


def _saelens(tmp_path: Path, arch: str = "standard", **cfg_update) -> Path:  # type: ignore[no-untyped-def]
    kwargs = {"k": 4} if arch in ("topk", "batchtopk") else {}
    SAE.create(arch, d_in=D_IN, d_sae=D_SAE, **kwargs).save(tmp_path / "sae")
    cfg = json.loads((tmp_path / "sae" / "cfg.json").read_text())
    for key, value in cfg_update.items():
        if value is KeyError:
            cfg.pop(key)
        else:
            cfg[key] = value
    (tmp_path / "sae" / "cfg.json").write_text(json.dumps(cfg))
    return tmp_path / "sae"


@pytest.mark.parametrize(
    ("update", "match"),
    [
        ({"d_sae": 400_000}, r"sae_weights\.safetensors': W_enc has shape \[16, 48\], expected \[16, 400000\]"),
        ({"d_sae": 10**12}, r"sae_weights\.safetensors': W_enc has shape \[16, 48\], expected \[16, 1000000000000\]"),
        ({"d_sae": "48"}, r"cfg\.json': d_sae must be an integer, got str '48'"),
        ({"d_in": 8.9}, r"cfg\.json': d_in must be an integer, got 8\.9"),
        ({"d_in": KeyError}, r"cfg\.json': d_in is missing"),
        ({"apply_b_dec_to_input": "yes"}, r"cfg\.json': apply_b_dec_to_input must be true or false, got str 'yes'"),
        ({"metadata": "none"}, r"cfg\.json': metadata must be a JSON object, got str"),
        ({"architecture": 3}, r"cfg\.json': architecture must be a string"),
    ],
)
def test_8_an_untrusted_config_is_checked_before_anything_is_allocated(tmp_path, monkeypatch, update, match):
    folder = _saelens(tmp_path, **update)

    def allocate(*_a, **_k):  # type: ignore[no-untyped-def]
        raise AssertionError("memory was allocated before the config was validated")

    monkeypatch.setattr(SAE, "__init__", allocate)
    with pytest.raises(FileError, match=match):
        load_sae(folder)


@pytest.mark.parametrize(("arch", "tensor"), [("jumprelu", "threshold"), ("gated", "b_mag"), ("gated", "r_mag")])
def test_8_a_missing_tensor_is_named_with_its_file(tmp_path, arch, tensor):
    folder = _saelens(tmp_path, arch)
    weights = load_file(str(folder / "sae_weights.safetensors"))
    del weights[tensor]
    save_file(weights, str(folder / "sae_weights.safetensors"))
    with pytest.raises(FileError, match=rf"sae_weights\.safetensors': {tensor} is missing"):
        load_sae(folder)


def test_8_a_topk_k_that_is_not_an_integer_is_refused(tmp_path):
    with pytest.raises(FileError, match=r"cfg\.json': k must be an integer, got 8\.9"):
        load_sae(_saelens(tmp_path, "topk", k=8.9))


def test_8_headers_that_promise_more_than_the_file_holds(tmp_path):
    npz = tmp_path / "gemma-scope-2b-pt-res" / "layer_1" / "params.npz"
    npz.parent.mkdir(parents=True)
    np.savez(
        npz,
        W_enc=np.zeros((4, 8), np.float32),
        W_dec=np.zeros((8, 4), np.float32),
        b_enc=np.zeros(7, np.float32),
        b_dec=np.zeros(4, np.float32),
        threshold=np.zeros(8, np.float32),
    )
    with pytest.raises(FileError, match=r"params\.npz': b_enc has shape \[7\], expected \[8\]"):
        load_sae(npz)
    bomb = tmp_path / "bomb.npy"
    with open(bomb, "wb") as f:  # a header claiming 10^12 floats in a file of a few bytes
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6)})
    from interplab.core.storage.readers import npy_header

    with pytest.raises(FileError, match=r"bomb\.npy': bomb\.npy says float32 \[1000000, 1000000\].*but holds"):
        npy_header(bomb)


# -------------------------------------------------------------------------- 9
def test_9_exported_state_holds_no_markup_whatever_the_strings(tmp_path):
    from tests.test_export import export_code

    cell = (
        "import interplab as ilab\n"
        "ilab.widgets.TokenHeatmap(['<!--', '<script', '</script>', ']]>', ' ok'], [1, 2, 3, 4, 5])"
    )
    html = export_code(tmp_path, "inject", cell)
    text = html.read_text()
    tag = '<script type="application/vnd.jupyter.widget-state+json">'
    start = text.index(tag) + len(tag)
    body = text[start : text.index("</script>", start)]
    assert "<" not in body and ">" not in body, "markup inside the embedded state"
    vocab = [m["state"].get("vocab") for m in json.loads(body)["state"].values()]
    assert ["<!--", "<script", "</script>", "]]>", " ok"] in vocab, "the strings are kept exactly"


# ------------------------------------------------------------------------- 11
def test_11_inputs_longer_than_the_context_are_refused_before_the_forward(gpt2, monkeypatch, tmp_path):
    handle = no_forward(gpt2, monkeypatch)
    long = " ".join(["the cat"] * 100)  # 200 tokens + BOS; the tiny GPT-2 takes 128
    try:
        for call in (lambda: gpt2.collect(long, SITE), lambda: gpt2.logits(long), lambda: gpt2.generate(long),
                     lambda: ilab.logit_lens(gpt2, long), lambda: ilab.steering.generate(gpt2, long, [])):  # fmt: skip
            with pytest.raises(ValueError, match=r"text is 201 tokens, longer than 'GPT2LMHeadModel' takes \(128"):
                call()
        with pytest.raises(ValueError, match=r"the prompt and max_new_tokens is 130 tokens"):
            gpt2.generate(" ".join(["the"] * 100), max_new_tokens=29)
        with pytest.raises(ValueError, match=r"context_size is 256 tokens, longer than"):
            gpt2.cache(CORPUS, SITE, tmp_path / "a", n_tokens=10, context_size=256)
        with pytest.raises(ValueError, match=r"seq_len is 256 tokens"):
            feature_data(_sae(), gpt2, CORPUS, seq_len=256)
    finally:
        handle.remove()


def test_11_requests_over_the_memory_budget_are_refused_or_split(gpt2, monkeypatch, caplog):
    set_memory_budget("300KB")
    rows = []
    real = gpt2.run_sites
    monkeypatch.setattr(gpt2, "run_sites", lambda enc, sites: rows.append(len(enc["input_ids"])) or real(enc, sites))
    with caplog.at_level(logging.INFO, logger="interplab.core.model.limits"):
        acts = gpt2.collect(TEXTS * 4, SITE, batch_size=8)  # a batch of 8 would not fit: split
    assert acts.tokens.shape[0] == 12 and max(rows) < 8 and "texts of up to" in caplog.text
    set_memory_budget("20KB")
    with pytest.raises(MemoryBudgetError, match=r"logits on one text of \d+ tokens would need about .* over the memory "
                                                r"budget of 20\.0 KB.*fewer positions"):  # fmt: skip
        gpt2.logits(TEXTS[1], positions=None)
    set_memory_budget("1MB")
    with pytest.raises(MemoryBudgetError, match=r"A topk SAE with d_in=640 and width=1,000,000,000,000 would need"):
        SAE.create("topk", d_in=640, d_sae=10**12, k=4)
    with pytest.raises(MemoryBudgetError, match=r"feature_data with n_top=1000000000"):
        feature_data(_sae(), gpt2, CORPUS, n_top=10**9)


# ------------------------------------------------------------------------- 12
def test_12_the_raw_errors_of_the_issue_are_clear_errors_now(gpt2, store, tmp_path):
    sae = _sae()
    acts = gpt2.collect(TEXTS, SITE)
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text("\n".join([json.dumps({"text": "the cat"})] * 1000 + ["{broken"]) + "\n")
    cases = [
        (lambda: gpt2.logits(TEXTS, positions=[]), ValueError, "positions is empty"),
        (lambda: gpt2.logits(TEXTS, positions=True), TypeError, "positions must be token indices.*True"),
        (lambda: gpt2.collect(TEXTS, sites=None), TypeError, "sites must be a name or a non-empty list"),
        (lambda: gpt2.to_str_tokens([10**9]), ValueError, r"Token id 1000000000 is outside the vocabulary \(0\."),
        (
            lambda: gpt2.cache(CORPUS, SITE, tmp_path / "c", batch_size=2.5),
            ValueError,
            "batch_size must be a positive integer, got 2.5",
        ),
        (lambda: store.batches(64, buffer_shards=0), ValueError, "buffer_shards must be a positive integer, got 0"),
        (lambda: train_sae(store, batch_size=0), ValueError, "batch_size must be a positive integer, got 0"),
        (lambda: ilab.metrics.logit_diff(None, " John"), TypeError, "answer must be a token .* got NoneType"),
        (
            lambda: ilab.patching.ioi(gpt2, templates=["When{A} and{B} went,{S} gave {0} to"]),
            ValueError,
            r"has fields \['0'\]; only \{A\}, \{B\} and \{S\}",
        ),
        (lambda: ilab.widgets.FeatureHeatmap(acts, features=[]), ValueError, "features is empty"),
        (
            lambda: setattr(ilab.widgets.TokenHeatmap(["a", "b"], [1.0, 2.0]), "selected_token", 5),
            Exception,
            r"selected_token=5 is out of range: tokens are 0\.\.1",
        ),
        (
            lambda: ilab.widgets.FeatureHeatmap(acts, "notasae"),
            TypeError,
            "the second argument is an SAE .* got str: 'notasae'",
        ),
        (lambda: feature_data(sae, gpt2, jsonl), ValueError, r"corpus\.jsonl:1001: expected a JSON object"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()


def test_12_tampered_result_files_are_named_with_their_field(gpt2, tmp_path):
    pairs = ilab.patching.prompt_pairs(gpt2, ["the cat sat"], ["the dog sat"], ["on"], ["to"])
    result = ilab.patching.grid(gpt2, pairs, site="resid_pre")
    result.save(tmp_path / "grid.npz")
    with np.load(tmp_path / "grid.npz") as f:
        arrays = dict(f)
    meta = json.loads(bytes(arrays["meta"]).decode())

    def tampered(**change):  # type: ignore[no-untyped-def]
        m = {**meta, **change}
        np.savez(tmp_path / "bad.npz", **{**arrays, "meta": np.frombuffer(json.dumps(m).encode(), np.uint8)})
        return tmp_path / "bad.npz"

    for change, match in (
        ({"rows": [0, 1, 2]}, r"meta\.rows must be 2 integers"),
        ({"clean_baseline": "x"}, r"meta\.clean_baseline must be a finite number"),
        ({"site": "anywhere"}, r"meta\.site must be one of"),
        ({"evil": 1}, r"meta\.evil is not a field"),
        ({"top_tokens": []}, r"meta\.top_tokens must hold"),
    ):
        with pytest.raises(FileError, match=match):
            ilab.patching.PatchingResult.load(tampered(**change))
    np.savez(tmp_path / "bad.npz", **{**arrays, "values": np.zeros(3, np.float32)})
    with pytest.raises(FileError, match=r"values is missing or not a 2-D"):
        ilab.patching.PatchingResult.load(tmp_path / "bad.npz")

    vec = ilab.steering.SteeringVector(SITE, torch.ones(32))
    vec.save(tmp_path / "v.safetensors")
    save_file({"direction": torch.ones(2, 3)}, str(tmp_path / "w.safetensors"),
              metadata={"format": "interplab.steering_vector/1", "interplab": "{}"})  # fmt: skip
    with pytest.raises(FileError, match=r"w\.safetensors': direction must be the file's one tensor, of shape \[d\]"):
        ilab.steering.SteeringVector.load(tmp_path / "w.safetensors")
    save_file(
        {"direction": torch.ones(3)},
        str(tmp_path / "x.safetensors"),
        metadata={"format": "interplab.steering_vector/1", "interplab": json.dumps({"site": SITE})},
    )
    with pytest.raises(FileError, match=r"x\.safetensors': interplab\.scale is missing"):
        ilab.steering.SteeringVector.load(tmp_path / "x.safetensors")

    data = feature_data(_sae(), gpt2, CORPUS[:6], **FEATURES)
    data.save(tmp_path / "dash")
    np.save(tmp_path / "dash" / "top_max.npy", np.zeros((24, 9), np.float32))
    with pytest.raises(FileError, match=r"top_max\.npy': top_max has shape \[24, 9\], expected \[24, 3\]"):
        FeatureData.load(tmp_path / "dash")
    data.save(tmp_path / "dash2")
    meta2 = json.loads((tmp_path / "dash2" / "meta.json").read_text())
    (tmp_path / "dash2" / "meta.json").write_text(json.dumps({**meta2, "d_sae": "24"}))
    with pytest.raises(FileError, match=r"meta\.json': d_sae must be an integer, got str '24'"):
        FeatureData.load(tmp_path / "dash2")
