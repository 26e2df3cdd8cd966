"""One long job's crash-safety recipe in one place: its folder, inputs, state, token digest, progress and commits.

A long job (caching activations, training SAEs, the feature pass, DAS, planted-memorization training) is a
:class:`ResumableJob`, so it reads as its own logic. The recipe (ARCHITECTURE.md, "Crash safety"):

1. :meth:`~ResumableJob.start` (or :meth:`~ResumableJob.begin` then :meth:`~ResumableJob.load`): the folder
   exists and its leftovers are gone; its state is read, header first, and refused when it was made with other
   ``inputs`` (every differing key named with both values). None the first time.
2. Skip what the state says is done, feeding the tokens skipped to :attr:`~ResumableJob.digest`, then
   :meth:`~ResumableJob.check_corpus`: another corpus is refused whatever its form.
3. :meth:`~ResumableJob.commit`: the data files first (each atomic), then the state: one file, one rename.

The state file is a checkpoint (:func:`~interplab.core.storage.checkpoint.save_state`: one safetensors file with
the inputs and the job's name) unless the job gives its own reader and writer (a store's manifest). Without a
folder a job keeps nothing: :meth:`~ResumableJob.start` gives None and :meth:`~ResumableJob.commit` writes nothing.

Example
-------
>>> job = ResumableJob("train", "ckpt/", {"model": model.fingerprint(), "n_steps": 100})
>>> state = job.start()                                   # None the first time
>>> step = state["step"] if state else 0                  # skip what is done, feeding job.digest
>>> job.check_corpus(state["corpus"] if state else None)
>>> with job.progress(100, step, "train") as bar:
...     while step < 100:
...         step += 1
...         bar.update(1)
...         if job.due(step, every=10, last=100):
...             job.commit({"step": step, "w": w, "corpus": job.digest.record()})
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..checks import check_path
from .checkpoint import TokenDigest, begin, check_inputs, check_tokens, read_state_file, save_state
from .progress import progress_bar
from .readers import in_folder

#: The state file of a job that names none.
STATE_FILE = "checkpoint.safetensors"

#: Reads a state file: the inputs it recorded and the state.
StateReader = Callable[[Path], tuple[Mapping[str, Any], Any]]
#: Writes a state file atomically, given the job's inputs and the state.
StateWriter = Callable[[Path, Mapping[str, Any], Any], object]


class ResumableJob:
    """A long job's folder, recorded inputs, state file, token digest and progress bar.

    ``job`` names it in its state file and in messages; ``folder`` None keeps nothing. ``state_file`` is the
    file in the folder that commits; ``read`` / ``write`` replace the checkpoint format (a store's manifest);
    ``where`` is what messages name (the state file unless given).

    >>> job = ResumableJob("das.fit", "run/", {"k": 1, "lr": 0.01})
    >>> job.start() is None
    True
    """

    def __init__(
        self,
        job: str,
        folder: str | os.PathLike[str] | None,
        inputs: Mapping[str, Any],
        *,
        state_file: str = STATE_FILE,
        read: StateReader | None = None,
        write: StateWriter | None = None,
        where: str | os.PathLike[str] | None = None,
    ) -> None:
        self.job = job
        self.inputs = dict(inputs)
        self.folder = None if folder is None else check_path(f"the {job} folder", folder)
        self.path = None if self.folder is None else self.folder / state_file
        self.where: str | os.PathLike[str] = where if where is not None else (self.path or job)
        self.digest = TokenDigest()
        self._read = read if read is not None else self._read_checkpoint
        self._write = write if write is not None else self._write_checkpoint

    def __repr__(self) -> str:
        return f"ResumableJob({self.job!r}, {str(self.folder) if self.folder else None!r})"

    # ------------------------------------------------------------ start
    def begin(self) -> None:
        """Create the folder (or reuse it) and clean what interrupted writes left there."""
        if self.folder is not None:
            begin(self.folder)

    def load(self) -> Any:
        """The saved state when the state file exists and was made with the same inputs; None when there is none.

        A state of other inputs is refused (:meth:`check_inputs`) and left as it is.
        """
        if self.path is None or not self.path.exists():
            return None
        recorded, state = self._read(in_folder(self.path.parent, self.path.name))
        self.check_inputs(recorded)
        return state

    def start(self) -> Any:
        """:meth:`begin`, then :meth:`load`: the state to resume from, None the first time."""
        self.begin()
        return self.load()

    def check_inputs(self, recorded: Mapping[str, Any], where: str | os.PathLike[str] | None = None) -> None:
        """Refuse inputs recorded by another run that differ from this job's, naming each key with both values."""
        check_inputs(recorded, self.inputs, self.where if where is None else where, self.job)

    def check_corpus(self, recorded: Mapping[str, Any] | None) -> None:
        """Refuse a corpus whose first tokens (fed to :attr:`digest` while skipping) are not the recorded ones."""
        check_tokens(recorded, self.digest, self.where)

    # ------------------------------------------------------------ run
    @property
    def keeps_state(self) -> bool:
        """Whether this job has a folder to keep its state in (else :meth:`commit` writes nothing)."""
        return self.path is not None

    def due(self, step: int, every: int, last: int) -> bool:
        """Whether a commit falls at ``step``: this job keeps a state, and ``step`` is a multiple of ``every``
        or the ``last``."""
        return self.keeps_state and (step % every == 0 or step == last)

    def commit(self, state: Any, *data: Callable[[], object]) -> None:
        """Write the data files (each callable writes one, atomically), then the state: the commit point.

        Nothing is written when the job keeps no folder.
        """
        if self.path is None:
            return
        for write in data:
            write()
        self._write(self.path, self.inputs, state)

    @contextlib.contextmanager
    def progress(
        self, total: int | None, initial: int = 0, desc: str = "", show: Any = True, **style: Any
    ) -> Iterator[Any]:
        """A tqdm bar from ``initial`` (the work already done) to ``total``, closed at the end.

        ``show``: True, False (no bar), or a bar to reuse (a background job's, shown where the job started:
        reset here and left open). ``style``: tqdm's ``unit``, ``unit_scale``, ``leave``.
        """
        with progress_bar(total, initial, desc, show, **style) as bar:
            yield bar

    # ------------------------------------------------------------ the checkpoint format
    def _read_checkpoint(self, path: Path) -> tuple[Mapping[str, Any], Any]:
        return read_state_file(path, self.job)

    def _write_checkpoint(self, path: Path, inputs: Mapping[str, Any], state: Any) -> None:
        save_state(path, self.job, inputs, state)
