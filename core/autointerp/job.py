"""explain_and_score: many latents explained and scored as one resumable job (ARCHITECTURE.md, "Crash safety").

The latents are cut into chunks (each at least two latents: the shuffled baseline is another latent of its chunk).
Each chunk is explained, then scored, then committed: its result as ``chunk-NNNN.json``, then the job's state
(``checkpoint.safetensors``, the number of chunks done). A kill loses at most the chunk under way; a rerun reads the
finished chunks and continues to the same result (greedy answers, one seed per chunk).

Example
-------
>>> ex, scores = ilab.autointerp.explain_and_score(data, range(200), path="autointerp/")   # resumable
>>> scores.summary()
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import check_positive_int
from ..storage.atomic import write_json
from ..storage.readers import Fields, FileError, in_folder, read_json
from ..storage.resumable import ResumableJob
from .clients import chat_client
from .explain import Explanations, check_latents, explain
from .prompts import prompts_with
from .scoring import SCORERS, Scores, score, scores_table

JOB = "autointerp.explain_and_score"
ROW_TEXT = ("scorer", "metric")
ROW_NUMBERS = ("explanation", "shuffled", "constant")


def chunks_of(ids: list[int], size: int) -> list[list[int]]:
    """``ids`` in chunks of ``size`` (at least 2), a last chunk of one latent joined to the one before."""
    size = max(2, size)
    out = [ids[i : i + size] for i in range(0, len(ids), size)]
    if len(out) > 1 and len(out[-1]) == 1:
        last = out.pop()
        out[-1] = out[-1] + last
    return out


def data_digest(data: Any, ids: Sequence[int]) -> str:
    """A hash of the examples of ``ids`` in ``data`` (what the explanations are read from)."""
    digest = hashlib.sha256()
    for name in ("top_tokens", "top_acts", "quantile_tokens", "quantile_acts"):
        digest.update(np.ascontiguousarray(getattr(data, name)[list(ids)]).tobytes())
    return digest.hexdigest()[:16]


def _finite(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _chunk_record(explained: Explanations, scored: Scores) -> dict[str, Any]:
    rows = scored.table.to_dict("records")
    return {
        "texts": {str(k): v for k, v in explained.texts.items()},
        "prompts": {str(k): v for k, v in explained.prompts.items()},
        "rows": [_row_record(r) for r in rows],
    }


def _row_record(row: dict[str, Any]) -> dict[str, Any]:
    return {"latent": int(row["latent"]), "shuffled_from": int(row["shuffled_from"]),
            **{k: str(row[k]) for k in ROW_TEXT}, **{k: _finite(row[k]) for k in ROW_NUMBERS}}  # fmt: skip


def _read_chunk(path: Path, ids: list[int]) -> dict[str, Any]:
    """A committed chunk's record, checked: the texts and prompts of exactly ``ids``, rows of those latents."""
    fields = Fields(path, read_json(path))
    texts, prompts = fields.str_map("texts"), fields.str_map("prompts")
    if sorted(texts) != sorted(ids) or sorted(prompts) != sorted(ids):
        raise FileError(path, "texts", f"holds latents {sorted(texts)[:8]}, not this chunk's {ids[:8]}")
    rows = []
    for n, raw in enumerate(fields.list("rows")):
        row = Fields(path, raw, f"rows[{n}]")
        latent = row.int("latent")
        if latent not in ids:
            raise FileError(path, f"rows[{n}].latent", f"{latent} is not one of this chunk's {ids[:8]}")
        numbers = {k: row.raw(k) for k in ROW_NUMBERS}
        if any(v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))) for v in numbers.values()):
            raise FileError(path, f"rows[{n}]", f"holds a score that is not a number: {numbers}")
        rows.append({"latent": latent, "shuffled_from": row.int("shuffled_from"),
                     **{k: row.str(k) for k in ROW_TEXT},
                     **{k: float("nan") if v is None else float(v) for k, v in numbers.items()}})  # fmt: skip
    return {"texts": texts, "prompts": prompts, "rows": rows}


