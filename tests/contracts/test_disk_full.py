"""One disk-full translation for every safetensors write: a DiskFullError naming what was written, the old data kept.

Every ``.safetensors`` file goes through ``write_safetensors`` (``core/storage/atomic/files.py``). Here the disk
fills up for safetensors files only (``ENOSPC`` from the write of any file whose name says ``.safetensors``), so
each writer below meets the full disk at its safetensors write and nowhere else: the cache (a fresh
shard and a resumed one), ``SAE.save``, ``Graph.save``, ``SteeringVector.save``, ``DASResult.save`` and
``ProbeResult.save``. A real full disk (a 2 MB tmpfs) is tried too where this machine lets the test mount one.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from interplab.core.circuits.graph import Graph
from interplab.core.das.fit import DASResult
from interplab.core.data.store import ActivationStore
from interplab.core.probes.linear import Probe, ProbeResult
from interplab.core.steering.vectors import SteeringVector
from interplab.core.storage.atomic import DiskFullError, leftover_target, write_safetensors
from safetensors.torch import load_file, save

import interplab as ilab
from tests.contracts.test_crash_safety import CORPUS, _sae
from tests.faults import patch_atomic
from tests.tiny import tiny_model

SITE = "blocks.0.hook_resid_post"
CACHE = {"n_tokens": 150, "context_size": 16, "batch_size": 2, "shard_tokens": 40, "progress": False}


class _FullForSafetensors:
    """``os`` as the atomic helpers see it: every write into a ``.safetensors`` file fails (but those in ``spare``)."""

    def __init__(self, *spare: str):
        self.spare = spare

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def write(self, fd: int, data: Any) -> int:
        file = os.readlink(f"/proc/self/fd/{fd}")
        if ".safetensors" in file and not any(name in file for name in self.spare):
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in [*folder.rglob("*"), *folder.parent.iterdir()] if leftover_target(p.name))


def _graph(scale: float) -> Graph:
    n = 2 + 2 + 2 + 1
    return Graph(prompt="ab", token_ids=[5, 6], tokens=["a", "b"], n_layers=1,
                 features=torch.tensor([[0, 0, 1], [0, 1, 3]]), activations=torch.ones(2), logit_ids=[7],
                 logit_tokens=["c"], logit_probs=torch.ones(1), adjacency=torch.eye(n) * scale)  # fmt: skip


def _probe(scale: float) -> ProbeResult:
    probe = Probe(SITE, [0, 1], torch.full((1, 8), scale), torch.zeros(1))
    return ProbeResult(sites=[SITE], classes=[0, 1], accuracy={SITE: 0.9}, train_accuracy={SITE: 1.0},
                       cv_mean={SITE: 0.9}, cv_std={SITE: 0.0}, balance={SITE: 0.5}, n_train=4, n_test=2,
                       level="sequence", probes={SITE: probe})  # fmt: skip


def _das(scale: float) -> DASResult:
    return DASResult(site=SITE, positions=[-1], Q_DK=torch.full((8, 1), scale), iia=0.9, train_iia=1.0,
                     full_iia=1.0, base_rate=0.1, logit_diff=2.0)  # fmt: skip


def _vector(v: int, path: Path) -> Path:
    return SteeringVector(SITE, torch.full((8,), float(v))).save(path)


def _sae_of(seed: int) -> Any:
    sae = _sae()
    sae.init_weights(seed)
    return sae


#: name -> (what to save as version ``v`` at ``path``, how to read it back, whether ``path`` is a folder)
WRITERS: dict[str, tuple[Callable[[int, Path], Any], Callable[[Path], Any], bool]] = {
    "SAE.save": (lambda v, p: _sae_of(v).save(p), lambda p: ilab.load_sae(p).W_enc, True),
    "Graph.save": (lambda v, p: _graph(v / 4).save(p), lambda p: Graph.load(p).adjacency, True),
    "SteeringVector.save": (_vector, lambda p: SteeringVector.load(p).direction, False),
    "DASResult.save": (lambda v, p: _das(float(v)).save(p), lambda p: DASResult.load(p).Q_DK, False),
    "ProbeResult.save": (lambda v, p: _probe(float(v)).save(p), lambda p: ProbeResult.load(p).probes[SITE].W_CD, False),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_full_disk_at_a_safetensors_write_is_a_disk_full_error_with_the_old_data_kept(writer, tmp_path, monkeypatch):
    save_as, read, is_folder = WRITERS[writer]
    path = tmp_path / ("out" if is_folder else "out.safetensors")
    save_as(1, path)
    before = read(path)
    patch_atomic(monkeypatch, "os", _FullForSafetensors())
    with pytest.raises(DiskFullError, match=rf"The disk is full: writing '{path}'.*Nothing was replaced"):
        save_as(2, path)
    patch_atomic(monkeypatch, "os", os)
    assert torch.equal(read(path), before), "the old version is intact"
    assert not _leftovers(path if is_folder else tmp_path)
    save_as(2, path)
    assert not torch.equal(read(path), before), "with space again the same call writes the new version"


def test_a_full_disk_at_a_cache_shard_fresh_or_resumed_keeps_every_committed_shard(tmp_path, monkeypatch):
    gpt2 = tiny_model("gpt2")
    reference = gpt2.cache(CORPUS, SITE, tmp_path / "reference", **CACHE)
    path = tmp_path / "store"
    patch_atomic(monkeypatch, "os", _FullForSafetensors())
    with pytest.raises(DiskFullError, match=r"The disk is full: writing .*shard_00000\.safetensors"):
        gpt2.cache(CORPUS, SITE, path, **CACHE)  # fresh: the first shard
    patch_atomic(monkeypatch, "os", _FullForSafetensors("shard_00000"))
    with pytest.raises(DiskFullError, match=r"The disk is full: writing .*shard_00001\.safetensors"):
        gpt2.cache(CORPUS, SITE, path, **CACHE)  # the first shard fits, the second does not
    manifest = (path / "manifest.json").read_bytes()
    shard = (path / "shard_00000.safetensors").read_bytes()
    patch_atomic(monkeypatch, "os", _FullForSafetensors())
    with pytest.raises(DiskFullError, match=r"The disk is full: writing .*shard_00001\.safetensors"):
        gpt2.cache(CORPUS, SITE, path, **CACHE)  # resumed: the next shard
    assert (path / "manifest.json").read_bytes() == manifest and (
        path / "shard_00000.safetensors"
    ).read_bytes() == shard
    patch_atomic(monkeypatch, "os", os)
    done = gpt2.cache(CORPUS, SITE, path, **CACHE)
    assert isinstance(done, ActivationStore) and done.complete and not _leftovers(path)
    assert torch.equal(done.tokens(), reference.tokens())
    assert torch.equal(done.read(SITE), reference.read(SITE))


def test_the_safetensors_writer_lays_files_out_as_the_safetensors_library_does(tmp_path):
    tensors = {"b": torch.randn(3, 4), "a": torch.arange(5), "c": torch.randn(2).bfloat16(), "z": torch.tensor(1.5),
               "m": torch.ones(2, dtype=torch.bool), "e": torch.zeros(0, 3),
               "h": torch.randn(3, 2).half().t()}  # fmt: skip
    write_safetensors(tmp_path / "x.safetensors", tensors, {"format": "x"})
    reference = save({k: v.contiguous() for k, v in tensors.items()}, metadata={"format": "x"})
    assert (tmp_path / "x.safetensors").read_bytes() == reference
    back = load_file(str(tmp_path / "x.safetensors"))
    assert all(torch.equal(back[k], v) for k, v in tensors.items())


def test_a_real_full_disk_saving_an_sae_keeps_the_old_one(tmp_path):
    """On a 2 MB tmpfs (where mounting one is allowed), else on a disk made full for safetensors files."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True)
    try:
        small = _sae_of(1)
        small.save(disk / "sae")
        before = (disk / "sae" / "sae_weights.safetensors").read_bytes()
        big = ilab.SAE.create("topk", d_in=32, d_sae=12_000, k=4, site=SITE)  # about 3 MB of weights
        with pytest.MonkeyPatch.context() as m:
            if mounted.returncode != 0:
                patch_atomic(m, "os", _FullForSafetensors())
            with pytest.raises(DiskFullError, match=r"The disk is full: writing .*sae'"):
                big.save(disk / "sae")
        assert (disk / "sae" / "sae_weights.safetensors").read_bytes() == before
        assert ilab.load_sae(disk / "sae").d_sae == small.d_sae and not _leftovers(disk / "sae")
    finally:
        if mounted.returncode == 0:
            subprocess.run(["umount", str(disk)], check=False)
