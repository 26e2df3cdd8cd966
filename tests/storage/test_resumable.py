"""The crash-safety recipe every long job shares (core/storage/resumable.py): a fresh start, a resume, other
inputs and another corpus refused, and a kill at every file operation of a toy job that writes data files and
commits its state after them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from interplab.core.storage.atomic import leftover_target, write_json, write_text
from interplab.core.storage.checkpoint import differences, save_state
from interplab.core.storage.readers import FileError
from interplab.core.storage.resumable import ResumableJob

from tests.faults import kill_at_every_step

TOKENS = list(range(3, 80))


class Stop(Exception):
    """Ends the toy job early (after some commits), as a user's interrupt would."""


def summing(folder: Path | None, tokens: list[int], chunk: int = 7, stop_after: int | None = None) -> dict[str, Any]:
    """A toy long job: sums ``tokens`` a chunk at a time; each chunk's sum is a data file, then the state commits."""
    job = ResumableJob("sum", folder, {"chunk": chunk})
    state = job.start()
    done = int(state["done"]) if state else 0
    total = state["total"].clone() if state else torch.zeros((), dtype=torch.int64)
    job.digest.update(tokens[:done])  # what the state says is done: skipped, fed to the digest
    job.check_corpus(state["corpus"] if state else None)
    commits = 0
    with job.progress(len(tokens), done, "sum", show=False) as bar:
        for start in range(done, len(tokens), chunk):
            piece = tokens[start : start + chunk]
            job.digest.update(piece)
            total += sum(piece)
            bar.update(len(piece))

            def part(name: str = f"part_{start // chunk:03d}.txt", value: int = sum(piece)) -> None:
                assert folder is not None
                write_text(folder / name, str(value))

            job.commit({"done": start + len(piece), "total": total, "corpus": job.digest.record()}, part)
            commits += 1
            if stop_after is not None and commits == stop_after:
                raise Stop
    parts = {} if folder is None else {p.name: int(p.read_text()) for p in sorted(folder.glob("part_*.txt"))}
    return {"total": int(total), "parts": parts}


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if leftover_target(p.name))


def test_a_fresh_start_creates_the_folder_cleans_leftovers_and_has_no_state(tmp_path):
    folder = tmp_path / "job"
    job = ResumableJob("sum", folder, {"chunk": 7})
    assert not folder.exists() and job.load() is None  # nothing on disk until the job begins
    folder.mkdir()
    (folder / ".checkpoint.safetensors.tmp-x").write_bytes(b"half a state")
    assert job.start() is None and folder.is_dir() and not leftovers(folder)
    assert job.path == folder / "checkpoint.safetensors" and job.keeps_state
    assert job.due(10, every=5, last=12) and job.due(12, every=5, last=12) and not job.due(11, every=5, last=12)


def test_without_a_folder_a_job_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = ResumableJob("sum", None, {"chunk": 7})
    assert job.start() is None and not job.keeps_state and not job.due(10, every=5, last=10)
    job.commit({"done": 1}, lambda: pytest.fail("a job without a folder writes no data file"))
    assert summing(None, TOKENS) == {"total": sum(TOKENS), "parts": {}}
    assert not list(tmp_path.iterdir())


def test_a_resume_continues_where_the_last_commit_stopped(tmp_path):
    folder = tmp_path / "job"
    with pytest.raises(Stop):
        summing(folder, TOKENS, stop_after=3)
    state = ResumableJob("sum", folder, {"chunk": 7}).load()
    assert int(state["done"]) == 21 and int(state["total"]) == sum(TOKENS[:21])
    assert state["corpus"] == {"n_tokens": 21, "sha256": state["corpus"]["sha256"]}
    assert summing(folder, TOKENS) == summing(tmp_path / "whole", TOKENS)


def test_a_checkpoint_records_its_inputs_and_refuses_others(tmp_path):
    opt = {0: {"exp": torch.ones(2)}, "groups": [{"betas": (0.9, 0.99)}]}
    state: dict[str, Any] = {"step": 3, "w": torch.arange(4.0), "opt": opt}
    inputs = {"model": "m", "specs": [{"width": 8}]}
    path = tmp_path / "ck.safetensors"
    save_state(path, "job", inputs, state)
    back = ResumableJob("job", tmp_path, inputs, state_file=path.name).load()
    assert back["step"] == 3 and torch.equal(back["w"], state["w"])
    assert torch.equal(back["opt"][0]["exp"], torch.ones(2))
    assert back["opt"]["groups"][0]["betas"] == (0.9, 0.99)
    assert differences(inputs, {"model": "m", "specs": [{"width": 16}]}) == {"specs[0].width": (8, 16)}
    with pytest.raises(ValueError, match=r"other inputs than this call's \(specs\[0\]\.width: 8 there, 16 now\)"):
        ResumableJob("job", tmp_path, {"model": "m", "specs": [{"width": 16}]}, state_file=path.name).load()
    with pytest.raises(FileError, match="job is a checkpoint of 'job', not of 'other'"):
        ResumableJob("other", tmp_path, inputs, state_file=path.name).load()
    assert ResumableJob("job", tmp_path, inputs, state_file="none.safetensors").load() is None
    with pytest.raises(ValueError, match=r"'.*ck\.safetensors' was made with other inputs than this call's \(a: 1"):
        ResumableJob("job", tmp_path, {"a": 2}, state_file=path.name).check_inputs({"a": 1})


