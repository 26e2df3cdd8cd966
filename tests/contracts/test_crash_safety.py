"""The crash-safety contract, driven for every long job: a kill at every file operation, a real SIGKILL,
a full disk, leftovers, and resumes with other inputs.

For each job (``Model.cache``, ``train_sae`` from a store and from a model, ``feature_data``) and each
atomic writer (``SAE.save``, ``FeatureData.save``, labels), :func:`tests.faults.kill_at_every_step`
kills an uninterrupted run at each of its file operations in turn (every mkstemp, write, fsync, chmod,
replace, rename, unlink, makedirs and rmtree of its write path, data writes torn half-way), runs
the same call again, and checks that the result equals the uninterrupted one and that nothing is
left behind.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import subprocess
import time
from pathlib import Path

import interplab.core.saes.training.trainer as train_mod
import interplab.core.storage.atomic as atomic
import numpy as np
import pytest
import torch
from interplab.core.data.store import ActivationStore
from interplab.core.features import FeatureData, feature_data
from interplab.core.features.folder_format import CHECKPOINT as FEATURE_CHECKPOINT
from interplab.core.features.labels import read_labels, set_label
from interplab.core.saes import SAE, load_sae
from interplab.core.saes.training.trainer import CHECKPOINT, read_checkpoint, train_saes
from interplab.core.storage.atomic import DiskFullError, leftover_target

from tests.faults import FileOps, Killed, kill_at_every_step, patch_atomic, sigkill_when
from tests.tiny import WORDS, tiny_model

ROOT = Path(__file__).resolve().parents[2]
SITE = "blocks.1.hook_resid_post"
_rng = random.Random(7)
CORPUS = [" ".join(_rng.choice(WORDS) for _ in range(_rng.randint(4, 30))) for _ in range(60)]
ENV = {**os.environ, "TQDM_DISABLE": "1", "PYTHONPATH": str(ROOT)}


def leftovers(folder: Path) -> list[str]:
    """Names an interrupted write would have left anywhere under ``folder`` (and beside it)."""
    names = [p.name for p in [*folder.rglob("*"), *folder.parent.iterdir()] if leftover_target(p.name)]
    return sorted(names)


def same_store(a: ActivationStore, b: ActivationStore) -> None:
    assert a.complete and b.complete and a.n_tokens == b.n_tokens and a.sites == b.sites
    assert torch.equal(a.tokens(), b.tokens())
    for site in a.sites:
        assert torch.equal(a.read(site), b.read(site)), site


def same_weights(a: SAE, b: SAE) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key
    assert a.cfg.metadata == b.cfg.metadata


FEATURE_ARRAYS = ("density", "max_act", "hist_counts", "hist_edges", "top_tokens", "top_acts", "top_max", "top_where",
                  "quantile_tokens", "quantile_acts", "quantile_max", "quantile_where", "logit_top_ids")  # fmt: skip


def same_features(a: FeatureData, b: FeatureData) -> None:
    assert a.complete and b.complete and a.n_tokens == b.n_tokens
    for name in FEATURE_ARRAYS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    np.testing.assert_allclose(a.mean_act, b.mean_act, rtol=1e-6)


@pytest.fixture(scope="module")
def gpt2():
    return tiny_model("gpt2")


@pytest.fixture(scope="module")
def store(gpt2, tmp_path_factory) -> ActivationStore:
    return gpt2.cache(CORPUS, SITE, tmp_path_factory.mktemp("s") / "acts", n_tokens=1024, context_size=16,
                      shard_tokens=256)  # fmt: skip


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TQDM_DISABLE", "1")


# ------------------------------------------------------------- kill at every write
def test_cache_survives_a_kill_at_every_file_operation(gpt2, tmp_path):
    sites = ["blocks.0.hook_resid_post", "blocks.1.hook_mlp_out"]
    kw = {"n_tokens": 300, "context_size": 16, "batch_size": 4, "shard_tokens": 100}
    reference = gpt2.cache(CORPUS, sites, tmp_path / "reference", **kw)

    def check(store: ActivationStore, path: Path) -> None:
        same_store(store, reference)
        assert not leftovers(path), leftovers(path)

    n = kill_at_every_step(lambda p: gpt2.cache(CORPUS, sites, p, **kw), check, tmp_path, twice=True)
    assert n > 60  # three shards and their manifests: every step of each write was a kill point


TRAIN = {"n_tokens": 4 * 64, "batch_size": 64, "checkpoint_every": 1, "progress": False, "seed": 2}
SPECS = [{"arch": "topk", "width": 16, "k": 2}, {"arch": "jumprelu", "width": 16, "l0_coefficient": 0.1}]


def test_training_from_a_store_survives_a_kill_at_every_file_operation(store, tmp_path):
    reference = train_saes(store, SPECS, **TRAIN)

    def check(saes: list[SAE], path: Path) -> None:
        for a, b in zip(saes, reference, strict=True):
            same_weights(a, b)
        assert read_checkpoint(path / CHECKPOINT)["step"] == 4
        assert not leftovers(path), leftovers(path)

    n = kill_at_every_step(lambda p: train_saes(store, SPECS, checkpoint_dir=p, **TRAIN), check, tmp_path)
    assert n > 40


def test_training_from_a_model_survives_a_kill_at_every_file_operation(gpt2, tmp_path):
    kw = {**TRAIN, "site": SITE, "corpus": CORPUS, "n_tokens": 3 * 64}
    reference = train_saes(gpt2, SPECS[:1], **kw)

    def check(saes: list[SAE], path: Path) -> None:
        same_weights(saes[0], reference[0])
        assert not leftovers(path), leftovers(path)

    kill_at_every_step(lambda p: train_saes(gpt2, SPECS[:1], checkpoint_dir=p, **kw), check, tmp_path)


FEATURES = {"n_top": 3, "n_quantile": 2, "context": 5, "lead": 3, "n_bins": 8, "seq_len": 9, "batch_size": 4,
            "progress": False}  # fmt: skip


def _sae() -> SAE:
    sae = SAE.create("topk", d_in=32, d_sae=24, k=4, site=SITE)
    sae.init_weights(5)
    return sae


def test_feature_data_survives_a_kill_at_every_file_operation(gpt2, tmp_path):
    sae = _sae()
    texts = CORPUS[:6]
    reference = feature_data(sae, gpt2, texts, **FEATURES)

    def run(path: Path) -> FeatureData:
        return feature_data(sae, gpt2, texts, path=path, checkpoint_every=0, **FEATURES)

    def check(data: FeatureData, path: Path) -> None:
        same_features(data, reference)
        same_features(FeatureData.load(path), reference)
        assert not (path / FEATURE_CHECKPOINT).exists() and not leftovers(path), leftovers(path)

    n = kill_at_every_step(run, check, tmp_path, twice=True)
    assert n > 50  # a checkpoint per batch (three), then the final folder swap


def test_feature_data_from_a_store_survives_a_kill_at_every_file_operation(gpt2, store, tmp_path):
    sae = _sae()
    kw = {**FEATURES, "model": gpt2, "n_tokens": 64}
    reference = feature_data(sae, store, **kw)

    def check(data: FeatureData, path: Path) -> None:
        same_features(data, reference)
        assert not leftovers(path), leftovers(path)

    kill_at_every_step(lambda p: feature_data(sae, store, path=p, checkpoint_every=0, **kw), check, tmp_path)


def test_folder_saves_keep_the_old_or_the_new_version_at_every_file_operation(tmp_path):
    """SAE.save over an existing SAE: a kill anywhere leaves one whole SAE (old or new); the next load finishes
    a split swap and the save run again leaves the new one, nothing else."""
    old, new = _sae(), SAE.create("topk", d_in=32, d_sae=24, k=4, site=SITE)
    new.init_weights(9)

    def run(path: Path) -> SAE:
        if not path.exists() and not any(leftover_target(p.name) for p in path.parent.iterdir()):
            old.save(path)
        new.save(path)
        return load_sae(path)

    def check(loaded: SAE, path: Path) -> None:
        assert torch.equal(loaded.W_enc, new.W_enc)
        assert sorted(p.name for p in path.iterdir()) == ["cfg.json", "sae_weights.safetensors"]
        assert not leftovers(path), leftovers(path)

    ops = FileOps()
    for n in range(1, 80):  # a save makes about 50 file operations (the weights are streamed in writes)
        path = tmp_path / f"k{n}" / "sae"
        path.parent.mkdir()
        old.save(path)
        with ops.kill_at(n):
            try:
                new.save(path)
                break  # the save has fewer operations than n: every step was tried
            except Killed:
                pass
        loaded = load_sae(path)  # after a kill anywhere: exactly one of the two versions, whole
        assert torch.equal(loaded.W_enc, old.W_enc) or torch.equal(loaded.W_enc, new.W_enc), n
        check(run(path), path)
    else:
        pytest.fail("the save never finished within 80 operations")


def test_labels_survive_a_kill_at_every_file_operation(tmp_path):
    sae = _sae()

    def run(path: Path) -> dict[int, str]:
        sae.source_path = str(path)
        path.mkdir(exist_ok=True)
        set_label(sae, 1, "one")
        set_label(sae, 2, "two")
        return read_labels(path / "labels.json")

    def age(path: Path) -> None:
        """A file other processes may write is cleaned of temporaries only once they are stale."""
        old = time.time() - atomic.STALE_SECONDS - 1
        for p in path.iterdir():
            os.utime(p, (old, old))

    def check(labels: dict[int, str], path: Path) -> None:
        assert labels == {1: "one", 2: "two"}
        assert not leftovers(path), leftovers(path)

    kill_at_every_step(run, check, tmp_path, before_resume=age)


def test_a_leftover_of_a_killed_write_never_blocks(gpt2, tmp_path):
    """Leftovers of an interrupted checkpoint write are cleared: the resume takes the folder."""
    sae = _sae()
    path = tmp_path / "dash"
    part = feature_data(sae, gpt2, CORPUS, path=path, max_batches=2, **FEATURES)
    assert not part.complete
    (path / f".{FEATURE_CHECKPOINT}.tmp-torn").write_bytes(b"half a checkpoint")
    (tmp_path / ".dash.tmp-abcd").mkdir()  # an unfinished final folder
    (tmp_path / ".dash.tmp-abcd" / "meta.json").write_text("{")
    done = feature_data(sae, gpt2, CORPUS, path=path, **FEATURES)
    same_features(done, feature_data(sae, gpt2, CORPUS, **FEATURES))
    assert not leftovers(path), leftovers(path)


def test_a_kill_between_the_final_renames_keeps_the_result(gpt2, tmp_path, monkeypatch):
    """A kill between the two renames of the final swap keeps the finished result."""
    sae = _sae()
    path = tmp_path / "dash"
    feature_data(sae, gpt2, CORPUS, path=path, max_batches=1, **FEATURES)
    renames: list[str] = []
    real = os.rename

    def rename(src, dst):  # type: ignore[no-untyped-def]
        renames.append(f"{Path(src).name}->{Path(dst).name}")
        if Path(dst) == path:  # the new folder's last rename into place
            raise Killed("between the renames")
        return real(src, dst)

    ops = FileOps()
    proxy = ops._os()
    proxy._wrapped["rename"] = rename
    with monkeypatch.context() as m:
        patch_atomic(m, "os", proxy)
        with pytest.raises(Killed):
            feature_data(sae, gpt2, CORPUS, path=path, **FEATURES)
    assert "dash->.dash.old" in renames and not path.exists(), "killed with the result in .dash.new only"
    calls = []
    monkeypatch.setattr(gpt2, "run_sites", lambda *a, **k: calls.append(1))
    done = feature_data(sae, gpt2, CORPUS, path=path, **FEATURES)  # finds the finished result, runs nothing
    assert done.complete and not calls
    assert not leftovers(path)


# ------------------------------------------------------------- different inputs
def test_resumes_with_other_inputs_are_refused_naming_what_differs(gpt2, store, tmp_path):
    llama = tiny_model("llama")
    other_weights = tiny_model("gpt2", seed=1)
    # activation store: another corpus, another model's weights
    path = tmp_path / "acts"
    gpt2.cache(CORPUS, SITE, path, n_tokens=200, context_size=16, shard_tokens=64)
    with pytest.raises(ValueError, match=r"made from another corpus: the first 200 tokens"):
        gpt2.cache(CORPUS[::-1], SITE, path, n_tokens=400, context_size=16, shard_tokens=64)
    with pytest.raises(ValueError, match=r"other inputs than this call's \(model_sha: '[0-9a-f]{16}' there, "):
        other_weights.cache(CORPUS, SITE, path, n_tokens=400, context_size=16, shard_tokens=64)
    with pytest.raises(ValueError, match=r"model: 'GPT2LMHeadModel' there, 'LlamaForCausalLM' now"):
        llama.cache(CORPUS, SITE, path, n_tokens=400, context_size=16, shard_tokens=64)
    assert ActivationStore(path).n_tokens == 200  # untouched

    # SAE training: a checkpoint_dir reused with another store, another corpus, other weights
    ckpt = tmp_path / "ckpt"
    train_saes(store, SPECS[:1], checkpoint_dir=ckpt, **TRAIN)
    other_store = gpt2.cache(CORPUS[::-1], SITE, tmp_path / "other", n_tokens=1024, context_size=16,
                             shard_tokens=256)  # fmt: skip
    with pytest.raises(ValueError, match=r"other inputs than this call's \(source\.tokens_sha256: '[0-9a-f]+' "):
        train_saes(other_store, SPECS[:1], checkpoint_dir=ckpt, **TRAIN)
    kw = {**TRAIN, "site": SITE, "n_tokens": 3 * 64}
    train_saes(gpt2, SPECS[:1], checkpoint_dir=tmp_path / "m", corpus=CORPUS, **{**kw, "n_tokens": 2 * 64})
    with pytest.raises(ValueError, match=r"n_tokens: 128 there, 192 now"):
        train_saes(gpt2, SPECS[:1], checkpoint_dir=tmp_path / "m", corpus=CORPUS, **kw)
    with pytest.raises(ValueError, match=r"source\.model_sha"):
        train_saes(other_weights, SPECS[:1], checkpoint_dir=tmp_path / "m", corpus=CORPUS, **{**kw, "n_tokens": 128})

    # feature data: another SAE, another corpus
    sae = _sae()
    dash = tmp_path / "dash"
    feature_data(sae, gpt2, CORPUS, path=dash, max_batches=1, **FEATURES)
    with pytest.raises(ValueError, match=r"other inputs than this call's \(sae: '[0-9a-f]{16}' there"):
        feature_data(SAE.create("topk", d_in=32, d_sae=24, k=4, site=SITE), gpt2, CORPUS, path=dash, **FEATURES)
    with pytest.raises(ValueError, match=r"corpus: 'a list of 60 texts \(sha256 [0-9a-f]+\)' there, 'a list of 59"):
        feature_data(sae, gpt2, CORPUS[1:], path=dash, **FEATURES)


def test_a_generator_corpus_is_checked_by_its_tokens(gpt2, tmp_path, monkeypatch):
    """A corpus that cannot be described (a generator) is recognised by the tokens already used."""
    sae = _sae()
    dash = tmp_path / "dash"
    feature_data(sae, gpt2, iter(CORPUS), path=dash, max_batches=1, **FEATURES)
    with pytest.raises(ValueError, match=r"made from another corpus: the first \d+ tokens"):
        feature_data(sae, gpt2, iter(CORPUS[::-1]), path=dash, **FEATURES)
    done = feature_data(sae, gpt2, iter(CORPUS), path=dash, **FEATURES)
    same_features(done, feature_data(sae, gpt2, CORPUS, **FEATURES))

    ckpt = tmp_path / "ckpt"
    kw = {**TRAIN, "site": SITE, "n_tokens": 64 * 40}
    original = train_mod._save_checkpoint

    def save_then_stop(path, inputs, state):  # type: ignore[no-untyped-def]
        original(path, inputs, state)
        if state["step"] == 20:
            raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(train_mod, "_save_checkpoint", save_then_stop)
        with pytest.raises(KeyboardInterrupt):
            train_saes(gpt2, SPECS[:1], checkpoint_dir=ckpt, corpus=(t for t in CORPUS * 6), **kw)
    with pytest.raises(ValueError, match=r"made from another corpus"):
        train_saes(gpt2, SPECS[:1], checkpoint_dir=ckpt, corpus=(t for t in CORPUS[::-1] * 6), **kw)
    resumed = train_saes(gpt2, SPECS[:1], checkpoint_dir=ckpt, corpus=(t for t in CORPUS * 6), **kw)
    same_weights(resumed[0], train_saes(gpt2, SPECS[:1], corpus=CORPUS * 6, **kw)[0])


# ------------------------------------------------------------------- real SIGKILL
_CHILD = """
import sys, time
import interplab.core.features.stats as stats
import interplab.core.saes.training.trainer as train
from interplab.core.saes import SAE
from tests.contracts.test_crash_safety import CORPUS, FEATURES, SITE, SPECS, TRAIN, _sae
from tests.tiny import tiny_model
job = sys.argv[1]
if job == "features":
    real = stats.FeatureAccumulator.update
    def slow(self, *a, **k):
        time.sleep(0.05)
        return real(self, *a, **k)
    stats.FeatureAccumulator.update = slow
    from interplab.core.features import feature_data
    feature_data(_sae(), tiny_model("gpt2"), CORPUS * 4, path=sys.argv[2], checkpoint_every=0, **FEATURES)
