"""The pieces of the crash-safety contract: state files, recorded inputs, token digests, refused mismatches.

:class:`interplab.core.storage.resumable.ResumableJob` puts them together for every long job:

* :func:`begin`: a job's folder exists and what interrupted writes left there is gone
  (:func:`interplab.core.storage.atomic.clean_leftovers`); leftovers never block a resume.
* :func:`check_inputs`: the inputs a state was made with (model and weights, corpus, store, SAE, settings, as
  JSON) against this call's; a difference is refused naming every key with both values, before any work.
* :class:`TokenDigest` and :func:`check_tokens`: a running sha256 of the tokens a run used (the same however
  they are chunked), recorded with each state and compared while a resume skips them, so another corpus is
  refused whatever form it takes (a list, a file, a generator).
* :func:`save_state` / :func:`read_state_file`: a job's state as one safetensors file whose metadata holds the
  JSON skeleton, its inputs and the job name; written last, after the data files it refers to, in one rename
  (a kill leaves the previous state or the new one); read header first (names, dtypes and shapes against the
  file size and the memory budget), then the tensors; nothing is unpickled.

Example
-------
>>> folder = begin("ckpt/")                                   # created, leftovers cleaned
>>> save_state(folder / "checkpoint.safetensors", "train", {"n_tokens": 10_000}, {"step": 10, "weights": w})
>>> inputs, state = read_state_file(folder / "checkpoint.safetensors", "train")
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .atomic import clean_leftovers, make_dirs, write_safetensors
from .readers import FileError, parse_json, read_safetensors

FORMAT = "interplab-checkpoint"
VERSION = 1
_TENSOR, _DICT, _TUPLE = "$tensor", "$dict", "$tuple"


def begin(folder: str | os.PathLike[str]) -> Path:
    """Create a job's folder (or reuse it) and clean what interrupted writes left there."""
    folder = make_dirs(folder)
    clean_leftovers(folder)
    return folder


# --------------------------------------------------------------------- inputs
def differences(recorded: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The values that differ, by path: ``{"specs[0].width": (32, 64)}`` (a missing key counts as None)."""
    out: dict[str, tuple[Any, Any]] = {}
    _diff(_jsonable(dict(recorded)), _jsonable(dict(wanted)), "", out)
    return out


def _diff(a: Any, b: Any, path: str, out: dict[str, tuple[Any, Any]]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in dict.fromkeys([*a, *b]):
            _diff(a.get(k), b.get(k), f"{path}.{k}" if path else str(k), out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out[path] = (a, b)


def _jsonable(value: Any) -> Any:
    """Compare values as JSON would store them (tuples are lists, int keys are strings)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_inputs(
    recorded: Mapping[str, Any], wanted: Mapping[str, Any], where: str | os.PathLike[str], job: str
) -> None:
    """Refuse to resume ``job`` from ``where`` when its recorded inputs differ from this call's.

    The message names each key that differs, with both values.
    """
    diff = differences(recorded, wanted)
    if diff:
        parts = "; ".join(f"{k}: {_short(a)} there, {_short(b)} now" for k, (a, b) in diff.items())
        raise ValueError(
            f"{str(where)!r} was made with other inputs than this call's ({parts}); resuming this {job} would mix "
            "them: use another folder, or delete this one to start over."
        )


class TokenDigest:
    """A running sha256 of token ids in order, the same however they are chunked.

    >>> d = TokenDigest(); d.update([1, 2]); d.update([3]); d.hexdigest() == TokenDigest.of([1, 2, 3])
    True
    """

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.n_tokens = 0

    def update(self, ids: Any) -> None:
        arr = np.ascontiguousarray(ids.cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids),
                                   dtype="<i8").ravel()  # fmt: skip
        self._hash.update(arr.tobytes())
        self.n_tokens += int(arr.size)

    def hexdigest(self) -> str:
        return self._hash.copy().hexdigest()

    def record(self) -> dict[str, Any]:
        """What a checkpoint keeps: ``{"n_tokens": ..., "sha256": ...}``."""
        return {"n_tokens": self.n_tokens, "sha256": self.hexdigest()}

    @staticmethod
    def of(ids: Iterable[Any]) -> str:
        d = TokenDigest()
        d.update(list(ids))
        return d.hexdigest()


