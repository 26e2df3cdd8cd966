"""explain_and_score as a resumable job: killed at every file operation it resumes to the uninterrupted result, a
finished job reruns without asking the model anything, other settings are refused, and the bar counts latents."""

from __future__ import annotations

import pandas as pd
import pytest
from interplab.core.autointerp.job import chunks_of
from interplab.core.storage.readers import FileError

import interplab as ilab
from tests.autointerp.planted import WORDS, WordJudge, explanation_of, planted_data
from tests.bars import RecordingBar
from tests.faults import kill_at_every_step


class CountingJudge(WordJudge):
    def __init__(self) -> None:
        self.asked = 0

    def yes_probability(self, conversations):
        self.asked += len(conversations)
        return super().yes_probability(conversations)

    def complete(self, conversations, max_new_tokens):
        self.asked += len(conversations)
        return super().complete(conversations, max_new_tokens)


@pytest.fixture(scope="module")
def planted(smollm2):
    return planted_data(smollm2.tokenizer)


def run(planted, path, judge=None, **kwargs):
    kwargs = {"chunk": 2, "n_score": 4, "progress": False, **kwargs}
    return ilab.autointerp.explain_and_score(planted, range(len(WORDS)), judge or WordJudge(), path=path, **kwargs)


def test_chunks_hold_at_least_two_latents():
    assert chunks_of(list(range(5)), 2) == [[0, 1], [2, 3, 4]]
    assert chunks_of(list(range(4)), 1) == [[0, 1], [2, 3]]
    assert chunks_of([3, 9], 8) == [[3, 9]]


def test_a_kill_at_every_file_operation_resumes_to_the_same_result(planted, tmp_path):
    cheap = {"scorers": "detection", "n_score": 2}
    whole, whole_scores = run(planted, None, **cheap)
    assert whole.texts == {m: explanation_of(w) for m, w in enumerate(WORDS)}
    assert (whole_scores.table["explanation"] == 1.0).all() and whole_scores.table["beats_shuffled"].all()

    def check(result, path):
        explained, scored = result
        assert explained.texts == whole.texts and explained.prompts == whole.prompts
        pd.testing.assert_frame_equal(scored.table, whole_scores.table, check_like=True)
        assert sorted(p.name for p in path.iterdir()) == ["checkpoint.safetensors", "chunk-0000.json",
                                                          "chunk-0001.json"]  # fmt: skip

    assert kill_at_every_step(lambda path: run(planted, path, **cheap), check, tmp_path) > 4


def test_a_finished_job_reruns_without_asking_and_other_settings_are_refused(planted, tmp_path):
    first = CountingJudge()
    run(planted, tmp_path / "job", first)
    again = CountingJudge()
    explained, _ = run(planted, tmp_path / "job", again)
    assert first.asked > 0 and again.asked == 0 and len(explained.texts) == len(WORDS)
    with pytest.raises(ValueError, match="n_score"):
        run(planted, tmp_path / "job", n_score=3)


def test_a_tampered_chunk_is_refused(planted, tmp_path):
    run(planted, tmp_path / "job")
    chunk = tmp_path / "job" / "chunk-0000.json"
    chunk.write_text(chunk.read_text().replace('"latent": 0', '"latent": 3', 1))
    with pytest.raises(FileError, match="latent 3"):
        run(planted, tmp_path / "job")


def test_the_bar_counts_latents(planted):
    bar = RecordingBar()
    run(planted, None, progress=bar)
    assert bar.total == len(WORDS) and bar.n == len(WORDS)
