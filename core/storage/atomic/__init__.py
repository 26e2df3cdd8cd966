"""Atomic writes: a file or a whole folder is written under a temporary name beside its target, then renamed.

A reader sees the old version or the new one, never half of one. Every writer in interplab goes
through these helpers (``tests/contracts/test_writes.py`` checks it): :func:`atomic_path` (a file written by
any library), :func:`write_bytes` / :func:`write_text` / :func:`write_json`, :func:`write_safetensors`
(every ``.safetensors`` file), :func:`atomic_folder` (a folder swapped in whole) and :func:`make_dirs`.
Files and folders get the permissions the user's umask gives new ones (a temporary file starts private
and is opened up before it is renamed).

Folder swaps (:func:`atomic_folder`) and their readers (:func:`reading`, :func:`reads_folder`) take turns
on the parent folder's lock (:mod:`interplab.core.storage.locks`): a reader never sees the folder
missing or half-swapped, and nothing removes a live writer's temporary folder.

Crash safety. Data reaches the disk (``fsync``) before the rename that publishes it, and the
folder is synced after it, so a kill or a power cut at any instruction leaves either version.
What an interrupted write leaves behind is recognised by name (``.NAME.tmp-*``, ``.NAME.new``,
``.NAME.old``) and never blocks: :func:`clean_leftovers` removes unfinished files and finishes an
interrupted folder swap (:func:`recover`, which the next writer or reader of the folder runs).
A full disk raises :class:`DiskFullError` (:mod:`interplab.core.storage.space`) naming the file and the
space needed, with the old version kept.

Example
-------
>>> with atomic_path(Path("result.npz"), suffix=".npz") as tmp:
...     np.savez(tmp, values=values)
>>> write_json(Path("manifest.json"), {"n_tokens": 0})
>>> with atomic_folder(Path("my_sae")) as tmp:
...     (tmp / "cfg.json").write_text("{}")
"""

from ..space import DiskFullError
from .files import (
    NEW_SUFFIX,
    OLD_SUFFIX,
    STALE_SECONDS,
    TMP_MARK,
    atomic_path,
    clean_stale,
    leftover_target,
    make_dirs,
    remove,
    umask,
    write_bytes,
    write_json,
    write_safetensors,
    write_text,
)
from .folders import atomic_folder, clean_leftovers, reading, reads_folder, recover

__all__ = [
    "NEW_SUFFIX",
    "OLD_SUFFIX",
    "STALE_SECONDS",
    "TMP_MARK",
    "DiskFullError",
    "atomic_folder",
    "atomic_path",
    "clean_leftovers",
    "clean_stale",
    "leftover_target",
    "make_dirs",
    "reading",
    "reads_folder",
    "recover",
    "remove",
    "umask",
    "write_bytes",
    "write_json",
    "write_safetensors",
    "write_text",
]
