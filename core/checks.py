"""Argument checks shared by every capability: each names the bad value and what would be valid.

One check per kind of argument, so a message reads the same wherever it is raised:
integers (:func:`check_positive_int`, :func:`check_int`), latent ids (:func:`check_latent`),
texts (:func:`check_texts`, :func:`check_unicode`), one-token answers (:func:`single_token_id`), finite numbers
(:func:`check_number`, :func:`check_float` with bounds) and fractions (:func:`check_fraction`), paths
(:func:`check_path`), keyword options (:func:`check_options`) and devices (:func:`check_device`). Sizes that
would hang have upper bounds (``check_int(..., maximum=)``). The memory a request would take is checked
in :mod:`interplab.core.memory.budget`. Nothing here imports the rest of interplab.

Example
-------
>>> check_positive_int("batch_size", 8)
8
>>> check_latent(5, d_sae=4)
Traceback (most recent call last):
OutOfRangeError: Latent 5 is out of range: latents are 0..3.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any


def check_int(name: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` if it is an integer (not a bool) within ``[minimum, maximum]``, else a ValueError naming it.

    >>> check_int("context_size", 128, minimum=2)
    128
    """
    ok = not isinstance(value, bool)
    if ok:
        try:
            value = operator.index(value)
        except TypeError:
            ok = False
    if ok and (minimum is None or value >= minimum) and (maximum is None or value <= maximum):
        return int(value)
    if minimum is not None and maximum is not None:
        want = f"an integer in {minimum}..{maximum}"
    elif minimum == 1:
        want = "a positive integer"
    elif minimum is not None:
        want = f"an integer >= {minimum}"
    elif maximum is not None:
        want = f"an integer <= {maximum}"
    else:
        want = "an integer"
    raise ValueError(f"{name} must be {want}, got {value!r}.")


def check_positive_int(name: str, value: Any) -> int:
    """``value`` if it is an integer >= 1 (not a bool), else a ValueError naming ``name`` and the value.

    >>> check_positive_int("n_tokens", 0)
    Traceback (most recent call last):
    ValueError: n_tokens must be a positive integer, got 0.
    """
    return check_int(name, value, minimum=1)


class OutOfRangeError(IndexError, ValueError):
    """An index outside its valid range (both an IndexError and a ValueError, so either ``except`` catches it)."""


def check_latent(i: Any, d_sae: int) -> int:
    """``i`` as a latent index of an SAE with ``d_sae`` latents, or a clear TypeError / :class:`OutOfRangeError`."""
    try:
        index = operator.index(i)
    except TypeError:
        raise TypeError(f"A latent id is an integer, got {type(i).__name__}: {i!r}.") from None
    if isinstance(i, bool):
        raise TypeError(f"A latent id is an integer, got a bool: {i!r}.")
    if not 0 <= index < d_sae:
        raise OutOfRangeError(f"Latent {i!r} is out of range: latents are 0..{d_sae - 1}.")
    return index


def check_number(value: Any, what: str = "value") -> float:
    """A finite real number as a float; a TypeError or ValueError naming ``what`` otherwise."""
    import numpy as np

    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{what} must be a number, got {type(value).__name__}: {value!r}.")
    if not math.isfinite(float(value)):
        raise ValueError(f"{what} must be finite, got {value!r}.")
    return float(value)


def check_fraction(name: str, value: Any, low: str = "(", high: str = ")", what: str = "") -> float:
    """A number in the interval ``low`` 0, 1 ``high`` ("(" / ")" leave an end out, "[" / "]" keep it); a
    ValueError naming ``name``, the interval and the value otherwise. ``what`` says what the number is.

    >>> check_fraction("test_fraction", 0.2)
    0.2
    >>> check_fraction("threshold", 1.0, high="]")
    1.0
    """
    x = check_number(value, name)
    inside = (x > 0 if low == "(" else x >= 0) and (x < 1 if high == ")" else x <= 1)
    if not inside:
        raise ValueError(f"{name} {'is ' + what if what else 'must be'} in {low}0, 1{high}, got {value!r}.")
    return x


def check_unicode(what: str, text: str) -> str:
    """``text`` if it is valid Unicode, else a ValueError naming ``what`` and where its lone surrogate is.

    A lone surrogate (``"\\ud800"``: half of a UTF-16 pair, e.g. from bytes decoded with ``surrogateescape``)
    can be neither tokenized nor saved, so every text a user gives is checked here before any work.

    >>> check_unicode("texts[0]", "bad\\ud800label")
    Traceback (most recent call last):
    ValueError: texts[0] is not valid Unicode: character 3 is a lone surrogate '\\ud800' (in 'bad\\ud800label'); ...
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        near = text[max(0, err.start - 30) : err.start + 30]
        raise ValueError(
            f"{what} is not valid Unicode: character {err.start} is a lone surrogate {text[err.start]!r} (in "
            f"{near!r}); text like this can be neither tokenized nor saved. Remove the character, or decode the "
            "bytes it came from with errors='replace'."
        ) from None
    return text


def check_texts(texts: str | Sequence[str]) -> list[str]:
    """Normalise one text or a list of texts; reject empty and non-string input early."""
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, Sequence) or isinstance(texts, bytes):
        raise TypeError(f"texts must be a string or a list of strings, got {type(texts).__name__}")
    texts = list(texts)
    if not texts:
        raise ValueError("texts is empty: give at least one non-empty string.")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is {type(text).__name__} ({text!r}), not a string.")
        if not text.strip():
            raise ValueError(f"texts[{i}] is empty ({text!r}): every text needs at least one token.")
        check_unicode(f"texts[{i}]", text)
    return texts


def check_names(name: str, value: Any, example: str) -> str | list[str]:
    """``value`` as one name (a string) or a list of names; a clear TypeError for anything else (None, a number).

    >>> check_names("sites", None, "'blocks.6.hook_resid_post'")
    Traceback (most recent call last):
    TypeError: sites must be a name or a non-empty list of names, e.g. 'blocks.6.hook_resid_post'; got None.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return list(value)  # each name (and an empty list) is checked where names are parsed
    raise TypeError(f"{name} must be a name or a non-empty list of names, e.g. {example}; got {value!r:.200}.")


