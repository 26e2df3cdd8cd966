"""Long remote work as jobs: caching and feature scans on an NDIF model, without blocking the notebook.

A job runs in a background thread and returns at once with a progress bar shown where it was
started. Every NDIF request it makes is submitted without blocking and its id is written to the
job's journal before the job waits for it (:class:`interplab.core.model.remote.Journal`); the work
itself writes through the store or the feature checkpoint as usual. After a kernel restart,
:func:`resume` with the job's id rebuilds the model from the record, polls the request that was in
flight by its NDIF id (it ran on, on the server) and carries on where the files left off.

Records live in ``$INTERPLAB_JOBS`` or ``$INTERPLAB_CACHE/jobs``: ``<id>.json``, ``<id>.requests.json``
(the journal) and, for a feature scan, ``<id>.sae/``.

Example
-------
>>> job = ilab.jobs.cache(model, "default", "blocks.6.hook_resid_post", "acts/", n_tokens=200_000)
>>> job.id, job.state                       # returns at once; the bar moves as shards land
>>> store = job.result()                    # waits
>>> job = ilab.jobs.resume("c0ffee12")      # after a kernel restart
"""

from __future__ import annotations

import json
import os
import threading
import traceback
import uuid
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..data.store import cache_activations
from ..features.compute import feature_data as run_feature_data
from ..loading.embedded import EMBEDDED_NAME
from ..loading.load import load_model
from ..model.model import Model
from ..model.remote import JOURNAL, Journal
from ..saes.base import SAE
from ..saes.io import load_path
from ..storage.atomic import make_dirs, write_json
from ..storage.cache import cache_dir

STATES = ("running", "done", "failed")


def jobs_dir() -> Path:
    """Where job records live: ``$INTERPLAB_JOBS``, or ``$INTERPLAB_CACHE/jobs``."""
    path = Path(os.environ["INTERPLAB_JOBS"]) if os.environ.get("INTERPLAB_JOBS") else cache_dir() / "jobs"
    make_dirs(path)
    return path


class Job:
    """A job running in a background thread; ``result()`` waits for it."""

    def __init__(self, record: dict[str, Any], model: Model, sae: SAE | None = None):
        self.id = record["id"]
        self.record = record
        self.model, self.sae = model, sae
        self.journal = Journal(jobs_dir() / f"{self.id}.requests.json")
        self.error: BaseException | None = None
        self._result: Any = None
        self.bar = tqdm(desc=f"{record['kind']} job {self.id}", unit="tok", unit_scale=True)
        self._thread = threading.Thread(target=self._run, name=f"interplab-job-{self.id}", daemon=True)

    @property
    def state(self) -> str:
        return self.record["state"]

    def _save(self) -> None:
        write_json(jobs_dir() / f"{self.id}.json", self.record)

    def _run(self) -> None:
        JOURNAL.set(self.journal)  # this thread's requests only: the notebook's own traces stay as they are
        args = self.record["args"]
        try:
            if self.record["kind"] == "cache":
                self._result = cache_activations(self.model, args["corpus"], args["sites"], args["path"],
                                                 progress=self.bar, **args["kwargs"])  # fmt: skip
            elif self.sae is None:
                raise ValueError(f"Job {self.id} scans features and needs its SAE.")
            else:
                self._result = run_feature_data(self.sae, self.model, args["texts"], path=args["path"],
                                                progress=self.bar, **args["kwargs"])  # fmt: skip
            self.record["state"] = "done"
        except BaseException as err:  # reported by result(); the thread must not die silently
            self.error = err
            self.record["state"] = "failed"
            self.record["error"] = "".join(traceback.format_exception_only(type(err), err)).strip()
        finally:
            self.bar.refresh()
            self._save()

    def start(self) -> Job:
        self.record["state"] = "running"
        self._save()
        self._thread.start()
        return self

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the job (``timeout`` seconds at most) and return what it made; its error if it failed."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"Job {self.id} is still running after {timeout} s.")
        if self.error is not None:
            raise self.error
        return self._result

    def __repr__(self) -> str:
        return f"Job({self.id!r}, {self.record['kind']}, {self.state}, requests sent={self.journal.sent})"


def _check_remote(model: Model) -> None:
    if model.server is None:
        raise ValueError(
            f"Jobs are for models on an NDIF server (load_model(..., remote=...)); {model.name!r} runs here. "
            "Call model.cache / ilab.feature_data directly."
        )


def _json_ready(name: str, value: Any) -> Any:
    try:
        json.dumps(value)
    except TypeError:
        raise TypeError(
            f"{name} must be a corpus name, a file path or a list of strings for a job (it is written down to "
            f"resume it), got {type(value).__name__}."
        ) from None
    return value


def _new(kind: str, model: Model, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": uuid.uuid4().hex[:8], "kind": kind, "state": "new", "args": args,
        "model": {"name": model.name, "host": model.server.host},
    }  # fmt: skip


def cache(model: Model, corpus: Any, sites: str | list[str], path: str | Path, **kwargs: Any) -> Job:
    """:meth:`Model.cache` of a remote model as a job (same arguments); returns at once.

    >>> job = ilab.jobs.cache(model, "default", "blocks.6.hook_resid_post", "acts/", n_tokens=100_000)
    """
    _check_remote(model)
    args = {"corpus": _json_ready("corpus", corpus), "sites": sites, "path": str(Path(path).resolve()),
            "kwargs": _json_ready("keyword arguments", kwargs)}  # fmt: skip
    model.parse_sites(sites)  # bad input fails here, not in the thread
    return Job(_new("cache", model, args), model).start()


def feature_data(sae: SAE, model: Model, texts: Any, *, path: str | Path, **kwargs: Any) -> Job:
    """:func:`interplab.feature_data` on a remote model as a job (``path`` required: the pass checkpoints there).

    The SAE is saved beside the job's record so that :func:`resume` finds it again.
    """
    _check_remote(model)
    sae.check_fits(model)
    kwargs.setdefault("checkpoint_every", 0.0)  # every batch: a restart loses nothing
    args = {"texts": _json_ready("texts", texts), "path": str(Path(path).resolve()),
            "kwargs": _json_ready("keyword arguments", kwargs)}  # fmt: skip
    record = _new("features", model, args)
    args["sae"] = str(sae.save(jobs_dir() / f"{record['id']}.sae"))
    return Job(record, model, sae).start()


def resume(job_id: str, model: Model | None = None) -> Job:
    """Pick a job up again by its id (after a kernel restart): the request in flight is polled, not sent again.

    ``model`` defaults to the record's model on the record's server (the API key from ``$NDIF_API_KEY``).
    """
    path = jobs_dir() / f"{job_id}.json"
    if not path.exists():
        known = sorted(p.stem for p in jobs_dir().glob("*.json") if "." not in p.stem)
        raise ValueError(f"No job {job_id!r} in {jobs_dir()}; jobs there: {known or 'none'}.")
    record = json.loads(path.read_text())
    if model is None:
        name = record["model"]["name"]
        model = load_model(None if name == EMBEDDED_NAME else name, remote=record["model"]["host"])
    sae = load_path(record["args"]["sae"]) if record["kind"] == "features" else None
    return Job(record, model, sae).start()


def list_jobs() -> list[dict[str, Any]]:
    """Every job record (id, kind, state, model, arguments), newest first."""
    records = [json.loads(p.read_text()) for p in jobs_dir().glob("*.json") if "." not in p.stem]
    return sorted(records, key=lambda r: (jobs_dir() / f"{r['id']}.json").stat().st_mtime, reverse=True)


__all__ = ["Job", "cache", "feature_data", "jobs_dir", "list_jobs", "resume"]
