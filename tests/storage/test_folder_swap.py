"""The folder-swap protocol of core/storage/atomic.py: a save racing a load, in real processes.

One process loops ``sae.save(F)`` while another loops ``ilab.load_sae(F)``; the two versions saved differ in
``d_sae``, so a load that mixed one version's ``cfg.json`` with the other's weights would fail its shape
check. Every load returns one whole version, every save succeeds, and ``F`` holds a complete SAE at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from interplab.core.storage import atomic, locks

import interplab as ilab

ROOT = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import interplab as ilab
    folder, ready, done, n = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
    saes = []
    for seed, d_sae in ((1, 32), (2, 48)):
        sae = ilab.SAE.create("topk", d_in=16, d_sae=d_sae, k=4, site="blocks.0.hook_resid_post")
        sae.init_weights(seed)
        saes.append(sae)
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
    while not folder.exists():
        pass
    loads, failures, widths = 0, [], set()
    ilab.load_sae(folder)
    ready.write_text("ready")
    while not done.exists():
        try:
            widths.add(ilab.load_sae(folder).d_sae)
            loads += 1
        except Exception as err:
            failures.append(f"{type(err).__name__}: {err}")
    print(json.dumps({"loads": loads, "failures": failures[:5], "n_failures": len(failures),
                      "widths": sorted(widths)}))
    """
)


def _run(script: str, *args: object) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_a_load_racing_a_save_sees_a_whole_version_and_the_sae_survives(tmp_path):
    folder, ready, done = tmp_path / "sae", tmp_path / "ready", tmp_path / "done"
    reader = _run(READER, folder, ready, done)
    writer = _run(WRITER, folder, ready, done, 120)
    out_w, err_w = writer.communicate(timeout=570)
    if not done.exists():
        done.write_text("writer died")
    out_r, err_r = reader.communicate(timeout=60)
    assert writer.returncode == 0 and reader.returncode == 0, err_w[-2000:] + err_r[-2000:]
    wrote, read = json.loads(out_w.splitlines()[-1]), json.loads(out_r.splitlines()[-1])
    assert wrote["failures"] == [], wrote["failures"][:5]
    assert read["n_failures"] == 0, read["failures"]
    assert read["loads"] > 0 and set(read["widths"]) <= {32, 48}
    assert sorted(p.name for p in folder.iterdir()) == ["cfg.json", "sae_weights.safetensors"], "the SAE is whole"
    assert ilab.load_sae(folder).d_sae in (32, 48)
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