def single_token_id(tokenizer: Any, answer: str | int, what: str = "answer") -> int:
    """The id of a one-token answer string (or a checked token id); a clear error showing its tokens otherwise.

    >>> single_token_id(model.tokenizer, " Paris")
    """
    if isinstance(answer, bool):
        raise TypeError(f"{what} must be a string or a token id, got {answer!r}.")
    if isinstance(answer, int):
        vocab = len(tokenizer)
        if not 0 <= answer < vocab:
            raise ValueError(f"{what} token id {answer} is outside the vocabulary (0..{vocab - 1}).")
        return answer
    if not isinstance(answer, str):
        raise TypeError(f"{what} must be a non-empty string or a token id, got {answer!r}.")
    if not answer:
        raise ValueError(f"{what} is an empty string; give a non-empty string or a token id.")
    check_unicode(what, answer)
    ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        pieces = [tokenizer.decode([i]) for i in ids]
        spaced = " " + answer
        hint = "" if answer.startswith(" ") else f" (a word after a space usually needs a leading space: {spaced!r})"
        raise ValueError(f"{what} {answer!r} is {len(ids)} tokens, not one: {pieces}{hint}.")
    if getattr(tokenizer, "unk_token_id", None) is not None and ids[0] == tokenizer.unk_token_id:
        raise ValueError(f"{what} {answer!r} is the unknown token for this tokenizer.")
    return int(ids[0])


def check_float(name: str, value: Any, minimum: float | None = None, maximum: float | None = None,
                above: float | None = None) -> float:  # fmt: skip
    """``value`` as a finite float within ``[minimum, maximum]`` (and ``> above``); a TypeError or ValueError
    naming ``name``, the valid range and the value otherwise (NaN and infinities are never in range).

    >>> check_float("dense_threshold", float("nan"), 0, 1)
    Traceback (most recent call last):
    ValueError: dense_threshold must be finite, got nan.
    """
    x = check_number(value, name)
    low_ok = (minimum is None or x >= minimum) and (above is None or x > above)
    if low_ok and (maximum is None or x <= maximum):
        return x
    parts = [f">= {minimum}" if minimum is not None else "", f"> {above}" if above is not None else "",
             f"<= {maximum}" if maximum is not None else ""]  # fmt: skip
    raise ValueError(f"{name} must be a number {' and '.join(p for p in parts if p)}, got {value!r}.")


def check_path(name: str, value: Any, folder: bool = True) -> Any:
    """``value`` as a ``pathlib.Path`` when it is a string or path (for a ``folder``: not an existing file);
    a TypeError or ValueError naming ``name`` and the value otherwise.

    >>> check_path("path", 123)
    Traceback (most recent call last):
    TypeError: path must be a folder path (a string or pathlib.Path), got int: 123.
    """
    import os
    from pathlib import Path

    what = "a folder path" if folder else "a file path"
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)) or not str(os.fspath(value)):
        kind = type(value).__name__
        raise TypeError(f"{name} must be {what} (a string or pathlib.Path), got {kind}: {value!r:.100}.")
    path = Path(value)
    if folder and path.exists() and not path.is_dir():
        raise ValueError(f"{name}={str(path)!r} is an existing file, not a folder: give a folder path.")
    return path


def check_options(name: str, given: Any, allowed: Sequence[str]) -> None:
    """Refuse keyword arguments ``given`` that are not among ``allowed``, naming them and the valid ones.

    >>> check_options("steering.generate", {"foo_bar": 3}, ["temperature", "top_k"])
    Traceback (most recent call last):
    TypeError: steering.generate got unknown keyword arguments ['foo_bar']; valid ones are ['temperature', 'top_k'].
    """
    import difflib

    unknown = sorted(set(given) - set(allowed))
    if unknown:
        close = [m for u in unknown for m in difflib.get_close_matches(u, allowed, n=3)]
        shown = close if close else sorted(allowed)[:20]
        more = "" if close or len(allowed) <= 20 else f" (and {len(allowed) - 20} more)"
        what = "close valid ones are" if close else "valid ones are"
        raise TypeError(f"{name} got unknown keyword arguments {unknown}; {what} {shown}{more}.")


def check_device(value: Any) -> Any:
    """``value`` as a ``torch.device`` that exists on this machine (``"cuda:7"`` with two GPUs is refused).

    >>> check_device("cpu")
    device(type='cpu')
    """
    import torch

    if not isinstance(value, (str, torch.device)):
        raise TypeError(f"device must be a string such as 'cpu' or 'cuda:0', or a torch.device; got {value!r:.100}.")
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError) as err:
        raise ValueError(f"device={value!r} is not a device ({err}); e.g. 'cpu', 'cuda', 'cuda:0', 'mps'.") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (device.index is not None and device.index >= count):
            have = f"this machine has {count} CUDA device(s)" + (f": cuda:0..cuda:{count - 1}" if count else "")
            raise ValueError(f"device={value!r} does not exist: {have}.")
    elif device.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ValueError(f"device={value!r} does not exist: MPS is not available on this machine.")
    return device
