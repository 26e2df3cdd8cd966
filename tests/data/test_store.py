"""On-disk activation stores: layout, alignment, resume after interruption, errors, read-back."""

from __future__ import annotations

import itertools
import json
import logging
import random
import shutil
from collections import Counter
from pathlib import Path

import interplab.core.data.store.caching as store_mod
import pytest
import torch
from interplab.core.data.store import ActivationStore
from interplab.core.storage.atomic import leftover_target
from interplab.core.storage.readers import FileError
from safetensors import safe_open
from safetensors.torch import save_file

from tests.contracts.test_crash_safety import CORPUS as MIXED_CORPUS
from tests.faults import sigkill_when
from tests.tiny import TEXTS, WORDS, tiny_model

ROOT = Path(__file__).resolve().parents[2]
BOS, EOS = 1, 2
CONTEXT = 16
N_TOKENS = 1490  # not a multiple of CONTEXT - 1: the last window is cut
KW = {"n_tokens": N_TOKENS, "context_size": CONTEXT, "batch_size": 8, "shard_tokens": 200}
# Given out of forward order on purpose; the store keeps them in forward order.
SITES = ["blocks.1.hook_mlp_out", "blocks.0.hook_resid_post", "blocks.0.hook_resid_pre"]
FORWARD_ORDER = ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_post", "blocks.1.hook_mlp_out"]


