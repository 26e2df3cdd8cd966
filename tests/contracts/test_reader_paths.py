"""One path rule for every file a reader opens: a file of a folder is read only from inside that folder.

For each reader, one file of a valid folder is replaced by a symlink to an identical copy outside it: the
load is refused naming that file (the copy is valid, so only the path rule can refuse it). A symlink that
stays inside its folder is followed (the control), and so are the Hugging Face cache's links into ``blobs/``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from interplab.core.circuits.graph import Graph
from interplab.core.data.store import ActivationStore
from interplab.core.features import FeatureData, feature_data
from interplab.core.features.labels import labels_path
from interplab.core.saes.releases import member
from interplab.core.storage.readers import FileError, in_folder
from interplab.core.storage.resumable import ResumableJob

import interplab as ilab
from tests.contracts.test_crash_safety import CORPUS, FEATURES, _sae
from tests.tiny import TEXTS, tiny_model


def _link_out(folder: Path, name: str) -> Path:
    """Move ``folder/name`` to a folder beside ``folder`` and leave a symlink to it in its place."""
    outside = folder.parent / f"outside-{folder.name}"
    outside.mkdir(exist_ok=True)
    moved = outside / Path(name).name
    shutil.move(folder / name, moved)
    (folder / name).symlink_to(moved)
    return moved


def _sae_folder(tmp: Path) -> tuple[Path, Callable[[Path], Any]]:
    _sae().save(tmp / "sae")
    return tmp / "sae", ilab.load_sae


def _store(tmp: Path) -> tuple[Path, Callable[[Path], Any]]:
    tiny_model("gpt2").cache(TEXTS, "blocks.0.hook_resid_post", tmp / "store", n_tokens=64, context_size=16,
                             batch_size=4, progress=False)  # fmt: skip
    return tmp / "store", ActivationStore


def _dashboard(tmp: Path) -> tuple[Path, Callable[[Path], Any]]:
    feature_data(_sae(), tiny_model("gpt2"), CORPUS[:6], **FEATURES).save(tmp / "dash")
    return tmp / "dash", FeatureData.load


def _graph(tmp: Path) -> tuple[Path, Callable[[Path], Any]]:
    n = 2 + 2 + 2 + 1  # features, errors (1 layer x 2 positions), tokens, logits
    Graph(prompt="ab", token_ids=[5, 6], tokens=["a", "b"], n_layers=1,
          features=torch.tensor([[0, 0, 1], [0, 1, 3]]), activations=torch.ones(2), logit_ids=[7],
          logit_tokens=["c"], logit_probs=torch.ones(1), adjacency=torch.eye(n) * 0.5).save(tmp / "graph")  # fmt: skip
    return tmp / "graph", Graph.load


def _checkpoint(tmp: Path) -> tuple[Path, Callable[[Path], Any]]:
    job = ResumableJob("sum", tmp / "job", {"chunk": 7})
    job.start()
    job.commit({"total": torch.tensor([3.0])})
    return tmp / "job", lambda folder: ResumableJob("sum", folder, {"chunk": 7}).load()


def _params_npz(tmp: Path) -> tuple[Path, Callable[[Path], Any]]:
    import numpy as np

    folder = tmp / "gemma-scope-res" / "layer_1"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    np.savez(folder / "params.npz", W_enc=rng.normal(size=(8, 16)).astype(np.float32),
             W_dec=rng.normal(size=(16, 8)).astype(np.float32), b_enc=np.zeros(16, np.float32),
             b_dec=np.zeros(8, np.float32), threshold=np.zeros(16, np.float32))  # fmt: skip
    return folder, ilab.load_sae


READERS = {
    "sae_weights.safetensors": (_sae_folder, "sae_weights.safetensors"),
    "cfg.json": (_sae_folder, "cfg.json"),
    "manifest.json": (_store, "manifest.json"),
    "dashboard meta.json": (_dashboard, "meta.json"),
    "dashboard .npy": (_dashboard, "top_acts.npy"),
    "graph.safetensors": (_graph, "graph.safetensors"),
    "graph.json": (_graph, "graph.json"),
    "checkpoint.safetensors": (_checkpoint, "checkpoint.safetensors"),
    "params.npz": (_params_npz, "params.npz"),
}


@pytest.mark.parametrize("case", sorted(READERS))
def test_a_symlink_out_of_its_folder_is_refused(case, tmp_path):
    make, name = READERS[case]
    folder, load = make(tmp_path)
    load(folder)  # the folder as written loads
    moved = _link_out(folder, name)
    with pytest.raises(FileError, match=rf"{name.replace('.', '[.]')}': path leads out of"):
        load(folder)
    (folder / name).unlink()
    shutil.move(moved, folder / name)
    load(folder)  # the same file, inside its folder, loads again


def test_a_symlink_inside_its_folder_is_followed(tmp_path):
    folder, load = _sae_folder(tmp_path)
    (folder / "cfg.json").rename(folder / "cfg-v1.json")
    (folder / "cfg.json").symlink_to("cfg-v1.json")
    assert load(folder).d_sae == 24


def test_labels_beside_an_sae_are_never_kept_through_a_symlink_out(tmp_path):
    folder, _ = _sae_folder(tmp_path)
    sae = ilab.load_sae(folder)
    (tmp_path / "elsewhere.json").write_text("{}")
    (folder / "labels.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(FileError, match=r"labels\.json': path leads out of"):
        labels_path(sae)


def test_a_hub_cache_snapshot_reads_its_blobs_but_nothing_outside_the_repository(tmp_path):
    repo = tmp_path / "models--org--name"
    folder = repo / "snapshots" / "abc123" / "layer_1"
    folder.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "blobs" / "f00d").write_bytes(b"x")
    (folder / "params.safetensors").symlink_to(repo / "blobs" / "f00d")
    assert member(folder, "params.safetensors") == folder / "params.safetensors"
    (tmp_path / "stray").write_bytes(b"x")
    (folder / "config.json").symlink_to(tmp_path / "stray")
    with pytest.raises(FileError, match=r"config\.json': path leads out of"):
        member(folder, "config.json")
    with pytest.raises(FileError, match=r"params\.safetensors': path leads out of"):
        in_folder(folder, "params.safetensors")  # outside the hub's cache layout, the folder is the limit