def check_tokens(recorded: Mapping[str, Any] | None, digest: TokenDigest, where: str | os.PathLike[str]) -> None:
    """Refuse a resume whose corpus does not start with the tokens the recorded run used."""
    if not recorded:
        return
    if digest.n_tokens != recorded.get("n_tokens") or digest.hexdigest() != recorded.get("sha256"):
        raise ValueError(
            f"{str(where)!r} was made from another corpus: the first {recorded.get('n_tokens')} tokens of this "
            f"call's corpus are not the ones it used (read {digest.n_tokens}). Resuming would mix two corpora: "
            "give the same corpus, use another folder, or delete this one to start over."
        )


# ---------------------------------------------------------------------- state
def _flatten(value: Any, prefix: str, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        key = prefix or "value"
        tensors[key] = value.detach().to("cpu").contiguous()
        return {_TENSOR: key}
    if isinstance(value, Mapping):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: _flatten(v, f"{prefix}.{k}" if prefix else k, tensors) for k, v in value.items()}
        return {_DICT: [[k, _flatten(v, f"{prefix}.{k}", tensors)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {_TUPLE: [_flatten(v, f"{prefix}.{i}", tensors) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_flatten(v, f"{prefix}.{i}", tensors) for i, v in enumerate(value)]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"Checkpoint state at {prefix!r} is a {type(value).__name__}; use tensors and JSON values.")


def _unflatten(value: Any, tensors: dict[str, torch.Tensor], file: Path) -> Any:
    if isinstance(value, dict):
        if set(value) == {_TENSOR}:
            key = value[_TENSOR]
            if key not in tensors:
                raise FileError(file, key, "is named in the state but the file holds no such tensor")
            return tensors[key]
        if set(value) == {_DICT}:
            return {k: _unflatten(v, tensors, file) for k, v in value[_DICT]}
        if set(value) == {_TUPLE}:
            return tuple(_unflatten(v, tensors, file) for v in value[_TUPLE])
        return {k: _unflatten(v, tensors, file) for k, v in value.items()}
    if isinstance(value, list):
        return [_unflatten(v, tensors, file) for v in value]
    return value


def save_state(path: str | os.PathLike[str], job: str, inputs: Mapping[str, Any], state: Any) -> Path:
    """Write a job's state (nested dicts, lists, tuples of tensors and JSON values) as one file, atomically.

    The file is safetensors: tensors by their path in ``state`` (``opts.0.state.3.exp_avg``), and
    metadata ``format``, ``version``, ``job``, ``inputs`` and the JSON skeleton of ``state``.
    """
    tensors: dict[str, torch.Tensor] = {}
    skeleton = _flatten(state, "", tensors)
    metadata = {
        "format": FORMAT,
        "version": str(VERSION),
        "job": job,
        "inputs": json.dumps(inputs, allow_nan=False, default=str),
        "state": json.dumps(skeleton, allow_nan=False),
    }
    return write_safetensors(path, tensors, metadata)


def read_state_file(path: str | os.PathLike[str], job: str) -> tuple[dict[str, Any], Any]:
    """The recorded inputs and the state of a checkpoint file, validated (header first, then tensors)."""
    path = Path(path)
    header, tensors = read_safetensors(path)
    meta = header.metadata
    if meta.get("format") != FORMAT:
        raise FileError(path, "format", f"is {meta.get('format')!r}, not an interplab checkpoint ({FORMAT!r})")
    if meta.get("job") != job:
        raise FileError(path, "job", f"is a checkpoint of {meta.get('job')!r}, not of {job!r}")
    inputs = parse_json(meta.get("inputs", ""), path, "inputs")
    skeleton = parse_json(meta.get("state", ""), path, "state")
    if not isinstance(inputs, dict):
        raise FileError(path, "inputs", "is not a JSON object")
    return inputs, _unflatten(skeleton, tensors, path)


def optimizer_state(opt: torch.optim.Optimizer) -> dict[str, Any]:
    """An optimizer's per-parameter state in a checkpoint's form (string keys; the hyperparameters are the job's).

    >>> state = {"step": step, "optimizer": optimizer_state(opt)}
    """
    return {str(k): dict(v) for k, v in opt.state_dict()["state"].items()}


def load_optimizer_state(opt: torch.optim.Optimizer, saved: Mapping[str, Any]) -> None:
    """Put :func:`optimizer_state`'s ``saved`` back into ``opt``.

    >>> load_optimizer_state(opt, state["optimizer"])
    """
    full = opt.state_dict()
    full["state"] = {int(k): v for k, v in saved.items()}
    opt.load_state_dict(full)
