"""Bad inputs of ilab.patching: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from interplab.core.memory.budget import MemoryBudgetError
from interplab.core.storage.readers import FileError

import interplab as ilab
from tests.contracts.rows import Ctx, Row, T, V, before_work
from tests.memory.bad_input import under_budget


def _tampered_npz(c: Ctx) -> Path:
    path = c.tmp / "tampered.npz"
    np.savez(path, values=np.zeros((2, 2), np.float32), meta=np.frombuffer(b"{not json", np.uint8))
    return path


def _pairs_of_other_lengths(c: Ctx) -> Any:
    return ilab.patching.grid(c.model, ["the cat"], ["the big dog"], ilab.metrics.prob("on"))


ROWS: list[Row] = [
    Row(
        "ilab.patching.ioi_balanced",
        lambda c: ilab.patching.ioi_balanced(c.model, ["Mary", "Zorro"], ["John"], corruption="flip"),
        V,
        r"io_names: these names are not single tokens after a space for this tokenizer: \['Zorro'\]",
    ),
    Row(
        "ilab.patching.ioi_balanced",
        lambda c: ilab.patching.ioi_balanced(c.model, ["Mary"], ["Mary"], corruption="flip"),
        V,
        r"io_names \['Mary'\] and s_names \['Mary'\] leave no pair of two names",
    ),
    Row(
        "ilab.patching.grid",
        lambda c: ilab.patching.grid(c.model, c.pairs, site="blocks"),
        V,
        "site='blocks' is not one of",
    ),
    Row("ilab.patching.grid", _pairs_of_other_lengths, V, "must have the same number of tokens"),
    Row(
        "ilab.patching.grid",
        lambda c: under_budget("10KB", lambda: ilab.patching.grid(c.model, c.pairs, top_k=10**9)),
        MemoryBudgetError,
        r"patching.grid with top_k=1,000,000,000 \(64 top tokens for each of \d+ cells\) would need .*smaller top_k",
    ),
    Row(
        "ilab.patching.grid", lambda c: ilab.patching.grid(c.model, c.pairs, positions=[9]), V, "Position 9 is outside"
    ),
    Row(
        "ilab.patching.attribution",
        lambda c: ilab.patching.attribution(c.model, c.pairs, sites="x"),
        V,
        r"sites \['x'\] must be among",
    ),
    Row("ilab.patching.attribution", lambda c: ilab.patching.attribution(c.model, c.pairs, steps=0), V, "steps"),
    Row(
        "ilab.patching.grid",
        lambda c: ilab.patching.grid(c.model, c.pairs, progress="yes"),
        T,
        r"progress must be True, False or a progress bar \(a tqdm bar\), got str: 'yes'",
    ),
    Row(
        "ilab.patching.attribution",
        lambda c: ilab.patching.attribution(c.model, c.pairs, progress=None),
        T,
        "progress must be True, False or a progress bar",
    ),
    Row(
        "ilab.patching.latents",
        lambda c: ilab.patching.latents(c.model, c.sae, c.pairs, top=0),
        V,
        "top must be a positive integer, got 0",
    ),
    Row(
        "ilab.patching.ioi", lambda c: ilab.patching.ioi(c.model, templates=["{A}{B}{S} {0}"]), V, r"has fields \['0'\]"
    ),
    Row("ilab.patching.ioi", lambda c: ilab.patching.ioi(c.model, order="CBA"), V, "order='CBA' is not one of"),
    Row(
        "ilab.patching.prompt_pairs",
        lambda c: ilab.patching.prompt_pairs(c.model, ["a"], ["b", "c"], ["x"], ["y"]),
        V,
        "Got 1 clean prompts but 2 corrupt",
    ),
    Row(
        "ilab.patching.single_token_names",
        lambda c: ilab.patching.single_token_names(None),
        T,
        "Give a Model or a tokenizer",
    ),
    Row("ilab.patching.PromptPairs.by_length", lambda c: c.pairs.by_length(None), T, "Give a Model or a tokenizer"),
    Row(
        "ilab.patching.PromptPairs",
        lambda c: ilab.patching.PromptPairs(["a"], ["b"], ["the cat"], ["y"]).logit_diff().bind(c.model.tokenizer, 1),
        V,
        r"answer\[0\] 'the cat' is 2 tokens, not one",
    ),
    Row(
        "ilab.patching.PatchingResult",
        lambda c: ilab.patching.PatchingResult(np.zeros(3), 0.0, 1.0, "resid_pre"),
        V,
        r"values must be 2-D \[rows, cols\], got shape \(3,\)",
    ),
    Row(
        "ilab.patching.PatchingResult.load",
        lambda c: ilab.patching.PatchingResult.load(_tampered_npz(c)),
        FileError,
        r"tampered\.npz': meta is not JSON",
    ),
    Row(
        "ilab.patching.PatchingResult.load",
        lambda c: ilab.patching.PatchingResult.load(c.tmp / "none.npz"),
        FileNotFoundError,
        "No patching result at",
    ),
    Row("ilab.patching.PatchingResult.save", lambda c: c.result.save(c.tmp), IsADirectoryError, "Is a directory"),
    Row("ilab.patching.PatchingResult.top", lambda c: c.result.top(99, 0), V, r"row must be an integer in 0\.\.1"),
    # sizes that would run for minutes are refused before any work
    Row("ilab.patching.ioi", lambda c: ilab.patching.ioi(c.model, n=10**7), V, r"n must be an integer in 1\.\.10000"),
    Row(
        "ilab.patching.attribution",
        before_work(lambda c: ilab.patching.attribution(c.model, c.pairs, steps=10**6)),
        V,
        r"steps must be an integer in 1\.\.1024, got 1000000",
    ),
]
