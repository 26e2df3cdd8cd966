"""The folder-swap protocol of core/storage/atomic/folders.py: a save racing a load, in real processes.

One process loops ``sae.save(F)`` while another loops ``ilab.load_sae(F)`` (and the same for attribution graphs);
the two versions saved differ in width, so a load that mixed one version's ``cfg.json`` with the other's weights
would fail its shape check. Every load returns one whole version, every save succeeds, and ``F`` holds a
complete folder at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from interplab.core.circuits.graph import Graph
from interplab.core.storage import atomic, locks

import interplab as ilab

ROOT = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import interplab as ilab
    folder, ready, done, n = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
    exec(sys.argv[5])  # the kind's versions and width()
    saes = versions()
    saes[0].save(folder)
    while not ready.exists():  # the reader is loading: start racing it
        time.sleep(0.01)
    failures = []
    for i in range(n):
        try:
            saes[i % 2].save(folder)
        except Exception as err:
            failures.append(f"{type(err).__name__}: {err}")
    done.write_text("done")
    print(json.dumps({"saves": n, "failures": failures}))
    """
)

READER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import interplab as ilab
    folder, ready, done = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    exec(sys.argv[4])  # the kind's versions and width()
    while not folder.exists():
        pass
    loads, failures, widths = 0, [], set()
    width(folder)
    ready.write_text("ready")
    while not done.exists():
        try:
            widths.add(width(folder))
            loads += 1
        except Exception as err:
            failures.append(f"{type(err).__name__}: {err}")
    print(json.dumps({"loads": loads, "failures": failures[:5], "n_failures": len(failures),
                      "widths": sorted(widths)}))
    """
)


#: Per swapped-folder kind: two versions of different widths (so a mix of the two fails its shape checks), and
#: the width of what a folder loads as.
KINDS = {
    "SAE": textwrap.dedent(
        """
        def versions():
            out = []
            for seed, d_sae in ((1, 32), (2, 48)):
                sae = ilab.SAE.create("topk", d_in=16, d_sae=d_sae, k=4, site="blocks.0.hook_resid_post")
                sae.init_weights(seed)
                out.append(sae)
            return out

        def width(folder):
            return ilab.load_sae(folder).d_sae
        """
    ),
    "Graph": textwrap.dedent(
        """
        import torch
        from interplab.core.circuits.graph import Graph

        def versions():
            def graph(n_f):
                n = n_f + 2 + 2 + 1
                return Graph(prompt="ab", token_ids=[5, 6], tokens=["a", "b"], n_layers=1,
                             features=torch.tensor([[0, 0, i] for i in range(n_f)]), activations=torch.ones(n_f),
                             logit_ids=[7], logit_tokens=["c"], logit_probs=torch.ones(1), adjacency=torch.eye(n))
            return [graph(32), graph(48)]

        def width(folder):
            return Graph.load(folder).n_features
        """
    ),
}


def _run(script: str, *args: object) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_load_racing_a_save_sees_a_whole_version_and_the_folder_survives(kind, tmp_path):
    folder, ready, done = tmp_path / "saved", tmp_path / "ready", tmp_path / "done"
    reader = _run(READER, folder, ready, done, KINDS[kind])
    writer = _run(WRITER, folder, ready, done, 120, KINDS[kind])
    out_w, err_w = writer.communicate(timeout=570)
    if not done.exists():
        done.write_text("writer died")
    out_r, err_r = reader.communicate(timeout=60)
    assert writer.returncode == 0 and reader.returncode == 0, err_w[-2000:] + err_r[-2000:]
    wrote, read = json.loads(out_w.splitlines()[-1]), json.loads(out_r.splitlines()[-1])
    assert wrote["failures"] == [], wrote["failures"][:5]
    assert read["n_failures"] == 0, read["failures"]
    assert read["loads"] > 0 and set(read["widths"]) <= {32, 48}
    files = {"SAE": ["cfg.json", "sae_weights.safetensors"], "Graph": ["graph.json", "graph.safetensors"]}[kind]
    assert sorted(p.name for p in folder.iterdir()) == files, "the folder is whole"
    loaded = ilab.load_sae(folder).d_sae if kind == "SAE" else Graph.load(folder).n_features
    assert loaded in (32, 48)
    assert [p.name for p in tmp_path.iterdir() if atomic.leftover_target(p.name)] == []


def test_a_reader_leaves_a_live_writers_temporary_folder_alone(tmp_path):
    """A writer's unfinished folder is its own until it dies: readers and other writers never remove it."""
    target = tmp_path / "thing"
    with atomic.atomic_folder(target) as work:
        (work / "v").write_text("old")
    live = tmp_path / ".thing.tmp-live"
    live.mkdir()
    (live / "v").write_text("half written")
    owner = locks.own_folder(live)
    dead = tmp_path / ".thing.tmp-dead"
    dead.mkdir()
    try:
        with atomic.reading(target) as found:
            assert (found / "v").read_text() == "old"
        atomic.recover(target)
        with atomic.atomic_folder(target) as work:
            (work / "v").write_text("new")
        assert (live / "v").read_text() == "half written", "a live writer's folder is kept"
        assert not dead.exists(), "an abandoned one is removed"
    finally:
        owner.release()
    atomic.recover(target)
    assert not live.exists() and (target / "v").read_text() == "new"


def test_a_reader_finishes_a_swap_a_killed_writer_left_split(tmp_path):
    """Killed between moving the old version aside and putting the new one in place: the reader sees the new."""
    target = tmp_path / "thing"
    with atomic.atomic_folder(target) as work:
        (work / "v").write_text("old")
    new = tmp_path / ".thing.new"
    new.mkdir()
    (new / "v").write_text("new")
    os.rename(target, tmp_path / ".thing.old")
    with atomic.reading(target) as found:
        assert (found / "v").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thing"]