def explain_and_score(
    data: Any,
    latents: Sequence[int] | int,
    explainer: Any = None,
    *,
    scorer: Any = None,
    scorers: Sequence[str] | str = ("detection", "fuzzing"),
    path: str | os.PathLike[str] | None = None,
    chunk: int = 8,
    variant: str = "default",
    n_examples: int = 8,
    n_score: int = 10,
    threshold: float = 0.3,
    seed: int = 0,
    prompts: Mapping[str, str] | None = None,
    max_new_tokens: int = 30,
    progress: Any = True,
) -> tuple[Explanations, Scores]:
    """Explain ``latents`` of ``data`` and score them (:func:`.explain`, then :func:`.score` per chunk of ``chunk``
    latents), committing each chunk under ``path`` (None: keep nothing) so a rerun continues where a kill stopped.

    ``scorer``: who answers the scorers' questions (default: the explainer). A local model runs each batch of
    prompts with their shared prefix computed once (:mod:`.prefix`). Other arguments as in
    :func:`.explain` (``n_examples``, ``variant``, ``max_new_tokens``) and :func:`.score` (``scorers``,
    ``n_score`` held-out examples, ``seed``). Returns the explanations and the scores of every latent.
    """
    ids = check_latents(data, latents)
    if len(ids) < 2:
        raise ValueError("explain_and_score needs at least 2 latents: the shuffled baseline is another latent's.")
    chunk = check_positive_int("chunk", chunk)
    scorer_list = [scorers] if isinstance(scorers, str) else list(scorers)
    if not scorer_list or any(s not in SCORERS for s in scorer_list):
        raise ValueError(f"scorers={scorers!r} holds an unknown scorer; choose from {list(SCORERS)}.")
    templates = prompts_with(prompts)
    writer = chat_client(explainer, prefix_cache=True)
    judge = writer if scorer is None else chat_client(scorer, prefix_cache=True)
    parts = chunks_of(ids, chunk)
    explain_kw: dict[str, Any] = {"variant": variant, "n_examples": n_examples, "threshold": threshold,
                                  "prompts": templates, "max_new_tokens": max_new_tokens}  # fmt: skip
    score_kw: dict[str, Any] = {"n_examples": n_score, "threshold": threshold, "prompts": templates}
    inputs = {"latents": ids, "chunk": chunk, "scorers": scorer_list, "seed": seed, "data": data_digest(data, ids),
              "explainer": writer.name, "scorer": judge.name, **explain_kw, "n_score": n_score}  # fmt: skip
    job = ResumableJob(JOB, path, inputs)
    state = job.start()
    done = int(state["done"]) if state else 0
    records = [_read_chunk(in_folder(job.folder, _chunk_name(c)), parts[c]) for c in range(done)] if job.folder else []
    with job.progress(len(ids), sum(len(p) for p in parts[:done]), "explain and score", progress, unit="latent") as bar:
        for c in range(done, len(parts)):
            explained = explain(data, parts[c], writer, **explain_kw)
            scored = score(data, explained, scorer_list, judge, seed=seed + c, **score_kw)
            record = _chunk_record(explained, scored)
            records.append(record)
            if job.folder is not None:
                target = job.folder / _chunk_name(c)
                job.commit({"done": c + 1}, functools.partial(write_json, target, record))
            bar.update(len(parts[c]))
    return _assemble(records, writer.name, judge.name, variant, explain_kw)


def _chunk_name(c: int) -> str:
    return f"chunk-{c:04d}.json"


def _assemble(records: list[dict[str, Any]], writer: str, judge: str, variant: str,
              settings: dict[str, Any]) -> tuple[Explanations, Scores]:  # fmt: skip
    texts = {int(k): v for r in records for k, v in r["texts"].items()}
    shown = {int(k): v for r in records for k, v in r["prompts"].items()}
    rows = [{k: float("nan") if v is None else v for k, v in row.items()} for r in records for row in r["rows"]]
    kept = {k: settings[k] for k in ("n_examples", "threshold", "prompts")}
    return Explanations(texts, shown, writer, variant, kept), scores_table(rows, judge)