def make_corpus(n_docs: int = 150, seed: int = 0) -> list[str]:
    """Deterministic word soup from the tiny vocabulary (~3,400 tokens for 150 docs)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40))) for _ in range(n_docs)]


CORPUS = make_corpus()


def expected_windows(tokenizer, corpus: list[str], context: int) -> list[list[int]]:
    """The spec: documents joined with EOS, cut into BOS + (context - 1) token windows."""
    stream: list[int] = []
    for doc in corpus:
        stream += [*tokenizer(doc, add_special_tokens=False)["input_ids"], EOS]
    body = context - 1
    return [[BOS, *stream[i : i + body]] for i in range(0, len(stream) - body + 1, body)]


def hf_reference(model, windows: list[list[int]]) -> dict[str, torch.Tensor]:
    """Site activations [n_windows, pos, d] from the plain transformers model, with forward hooks."""
    hf = model.module
    ids = torch.tensor(windows)
    mlp_out: list[torch.Tensor] = []
    handle = hf.transformer.h[1].mlp.register_forward_hook(lambda m, i, o: mlp_out.append(o))
    try:
        with torch.no_grad():
            out = hf(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True)
    finally:
        handle.remove()
    return {
        "blocks.0.hook_resid_pre": out.hidden_states[0],
        "blocks.0.hook_resid_post": out.hidden_states[1],
        "blocks.1.hook_mlp_out": mlp_out[0],
    }


def store_data(path: Path) -> dict[str, torch.Tensor]:
    store = ActivationStore(path)
    return {"tokens": store.tokens(), **{s: store.read(s) for s in store.sites}}


def assert_same_data(path: Path, ref_path: Path) -> None:
    got, want = store_data(path), store_data(ref_path)
    assert list(got) == list(want)
    for key in want:
        assert got[key].dtype == want[key].dtype, key
        assert torch.equal(got[key], want[key]), f"{key} differs from the uninterrupted run"
    assert ActivationStore(path).complete
    assert not [p.name for p in path.iterdir() if leftover_target(p.name)], "temporary files left behind"


@pytest.fixture(scope="module")
def gpt2():
    return tiny_model("gpt2")


@pytest.fixture(scope="module")
def ref_path(gpt2, tmp_path_factory) -> Path:
    """An uninterrupted store of the three SITES, shared read-only by the tests below."""
    path = tmp_path_factory.mktemp("ref")
    gpt2.cache(CORPUS, SITES, path, **KW)
    return path


def copy_store(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# --------------------------------------------------------------------------- layout


def test_manifest_and_shards(ref_path, gpt2):
    store = ActivationStore(ref_path)
    m = json.loads((ref_path / "manifest.json").read_text())
    assert m["format"] == "interplab-activations"
    assert m["model"] == gpt2.name == store.model_name
    assert m["sites"] == FORWARD_ORDER == store.sites
    assert m["d"] == {s: 32 for s in FORWARD_ORDER}
    assert m["dtype"] == "float32"
    assert m["context_size"] == CONTEXT
    assert m["skipped_prefix"] == 1
    assert m["complete"] is True and store.complete
    assert m["n_tokens"] == N_TOKENS == store.n_tokens == len(store)
    assert m["n_tokens_target"] == N_TOKENS
    shards = m["shards"]
    assert len(shards) >= 4, "shard_tokens=200 should give several shards"
    assert sum(s["n_tokens"] for s in shards) == N_TOKENS
    assert sorted(p.name for p in ref_path.glob("shard_*")) == [s["file"] for s in shards]
    assert not list(ref_path.glob("*.tmp"))
    for entry in shards:
        with safe_open(str(ref_path / entry["file"]), framework="pt") as f:
            assert sorted(f.keys()) == sorted([*FORWARD_ORDER, "tokens"])
            assert f.get_tensor("tokens").shape == (entry["n_tokens"],)
            for site in FORWARD_ORDER:
                t = f.get_tensor(site)
                assert t.shape == (entry["n_tokens"], 32) and t.dtype == torch.float32
    assert "1490 tokens" in repr(store) and "complete" in repr(store)


def test_tokens_are_the_corpus_stream_without_bos(ref_path, gpt2):
    store = ActivationStore(ref_path)
    windows = expected_windows(gpt2.tokenizer, CORPUS, CONTEXT)
    want = torch.tensor([t for w in windows for t in w[1:]])[:N_TOKENS]
    tokens = store.tokens()
    assert tokens.dtype == torch.int64
    assert torch.equal(tokens, want)
    assert (tokens != BOS).all(), "BOS positions must not be stored"
    assert (tokens == EOS).any(), "documents are joined with EOS"


def test_activations_align_with_tokens_across_shards(ref_path, gpt2):
    """Every stored row equals the site's value at that token, checked against plain HF hooks."""
    store = ActivationStore(ref_path)
    windows = expected_windows(gpt2.tokenizer, CORPUS, CONTEXT)
    n_windows = -(-N_TOKENS // (CONTEXT - 1))
    ref = hf_reference(gpt2, windows[:n_windows])
    for site in FORWARD_ORDER:
        want = ref[site][:, 1:].reshape(-1, 32)[:N_TOKENS]
        torch.testing.assert_close(store.read(site), want, atol=1e-5, rtol=1e-5, msg=site)
    # The sites really differ, so a store that wrote one tensor under every name would fail above.
    assert not torch.allclose(store.read(FORWARD_ORDER[0]), store.read(FORWARD_ORDER[1]))


def test_first_batch_equals_run_sites_exactly(ref_path, gpt2):
    store = ActivationStore(ref_path)
    windows = expected_windows(gpt2.tokenizer, CORPUS, CONTEXT)[:8]
    ids = torch.tensor(windows)
    values = gpt2.run_sites({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, gpt2.parse_sites(FORWARD_ORDER))
    rows = 8 * (CONTEXT - 1)
    for site, value in zip(FORWARD_ORDER, values, strict=True):
        assert torch.equal(store.read(site)[:rows], value[:, 1:].reshape(-1, 32)), site


def test_float16_store(gpt2, ref_path, tmp_path):
    store = gpt2.cache(CORPUS, "blocks.0.hook_resid_post", tmp_path, **{**KW, "n_tokens": 300}, dtype="float16")
    assert store.manifest["dtype"] == "float16"
    half = store.read()
    assert half.dtype == torch.float16 and half.shape == (300, 32)
    full = ActivationStore(ref_path).read("blocks.0.hook_resid_post")[:300]
    torch.testing.assert_close(half.float(), full, atol=1e-2, rtol=1e-2)
    batch = next(store.batches(50))
    assert batch.dtype == torch.float32 and batch.shape == (50, 32)


# --------------------------------------------------------------------------- resume


def _interrupt_flush(monkeypatch) -> None:
    real, calls = store_mod._flush, [0]

    def flaky(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(store_mod, "_flush", flaky)


def _interrupt_forward(monkeypatch, model) -> None:
    real, calls = model.run_sites, [0]

    def flaky(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 6:
            raise RuntimeError("simulated crash inside the forward pass")
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "run_sites", flaky)


@pytest.mark.parametrize("where", ["flush", "forward"])
def test_resume_after_interruption_is_byte_identical(gpt2, ref_path, tmp_path, monkeypatch, where):
    path = tmp_path / "acts"
    with monkeypatch.context() as m:
        if where == "flush":
            _interrupt_flush(m)
            with pytest.raises(KeyboardInterrupt):
                gpt2.cache(CORPUS, SITES, path, **KW)
        else:
            _interrupt_forward(m, gpt2)
            with pytest.raises(RuntimeError, match="simulated"):
                gpt2.cache(CORPUS, SITES, path, **KW)

    partial = ActivationStore(path)
    assert not partial.complete
    assert len(partial.manifest["shards"]) == 2 and partial.n_tokens == 480
    assert torch.equal(partial.tokens(), ActivationStore(ref_path).tokens()[:480])

    # A half-written shard from the crash is never read, and an orphan shard file that the
    # manifest does not list (crash between the rename and the manifest write) is replaced.
    (path / ".shard_00002.safetensors.tmp-k1ll3d").write_bytes(b"not a safetensors file")
    (path / ".shard_00099.safetensors.tmp-0rphan").write_bytes(b"no later write reuses this name")
    shutil.copy(path / "shard_00000.safetensors", path / "shard_00002.safetensors")
    (path / ".manifest.json.tmp-x").write_text("{")
    assert ActivationStore(path).read(FORWARD_ORDER[0]).shape == (480, 32)

    store = gpt2.cache(CORPUS, SITES, path, **KW)
    assert store.n_tokens == N_TOKENS
    assert_same_data(path, ref_path)


_CHILD = """
import sys, time
sys.path.insert(0, {root!r})
from tests.data.test_store import CORPUS, KW, SITES
from tests.tiny import tiny_model
model = tiny_model("gpt2")
real, calls = model.run_sites, [0]
def slow(*args, **kwargs):  # slow enough that the parent kills it mid-run (13 batches in all)
    calls[0] += 1
    time.sleep(0.1 if calls[0] <= 2 else 0.5)
    return real(*args, **kwargs)
model.run_sites = slow
model.cache(CORPUS, SITES, {path!r}, **KW)
"""


def _committed(path: Path) -> bool:
    """Whether the child's manifest lists a shard (a shard file alone may not be committed yet)."""
    try:
        return json.loads((path / "manifest.json").read_text())["n_tokens"] > 0
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return False


def test_resume_after_sigkill(gpt2, ref_path, tmp_path):
    path = tmp_path / "killed"
    code = _CHILD.format(root=str(ROOT), path=str(path))
    sigkill_when(code, lambda: _committed(path), deadline_s=60, what="a committed shard")
    partial = ActivationStore(path)
    assert not partial.complete and 0 < partial.n_tokens < N_TOKENS

    store = gpt2.cache(CORPUS, SITES, path, **KW)
    assert store.complete and store.n_tokens == N_TOKENS
    assert_same_data(path, ref_path)


def test_extending_a_complete_store_continues_the_stream(gpt2, ref_path, tmp_path):
    """Asking again for more tokens continues where the smaller run stopped, losing nothing.

    The first run ends mid-batch (500 is not a multiple of 8 windows x 15 tokens).
    """
    path = tmp_path / "grow"
    assert gpt2.cache(CORPUS, SITES, path, **{**KW, "n_tokens": 500}).n_tokens == 500
    store = gpt2.cache(CORPUS, SITES, path, **KW)
    assert store.n_tokens == N_TOKENS
    assert_same_data(path, ref_path)


def test_complete_store_returns_without_running_the_model(gpt2, ref_path, tmp_path, monkeypatch):
    path = copy_store(ref_path, tmp_path / "copy")

    def boom(*args, **kwargs):
        raise AssertionError("the model must not run for a complete store")

    monkeypatch.setattr(gpt2, "run_sites", boom)
    store = gpt2.cache(CORPUS, list(reversed(SITES)), path, **{**KW, "n_tokens": 100})
    assert store.complete and store.n_tokens == N_TOKENS
    assert_same_data(path, ref_path)


# --------------------------------------------------------------------------- exhausted corpus


def test_exhausted_corpus_warns_and_completes(gpt2, tmp_path, monkeypatch, caplog):
    small = CORPUS[:10]
    windows = expected_windows(gpt2.tokenizer, small, CONTEXT)
    available = len(windows) * (CONTEXT - 1)
    path = tmp_path / "small"
    with caplog.at_level(logging.WARNING, logger="interplab.core.data.store.caching"):
        store = gpt2.cache(small, "blocks.0.hook_resid_post", path, **{**KW, "n_tokens": 10_000})
    assert 0 < store.n_tokens == available < 10_000
    assert store.complete and store.manifest["exhausted"] is True
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("ran out" in r.getMessage() and str(available) in r.getMessage() for r in warnings)
    # and how large the corpus is: every token and EOS it holds
    corpus_tokens = sum(len(gpt2.tokenizer(d, add_special_tokens=False)["input_ids"]) + 1 for d in small)
    said = next(r.getMessage() for r in warnings if "ran out" in r.getMessage())
    assert f"it holds {corpus_tokens:,} tokens in 10 documents ({len(windows)} windows of {CONTEXT})" in said, said
    assert torch.equal(store.tokens(), torch.tensor([t for w in windows for t in w[1:]]))

    def boom(*args, **kwargs):
        raise AssertionError("the model must not run again")

    monkeypatch.setattr(gpt2, "run_sites", boom)
    for n in (100, 10_000):
        again = gpt2.cache(small, "blocks.0.hook_resid_post", path, **{**KW, "n_tokens": n})
        assert again.complete and again.n_tokens == available


# --------------------------------------------------------------------------- errors


def _cache_small(model, path, **overrides):
    kwargs = {**KW, "n_tokens": 60, **overrides}
    sites = kwargs.pop("sites", "blocks.0.hook_resid_post")
    return model.cache(CORPUS, sites, path, **kwargs)


def test_refuses_a_store_with_other_sites(gpt2, tmp_path):
    _cache_small(gpt2, tmp_path)
    with pytest.raises(ValueError) as err:
        _cache_small(gpt2, tmp_path, sites="blocks.1.hook_resid_post")
    assert "blocks.0.hook_resid_post" in str(err.value) and "blocks.1.hook_resid_post" in str(err.value)
    assert str(tmp_path) in str(err.value)


def test_refuses_a_store_with_another_context_size(gpt2, tmp_path):
    _cache_small(gpt2, tmp_path)
    with pytest.raises(ValueError, match="context_size") as err:
        _cache_small(gpt2, tmp_path, context_size=32)
    assert "16" in str(err.value) and "32" in str(err.value)


def test_refuses_a_store_of_another_model(gpt2, tmp_path):
    _cache_small(gpt2, tmp_path)
    llama = tiny_model("llama")
    with pytest.raises(ValueError) as err:
        _cache_small(llama, tmp_path)
    assert gpt2.name in str(err.value) and llama.name in str(err.value)
    assert ActivationStore(tmp_path).model_name == gpt2.name  # untouched


@pytest.mark.parametrize(
    ("overrides", "exc", "needles"),
    [
        ({"sites": "blocks.7.hook_resid_post"}, ValueError, ["blocks.7.hook_resid_post", "blocks.1.hook_resid_post"]),
        ({"sites": "blocks.0.resid"}, ValueError, ["blocks.0.resid", "hook_resid_post"]),
        ({"n_tokens": 0}, ValueError, ["n_tokens", "0"]),
        ({"context_size": 1}, ValueError, ["context_size", "1"]),
        ({"dtype": "int8"}, ValueError, ["int8", "float16", "float32", "bfloat16"]),
    ],
)
def test_bad_arguments_fail_before_any_work(gpt2, tmp_path, monkeypatch, overrides, exc, needles):
    def boom(*args, **kwargs):
        raise AssertionError("validation must happen before the forward pass")

    monkeypatch.setattr(gpt2, "run_sites", boom)
    path = tmp_path / "never"
    with pytest.raises(exc) as err:
        _cache_small(gpt2, path, **overrides)
    for needle in needles:
        assert needle in str(err.value), (needle, str(err.value))
    assert not path.exists(), "nothing should be written for a bad call"


def test_refuses_shards_without_manifest(gpt2, tmp_path):
    (tmp_path / "shard_00000.safetensors").write_bytes(b"x")
    with pytest.raises(ValueError, match="manifest") as err:
        _cache_small(gpt2, tmp_path)
    assert str(tmp_path) in str(err.value)


def test_store_needs_a_manifest(tmp_path):
    with pytest.raises(FileNotFoundError, match="manifest") as err:
        ActivationStore(tmp_path)
    assert str(tmp_path) in str(err.value)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ValueError, match="not an interplab activation manifest"):
        ActivationStore(tmp_path)


def test_multi_site_store_needs_a_site(ref_path):
    store = ActivationStore(ref_path)
    with pytest.raises(ValueError) as err:
        next(store.batches(16))
    assert all(s in str(err.value) for s in FORWARD_ORDER)
    with pytest.raises(ValueError) as err:
        store.read("blocks.1.hook_resid_post")
    assert "blocks.1.hook_resid_post" in str(err.value)
    assert all(s in str(err.value) for s in FORWARD_ORDER)
    with pytest.raises(ValueError, match="batch_size"):
        next(store.batches(0, site=FORWARD_ORDER[0]))


# --------------------------------------------------------------------------- reading back

SITE = "blocks.0.hook_resid_post"
BATCH = 64


def _rows(t: torch.Tensor) -> Counter:
    return Counter(r.numpy().tobytes() for r in t)


def synthetic_store(path: Path, shard_sizes: list[int], d: int = 3) -> torch.Tensor:
    """A store whose row i is [i, shard, 0...]: rows are traceable to their shard."""
    path.mkdir()
    rows, shards, start = [], [], 0
    for k, n in enumerate(shard_sizes):
        value = torch.zeros(n, d)
        value[:, 0] = torch.arange(start, start + n)
        value[:, 1] = k
        name = f"shard_{k:05d}.safetensors"
        save_file({SITE: value, "tokens": torch.arange(start, start + n)}, str(path / name))
        shards.append({"file": name, "n_tokens": n})
        rows.append(value)
        start += n
    manifest = {
        "format": "interplab-activations",
        "version": 1,
        "model": "synthetic",
        "sites": [SITE],
        "d": {SITE: d},
        "dtype": "float32",
        "context_size": 2,
        "skipped_prefix": 1,
        "n_tokens": start,
        "windows_done": start,
        "shards": shards,
        "complete": True,
    }
    (path / "manifest.json").write_text(json.dumps(manifest))
    return torch.cat(rows)


UNEVEN = [50, 37, 64, 10, 80, 45, 3]


def test_batches_shuffle_is_a_deterministic_permutation(ref_path):
    store = ActivationStore(ref_path)
    stored = store.read(SITE)
    batches = list(store.batches(BATCH, site=SITE, seed=0))
    assert all(b.shape == (BATCH, 32) and b.dtype == torch.float32 for b in batches)
    got = torch.cat(batches)
    assert len(got) == N_TOKENS // BATCH * BATCH  # only the remainder is dropped
    assert not _rows(got) - _rows(stored), "every yielded row is a stored row, none repeated"
    assert not torch.equal(got, stored[: len(got)]), "shuffled order should differ from store order"
    again = torch.cat(list(store.batches(BATCH, site=SITE, seed=0)))
    assert torch.equal(got, again), "same seed, same order"
    other = torch.cat(list(store.batches(BATCH, site=SITE, seed=1)))
    assert not torch.equal(got, other), "another seed, another order"


@pytest.mark.parametrize("buffer_shards", [1, 2, 3])
def test_batches_cover_every_row_once_but_the_remainder(tmp_path, buffer_shards):
    stored = synthetic_store(tmp_path / "s", UNEVEN)
    store = ActivationStore(tmp_path / "s")
    n = sum(UNEVEN)
    for shuffle in (True, False):
        got = torch.cat(list(store.batches(16, shuffle=shuffle, buffer_shards=buffer_shards)))
        index = got[:, 0].long()
        assert len(index) == n // 16 * 16
        assert len(set(index.tolist())) == len(index), "a row was yielded twice"
        assert torch.equal(got, stored[index]), "rows are yielded whole and unchanged"
        if shuffle:
            # Mixed across shards: the first batch already holds rows of several shards.
            first = got[:16, 1].unique()
            assert len(first) > 1 or buffer_shards == 1
        else:
            assert torch.equal(index, torch.arange(len(index)))


def test_batches_without_shuffle_keep_store_order(ref_path):
    store = ActivationStore(ref_path)
    stored = store.read(SITE)
    batches = list(store.batches(BATCH, site=SITE, shuffle=False))
    assert len(batches) == N_TOKENS // BATCH
    assert torch.equal(torch.cat(batches), stored[: len(batches) * BATCH])


@pytest.mark.parametrize("buffer_shards", [1, 2])
def test_batches_hold_a_bounded_number_of_shards(tmp_path, monkeypatch, buffer_shards):
    synthetic_store(tmp_path / "s", UNEVEN)
    store = ActivationStore(tmp_path / "s")
    loads: list[int] = []
    real_load = ActivationStore.shard

    def counting_load(self, shard, key):
        loads.append(shard)
        return real_load(self, shard, key)

    monkeypatch.setattr(ActivationStore, "shard", counting_load)
    carried: Counter = Counter()  # per buffer: rows that came from shards loaded before it
    for k, batch in enumerate(store.batches(16, buffer_shards=buffer_shards)):
        if k == 0:
            assert len(loads) == buffer_shards, "the first batch needs only the first buffer"
        n_loaded = len(loads)
        assert n_loaded % buffer_shards == 0 or n_loaded == len(UNEVEN), "shards load a buffer at a time"
        buffer = set(loads[(n_loaded - 1) // buffer_shards * buffer_shards :])
        carried[n_loaded] += sum(int(s) not in buffer for s in batch[:, 1].tolist())
    # Besides the current buffer, at most one partial batch (the leftover) is held.
    assert max(carried.values()) < 16, carried
    assert sorted(loads) == list(range(len(UNEVEN))), "each shard is read exactly once per pass"


# --------------------------------------------------------------------------- bounded memory


def test_pending_buffer_is_bounded_and_corpus_is_streamed(gpt2, tmp_path, monkeypatch):
    """Memory stays bounded: at most one shard (+ one batch) is held, and the corpus is read lazily."""
    sizes: list[int] = []
    real = store_mod._flush

    def recording(root, manifest, pending, count, windows):
        assert all(sum(len(t) for t in v) == count for v in pending.values())
        sizes.append(count)
        return real(root, manifest, pending, count, windows)

    monkeypatch.setattr(store_mod, "_flush", recording)
    consumed = [0]

    def lazy_corpus():
        for doc in make_corpus(5_000, seed=1):
            consumed[0] += 1
            yield doc

    shard_tokens, batch_size = 100, 4
    store = gpt2.cache(
        lazy_corpus(),
        SITE,
        tmp_path,
        n_tokens=900,
        context_size=CONTEXT,
        batch_size=batch_size,
        shard_tokens=shard_tokens,
    )
    assert store.n_tokens == 900 and sum(sizes) == 900 and len(sizes) >= 5
    assert max(sizes) < shard_tokens + batch_size * (CONTEXT - 1)
    assert consumed[0] < 200, f"the corpus was read eagerly ({consumed[0]} of 5000 documents)"


def test_a_tampered_store_is_named_with_its_field(tmp_path):
    model = tiny_model("gpt2")
    store = model.cache(TEXTS * 10, "blocks.1.hook_resid_post", tmp_path / "s", n_tokens=60, context_size=8,
                        shard_tokens=30)  # fmt: skip
    manifest = json.loads((store.path / "manifest.json").read_text())
    for change, match in (
        ({"n_tokens": 61}, "n_tokens is 61 but its shards hold 60"),
        ({"shards": [{"file": "../../etc/passwd", "n_tokens": 60}]}, r"shards\[0\]\.file must be a shard file name"),
        ({"d": {"blocks.1.hook_resid_post": "32"}}, r"d\.blocks\.1\.hook_resid_post must be an integer"),
        ({"dtype": "float64"}, "dtype must be one of"),
    ):
        (store.path / "manifest.json").write_text(json.dumps({**manifest, **change}))
        with pytest.raises(FileError, match=match):
            ActivationStore(store.path)
    (store.path / "manifest.json").write_text(json.dumps(manifest))
    n0, n1 = (entry["n_tokens"] for entry in manifest["shards"])
    save_file({"blocks.1.hook_resid_post": torch.zeros(n1, 16), "tokens": torch.zeros(n1, dtype=torch.int64)},
              str(store.path / "shard_00001.safetensors"))  # fmt: skip
    fresh = ActivationStore(store.path)
    assert fresh.shard(0, "tokens").shape == (n0,)
    with pytest.raises(FileError, match=rf"shard_00001\.safetensors': blocks\.1\.hook_resid_post has shape "
                                        rf"\[{n1}, 16\], expected \[{n1}, 32\]"):  # fmt: skip
        fresh.shard(1, "blocks.1.hook_resid_post")


RESID_1 = "blocks.1.hook_resid_post"


def test_an_empty_corpus_is_refused_and_empty_texts_add_nothing(gpt2, tmp_path):
    with pytest.raises(ValueError, match=r"corpus \(a list of 200 texts.*\) gives no window of 16 tokens: it holds no "
                                         r"text"):  # fmt: skip
        gpt2.cache([""] * 200, RESID_1, tmp_path / "empty", n_tokens=1000, context_size=16)
    assert not (tmp_path / "empty").exists(), "nothing is written for an empty corpus"
    # empty documents inside a corpus are left out: no EOS run for them
    store = gpt2.cache(["", "the cat sat", "", "", "on the mat"] * 4, RESID_1, tmp_path / "mixed", n_tokens=20,
                       context_size=4)  # fmt: skip
    tokens = store.tokens().tolist()
    eos = gpt2.tokenizer.eos_token_id
    assert all(not (a == eos and b == eos) for a, b in itertools.pairwise(tokens)), tokens


def test_a_store_records_its_corpus_and_refuses_another(gpt2, tmp_path):
    path = tmp_path / "acts"
    store = gpt2.cache(MIXED_CORPUS, RESID_1, path, n_tokens=100, context_size=16)
    assert store.manifest["corpus"].startswith("a list of 60 texts") and len(store.tokens_digest) == 64
    with pytest.raises(ValueError, match="made from another corpus"):
        gpt2.cache(MIXED_CORPUS[::-1], RESID_1, path, n_tokens=200, context_size=16)


def test_a_store_of_hook_embed_is_written_and_read_back(gpt2, tmp_path):
    """The embedding site caches like any block site, and the store it writes opens."""
    store = gpt2.cache(TEXTS * 10, "hook_embed", tmp_path / "embed", n_tokens=60, context_size=8, progress=False)
    assert ActivationStore(store.path).sites == ["hook_embed"]
    assert store.read("hook_embed").shape == (60, gpt2.d_model)


def test_a_manifest_may_name_every_site_the_model_stores(gpt2, tmp_path):
    """The manifest reader accepts every site the model has (the pattern site holds no per-token vector)."""
    store = gpt2.cache(TEXTS * 10, RESID_1, tmp_path / "s", n_tokens=30, context_size=8, progress=False)
    manifest = json.loads((store.path / "manifest.json").read_text())
    every = [s for s in gpt2.sites if not s.endswith("hook_pattern")]
    manifest.update(sites=every, d={s: gpt2.site_dim(s) for s in every})
    (store.path / "manifest.json").write_text(json.dumps(manifest))
    assert ActivationStore(store.path).sites == every
    manifest.update(sites=["blocks.1.hook_resid_post;rm"], d={"blocks.1.hook_resid_post;rm": 32})
    (store.path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(FileError, match="sites must be a non-empty list of site names"):
        ActivationStore(store.path)


@pytest.mark.parametrize("bad", [-7, 10**9])
def test_store_token_ids_outside_the_vocabulary_are_refused(gpt2, tmp_path, bad):
    """A shard's token ids are checked against the vocabulary recorded when caching (-7 or 1e9 showed as '')."""
    store = gpt2.cache(TEXTS * 10, RESID_1, tmp_path / "s", n_tokens=30, context_size=8, progress=False)
    assert store.manifest["vocab_size"] == len(gpt2.tokenizer)
    file = store.shard_file(0)
    with safe_open(str(file), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    tensors["tokens"][3] = bad
    save_file(tensors, str(file))
    with pytest.raises(FileError, match=rf"tokens holds {bad} at \[3\]: must be in 0\.\.{len(gpt2.tokenizer) - 1}"):
        ActivationStore(store.path).tokens()