def test_other_inputs_are_refused_naming_both_values_and_the_state_is_kept(tmp_path):
    folder = tmp_path / "job"
    with pytest.raises(Stop):
        summing(folder, TOKENS, stop_after=2)
    before = (folder / "checkpoint.safetensors").read_bytes()
    refused = r"job.checkpoint\.safetensors' was made with other inputs than this call's \(chunk: 7 there, 5 now\)"
    with pytest.raises(ValueError, match=refused + "; resuming this sum would mix them"):
        summing(folder, TOKENS, chunk=5)
    assert (folder / "checkpoint.safetensors").read_bytes() == before


def test_another_corpus_is_refused_by_its_tokens(tmp_path):
    folder = tmp_path / "job"
    with pytest.raises(Stop):
        summing(folder, TOKENS, stop_after=2)
    other = [*TOKENS[:13], 0, *TOKENS[14:]]  # one token differs among the 14 done
    with pytest.raises(ValueError, match=r"job.checkpoint\.safetensors' was made from another corpus: the first 14 "
                                         r"tokens of this call's corpus are not the ones it used"):  # fmt: skip
        summing(folder, other)
    assert summing(folder, TOKENS) == summing(tmp_path / "whole", TOKENS)  # the same corpus goes on


def test_the_job_survives_a_kill_at_every_file_operation(tmp_path):
    reference = summing(tmp_path / "reference", TOKENS)
    assert reference["total"] == sum(TOKENS) and len(reference["parts"]) == 11

    def check(result: dict[str, Any], path: Path) -> None:
        assert result == reference
        assert sorted(p.name for p in path.iterdir()) == ["checkpoint.safetensors", *reference["parts"]]
        assert not leftovers(path), leftovers(path)

    n = kill_at_every_step(lambda p: summing(p, TOKENS), check, tmp_path, twice=True)
    assert n > 11 * 8  # every write of each data file and each state was a kill point


def test_a_job_may_keep_its_state_in_its_own_format(tmp_path):
    """A store's manifest: JSON, its inputs among its fields; messages name the folder."""

    def read(file: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        manifest = json.loads(file.read_text())
        return {"model": manifest["model"]}, manifest

    def write(file: Path, inputs: Any, manifest: dict[str, Any]) -> None:
        write_json(file, manifest)

    folder = tmp_path / "store"
    job = ResumableJob("store", folder, {"model": "a"}, state_file="manifest.json", read=read, write=write,
                       where=folder)  # fmt: skip
    assert job.start() is None
    job.commit({"model": "a", "n": 1}, lambda: write_text(folder / "shard.txt", "x"))
    assert job.load() == {"model": "a", "n": 1} and (folder / "shard.txt").read_text() == "x"
    other = ResumableJob("store", folder, {"model": "b"}, state_file="manifest.json", read=read, write=write,
                         where=folder)  # fmt: skip
    with pytest.raises(
        ValueError, match=rf"^'{folder}' was made with other inputs than this call's \(model: 'a' there"
    ):
        other.start()


def test_progress_counts_from_the_work_done_and_reuses_a_given_bar(tmp_path):
    class Bar:
        def __init__(self) -> None:
            self.total: int | None = None
            self.n, self.closed = 0, False

        def reset(self, total: int | None = None) -> None:
            self.total, self.n = total, 0

        def update(self, n: int = 1) -> None:
            self.n += n

        def close(self) -> None:
            self.closed = True

    job = ResumableJob("sum", None, {})
    given = Bar()
    with job.progress(100, 40, "sum", show=given) as bar:
        assert bar is given and (given.total, given.n) == (100, 40)
        bar.update(5)
    assert given.n == 45 and not given.closed  # a background job's bar stays open for what follows
    with job.progress(10, 4, "sum", show=False) as own:
        assert own.n == 4 and own.total == 10
    with pytest.raises(KeyError), job.progress(10, 0, "sum", show=False) as own:
        raise KeyError("the bar is closed whatever ends the work")
