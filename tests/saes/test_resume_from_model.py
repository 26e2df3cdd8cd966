"""Training straight from a model (no store) resumes where a killed run stopped, with the same result.

The resumed run goes on from the corpus position the checkpoint recorded: restarting from the first document
would train on the first tokens twice and end with other weights than an uninterrupted run.
"""

from __future__ import annotations

import random
from pathlib import Path

import interplab.core.saes.training.trainer as train_mod
import torch
from interplab.core.saes.training.trainer import train_saes

from tests.faults import sigkill_when
from tests.saes.helpers import assert_same_weights
from tests.tiny import WORDS, tiny_model

ROOT = Path(__file__).resolve().parents[2]
_rng = random.Random(0)
CORPUS = [" ".join(_rng.choice(WORDS) for _ in range(40)) for _ in range(120)]
SPECS = [{"arch": "topk", "width": 32, "k": 4}]
KW = {"site": "blocks.1.hook_resid_post", "n_tokens": 64 * 30, "batch_size": 64, "checkpoint_every": 3,
      "progress": False, "seed": 1, "corpus": CORPUS}  # fmt: skip

_CHILD = """
import sys, time
sys.path.insert(0, {root!r})
import torch
torch.set_num_threads({threads})  # the parent's: the same sums, to the bit
import interplab.core.saes.training.trainer as train_mod
from tests.saes.test_resume_from_model import CORPUS, KW, SPECS
from tests.tiny import tiny_model
real = train_mod.train_step
def slow(*args, **kwargs):  # slow enough that the parent kills it mid-run
    time.sleep(0.15)
    return real(*args, **kwargs)
train_mod.train_step = slow
train_mod.train_saes(tiny_model("gpt2"), SPECS, checkpoint_dir={path!r}, **KW)
"""


def test_the_stream_is_the_same_from_any_step():
    model = tiny_model("gpt2")
    full = list(zip(range(20), train_mod._model_stream(model, CORPUS, [KW["site"]], 64, seed=1)))
    for start in (0, 5, 9, 13):
        later = train_mod._model_stream(model, CORPUS, [KW["site"]], 64, seed=1, start_step=start)
        for step, batch in full[start : start + 6]:
            assert torch.equal(next(later)[KW["site"]], batch[KW["site"]]), (start, step)


def test_resume_after_sigkill_gives_the_uninterrupted_weights(tmp_path, monkeypatch):
    reference = train_saes(tiny_model("gpt2"), SPECS, **KW)
    ckpt = tmp_path / "ckpt"
    code = _CHILD.format(root=str(ROOT), path=str(ckpt), threads=torch.get_num_threads())
    checkpoint = ckpt / train_mod.CHECKPOINT
    sigkill_when(
        code,
        lambda: checkpoint.exists() and train_mod.read_checkpoint(checkpoint)["step"] >= 12,
        what="step 12's checkpoint",
    )
    step = train_mod.read_checkpoint(ckpt / train_mod.CHECKPOINT)["step"]
    assert 12 <= step < 30

    model = tiny_model("gpt2")
    rows = []
    real = model.run_sites
    monkeypatch.setattr(model, "run_sites", lambda enc, sites: rows.append(len(enc["input_ids"])) or real(enc, sites))
    resumed = train_saes(model, SPECS, checkpoint_dir=ckpt, **KW)
    assert_same_weights(resumed[0], reference[0])
    # the windows of the buffers already used were skipped, not run again
    windows_per_buffer = -(-8 * 64 // 127)
    total_buffers = -(-30 // (windows_per_buffer * 127 // 64))
    assert sum(rows) < total_buffers * windows_per_buffer
