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


# ------------------------------------------------------------- grids over image patches (a vision model)
def _vision_first(call: Any) -> Any:
    """``call`` on the tiny CLIP with its forward passes failing: the refusal must come before any work."""
    from tests.tiny import no_forward
    from tests.vision.bad_input import _clip

    def refused_first(c: Ctx) -> Any:
        with no_forward(_clip()):
            return call(c)

    return refused_first


def _vision_grid(clean_shape: tuple[int, ...], corrupt_shape: tuple[int, ...], **kwargs: Any) -> Any:
    import torch

    from tests.vision.bad_input import _clip

    return ilab.patching.grid(_clip(), torch.rand(clean_shape), torch.rand(corrupt_shape), **kwargs)


def _text_model_with_images(c: Ctx) -> Any:
    import torch

    return ilab.patching.grid(c.model, torch.rand(2, 3, 16, 16), torch.rand(2, 3, 16, 16))


ROWS += [
    Row("ilab.patching.grid", _vision_first(lambda c: _vision_grid((2, 3, 16, 16), (2, 3, 8, 8))), V,
        r"clean images \[2, 3, 16, 16\] and corrupted images \[2, 3, 8, 8\] differ in shape.*each \[3, 16, 16\]"),
    Row("ilab.patching.grid", _vision_first(lambda c: _vision_grid((2, 3, 16, 16), (3, 3, 16, 16))), V,
        r"clean images \[2, 3, 16, 16\] and corrupted images \[3, 3, 16, 16\] differ in shape"),
    Row("ilab.patching.grid", before_work(_text_model_with_images), T,
        r"is a text model: patching.grid takes images only for a vision model"),
    Row("ilab.patching.grid", _vision_first(lambda c: _vision_grid((1, 3, 16, 16), (1, 3, 16, 16),
        site="mixer_out")), V, r"site='mixer_out' is not a site a vision tower's grid patches; choose one of"),
    Row("ilab.patching.grid", _vision_first(lambda c: _vision_grid((1, 3, 16, 16), (1, 3, 16, 16),
        metric=ilab.patching.logit_diff(" Mary", " John"))), T, r"scores image embeddings.*got Metric"),
    Row("ilab.patching.grid", _vision_first(lambda c: _vision_grid((1, 3, 16, 16), (1, 3, 16, 16),
        metric=ilab.patching.zero_shot(np.ones((2, 7)), 0, 1))), V,
        r"reads 7-dimensional embeddings; CLIPModel's image embeddings have 24"),
    Row("ilab.patching.zero_shot", lambda c: ilab.patching.zero_shot(np.ones(4), 0), V,
        r"text_embeddings is a finite \[classes, embedding\] matrix; got shape \[4\]"),
    Row("ilab.patching.zero_shot", lambda c: ilab.patching.zero_shot(np.ones((2, 4)), 0, 2), V, r"corrupt_class"),
]  # fmt: skip
EXEMPT: dict[str, str] = {}
EXEMPT["ilab.patching.EmbeddingMetric"] = "a metric built by embedding_cosine or zero_shot; grid checks its output"
EXEMPT["ilab.patching.embedding_cosine"] = "takes no argument"