else:
    real = train.train_step
    def slow(*a, **k):
        time.sleep(0.03)
        return real(*a, **k)
    train.train_step = slow
    from interplab.core.data.store import ActivationStore
    train.train_saes(ActivationStore(sys.argv[3]), SPECS, checkpoint_dir=sys.argv[2], **{**TRAIN, "n_tokens": 64 * 60})
"""


def _kill_when(job: str, path: Path, ready, extra: list[str]) -> None:  # type: ignore[no-untyped-def]
    sigkill_when(_CHILD, ready, args=(job, str(path), *extra), env=ENV, jitter_s=0.05, seed=len(str(path)),
                 what="a checkpoint")  # fmt: skip


def _changed(file: Path):  # type: ignore[no-untyped-def]
    """A predicate: ``file`` was (re)written since now."""
    before = file.stat().st_ino if file.exists() else None

    def ready() -> bool:
        try:
            return file.stat().st_ino != before
        except FileNotFoundError:
            return False

    return ready


def test_feature_data_resumes_after_sigkill(gpt2, tmp_path):
    path = tmp_path / "dash"
    for _ in range(2):  # killed twice, the second time while resuming
        _kill_when("features", path, _changed(path / FEATURE_CHECKPOINT), [])
    done = feature_data(_sae(), gpt2, CORPUS * 4, path=path, **FEATURES)
    same_features(done, feature_data(_sae(), gpt2, CORPUS * 4, **FEATURES))
    assert not leftovers(path)


def test_training_from_a_store_resumes_after_sigkill(store, tmp_path):
    ckpt = tmp_path / "ckpt"
    kw = {**TRAIN, "n_tokens": 64 * 60}

    def checkpointed() -> bool:
        try:
            return read_checkpoint(ckpt / CHECKPOINT)["step"] >= 10
        except (FileNotFoundError, ValueError):
            return False

    _kill_when("train", ckpt, checkpointed, [str(store.path)])
    step = read_checkpoint(ckpt / CHECKPOINT)["step"]
    assert 10 <= step < 60
    resumed = train_saes(store, SPECS, checkpoint_dir=ckpt, **kw)
    for a, b in zip(resumed, train_saes(store, SPECS, **kw), strict=True):
        same_weights(a, b)
    assert not leftovers(ckpt)


# -------------------------------------------------------------------- full disk
def _small_disk(path: Path, size: str) -> bool:
    """Mount a small tmpfs at ``path`` (needs root); False where that is not possible."""
    path.mkdir(parents=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    return done.returncode == 0


def _fill(folder: Path, leave: int) -> Path:
    """A file taking all the free space of ``folder``'s disk but ``leave`` bytes."""
    filler = folder / "filler"
    free = shutil.disk_usage(folder).free
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


