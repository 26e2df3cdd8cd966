"""The crash-safety helpers of core/storage/atomic/: a split folder swap finished by recover, leftovers."""

from __future__ import annotations

import os

from interplab.core.storage import atomic


def test_a_split_folder_swap_is_finished_by_recover(tmp_path):
    target = tmp_path / "thing"
    with atomic.atomic_folder(target) as work:
        (work / "v").write_text("old")
    # killed after the new folder was complete and the old one moved aside, before the last rename
    new, old = tmp_path / ".thing.new", tmp_path / ".thing.old"
    new.mkdir()
    (new / "v").write_text("new")
    os.rename(target, old)
    (tmp_path / ".thing.tmp-unfinished").mkdir()
    atomic.recover(target)
    assert (target / "v").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["thing"]
    # killed after the old one was moved aside but before the new one was complete: the old one comes back
    os.rename(target, old)
    atomic.recover(target)
    assert (target / "v").read_text() == "new" and not old.exists()


def test_leftover_names_and_cleaning(tmp_path):
    assert atomic.leftover_target(".shard_00001.safetensors.tmp-a1b2") == "shard_00001.safetensors"
    assert atomic.leftover_target(".dash.new") == "dash" and atomic.leftover_target(".dash.old") == "dash"
    assert atomic.leftover_target("shard_00001.safetensors") is None and atomic.leftover_target(".hidden") is None
    (tmp_path / ".a.json.tmp-x").write_text("half")
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / ".keep").write_text("not ours")
    assert atomic.clean_leftovers(tmp_path) == ["a.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".keep", "a.json"]