def test_a_full_disk_keeps_the_checkpoint_and_says_so(gpt2, tmp_path, monkeypatch):
    """A full disk: a clear DiskFullError (not 'N requested and M written'), the last checkpoint kept,
    and the same call finishes once there is space. On a real 6 MB tmpfs where this machine allows mounting one,
    else with ENOSPC injected at the write."""
    sae = SAE.create("topk", d_in=32, d_sae=512, k=4, site=SITE)
    sae.init_weights(3)
    kw = {**FEATURES, "n_top": 8, "context": 12, "lead": 6}
    disk = tmp_path / "disk"
    mounted = _small_disk(disk, "6m")
    try:
        path = disk / "dash"
        part = feature_data(sae, gpt2, CORPUS, path=path, max_batches=1, **kw)
        assert not part.complete
        good = (path / FEATURE_CHECKPOINT).read_bytes()
        if mounted:
            filler = _fill(disk, leave=len(good) // 2)
        else:
            real_write = os.write

            def full(fd, data):  # type: ignore[no-untyped-def]
                raise OSError(errno.ENOSPC, "No space left on device")

            patch_atomic(monkeypatch, "os", type("os", (), {"__getattr__": lambda s, n: getattr(os, n),
                                                            "write": staticmethod(full)})())  # fmt: skip
        with pytest.raises(DiskFullError, match=r"The disk is full: writing .*checkpoint\.safetensors.*Nothing was "
                                                r"replaced"):  # fmt: skip
            feature_data(sae, gpt2, CORPUS, path=path, max_batches=1, **kw)
        assert (path / FEATURE_CHECKPOINT).read_bytes() == good, "the last checkpoint is intact"
        if mounted:
            filler.unlink()
        else:
            patch_atomic(monkeypatch, "os", os)
            assert real_write is os.write
        done = feature_data(sae, gpt2, CORPUS, path=path, **kw)
        same_features(done, feature_data(sae, gpt2, CORPUS, **kw))
        assert not leftovers(path)
    finally:
        if mounted:
            subprocess.run(["umount", str(disk)], check=False)


def test_a_short_write_of_a_folder_is_a_clear_disk_full_error(gpt2, tmp_path, monkeypatch):
    """numpy's short write ('131072 requested and 72688 written') while saving the result: a DiskFullError
    naming the folder, and nothing replaced."""
    import interplab.core.features.data as data_mod

    sae = _sae()
    path = tmp_path / "dash"
    feature_data(sae, gpt2, CORPUS, path=path, max_batches=1, **FEATURES)
    before = sorted(p.name for p in path.iterdir())
    calls = [0]
    real = np.save

    def short(file, arr, **kw):  # type: ignore[no-untyped-def]
        calls[0] += 1
        if calls[0] == 3:
            raise OSError("131072 requested and 72688 written")
        return real(file, arr, **kw)

    monkeypatch.setattr(data_mod.np, "save", short)
    with pytest.raises(DiskFullError, match=r"The disk is full: writing .*dash"):
        feature_data(sae, gpt2, CORPUS, path=path, **FEATURES)
    monkeypatch.setattr(data_mod.np, "save", real)
    assert sorted(p.name for p in path.iterdir()) == before and not leftovers(path)
