"""Prompt pairs for patching: an IOI generator and a generic builder, checked against a tokenizer.

Every pair is a clean prompt, a corrupted prompt of the same number of tokens, and the answer
and wrong-answer tokens the metric compares. Names and answers must be single tokens (with
their leading space); a clear error says which are not.

Example
-------
>>> pairs = ilab.patching.ioi(model, n=8, seed=0)
>>> pairs.clean[0], pairs.corrupt[0], pairs.answers[0], pairs.wrong[0]
('When Mary and John went to the store, John gave a drink to', 'When Anna and Paul went ...', ' Mary', ' John')
>>> result = ilab.patching.grid(model, pairs)          # metric defaults to pairs.logit_diff()
"""

from __future__ import annotations

import random
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..checks import check_int, single_token_id
from ..readout.metrics import Metric, logit_diff

#: IOI templates: {A} and {B} are introduced, {S} repeats the subject; the answer is the other name.
IOI_TEMPLATES = (
    "When{A} and{B} went to the store,{S} gave a drink to",
    "When{A} and{B} went to the park,{S} gave a ball to",
    "After{A} and{B} went to the market,{S} handed a bag to",
    "While{A} and{B} were at the house,{S} gave a key to",
    "Then,{A} and{B} went to the school.{S} gave a book to",
)

#: Common first names; the ones that are not single tokens for a tokenizer are left out.
NAMES = (
    "Mary", "John", "Anna", "Paul", "James", "Sarah", "David", "Laura", "Michael", "Emma",
    "Tom", "Lisa", "Mark", "Kate", "Peter", "Alice", "Robert", "Jane", "Daniel", "Susan",
    "George", "Linda", "Richard", "Karen", "Steven", "Helen", "Chris", "Rachel", "Eric", "Amy",
)  # fmt: skip

#: The most prompt pairs one call builds (a patching grid over more would run for hours).
MAX_PAIRS = 10_000
ORDERS = ("ABBA", "BABA", "mixed")
CORRUPTIONS = ("abc", "flip")


@dataclass
class PromptPairs:
    """Clean and corrupted prompts with the answer and wrong-answer token of each pair."""

    clean: list[str]
    corrupt: list[str]
    answers: list[str]
    wrong: list[str]

    def __len__(self) -> int:
        return len(self.clean)

    def logit_diff(self) -> Metric:
        """``logit_diff(answers, wrong)``, one answer per pair."""
        return logit_diff(self.answers, self.wrong)

    def __getitem__(self, index: int | slice) -> PromptPairs:
        idx = index if isinstance(index, slice) else slice(index, index + 1 if index != -1 else None)
        return PromptPairs(self.clean[idx], self.corrupt[idx], self.answers[idx], self.wrong[idx])

    def by_length(self, tokenizer: Any) -> dict[int, PromptPairs]:
        """Split into groups whose prompts have the same number of tokens (a grid needs one length)."""
        tokenizer = _tokenizer(tokenizer)
        groups: dict[int, list[int]] = {}
        for i, text in enumerate(self.clean):
            groups.setdefault(len(tokenizer(text)["input_ids"]), []).append(i)
        return {
            n: PromptPairs(*([getattr(self, f)[i] for i in idx] for f in ("clean", "corrupt", "answers", "wrong")))
            for n, idx in groups.items()
        }

    def __repr__(self) -> str:
        first = f", first={self.clean[0]!r} -> {self.answers[0]!r}" if self.clean else ""
        return f"PromptPairs({len(self)} pairs{first})"


def _tokenizer(model_or_tokenizer: Any) -> Any:
    tok = getattr(model_or_tokenizer, "tokenizer", model_or_tokenizer)
    if tok is None or not callable(tok):
        raise TypeError(f"Give a Model or a tokenizer, got {type(model_or_tokenizer).__name__}.")
    return tok


def single_token_names(model_or_tokenizer: Any, names: Sequence[str] = NAMES) -> list[str]:
    """The names (without leading space) that are one token when written after a space."""
    tok = _tokenizer(model_or_tokenizer)
    return [n for n in names if _is_single(tok, n)]


def _is_single(tok: Any, name: str) -> bool:
    ids = tok(" " + name, add_special_tokens=False)["input_ids"]
    unk = getattr(tok, "unk_token_id", None)
    return len(ids) == 1 and (unk is None or ids[0] != unk)


def ioi(
    model_or_tokenizer: Any,
    n: int = 8,
    templates: Sequence[str] | None = None,
    order: str = "mixed",
    corruption: str = "abc",
    names: Sequence[str] | None = None,
    seed: int = 0,
) -> PromptPairs:
    """Indirect-object-identification prompt pairs.

    ``order``: "ABBA" (IO first), "BABA" (subject first) or "mixed" (alternating).
    ``corruption``: "abc" replaces the three names with three other names (the standard
    ABC corruption); "flip" repeats the indirect object instead of the subject, so the
    corrupted prompt points at the other name. The metric is ``logit_diff(IO, S)``.
    ``templates`` default to the first of :data:`IOI_TEMPLATES` so every prompt has the same
    length; prompts from several templates can be split with :meth:`PromptPairs.by_length`.

    >>> pairs = ilab.patching.ioi(model, n=4, order="BABA", corruption="flip")
    """
    tok = _tokenizer(model_or_tokenizer)
    check_int("n", n, 1, MAX_PAIRS)
    if order not in ORDERS:
        raise ValueError(f"order={order!r} is not one of {ORDERS}.")
    if corruption not in CORRUPTIONS:
        raise ValueError(f"corruption={corruption!r} is not one of {CORRUPTIONS}.")
    if isinstance(templates, str):
        templates = [templates]
    templates = list(templates) if templates is not None else [IOI_TEMPLATES[0]]
    if not templates:
        raise ValueError("templates is empty: give at least one template with {A}, {B} and {S}.")
    for t in templates:
        check_template(t)
    if names is None:
        pool = single_token_names(tok)
    else:
        pool = [str(x).strip() for x in names]
        bad = [x for x in pool if not _is_single(tok, x)]
        if bad:
            raise ValueError(f"These names are not single tokens after a space for this tokenizer: {bad}.")
    need = 5 if corruption == "abc" else 2
    if len(set(pool)) < need:
        raise ValueError(f"IOI needs at least {need} distinct single-token names; got {sorted(set(pool))}.")
    pool = sorted(set(pool), key=pool.index)
    rng = random.Random(seed)
    out = PromptPairs([], [], [], [])
    for i in range(n):
        template = templates[i % len(templates)]
        io_name, s_name, *fresh = rng.sample(pool, need)
        this_order = order if order != "mixed" else ORDERS[i % 2]
        first, second = (io_name, s_name) if this_order == "ABBA" else (s_name, io_name)
        out.clean.append(_fill(template, first, second, s_name))
        if corruption == "abc":
            c1, c2, c3 = fresh[:3]
            out.corrupt.append(_fill(template, c1, c2, c3))
        else:
            out.corrupt.append(_fill(template, first, second, io_name))
        out.answers.append(" " + io_name)
        out.wrong.append(" " + s_name)
    return out


#: The names of :func:`ioi_balanced`'s two roles: seven each, both genders in each.
IO_NAMES = ("Mary", "Paul", "Anna", "James", "Laura", "Tom", "Alice")
S_NAMES = ("John", "Sarah", "David", "Emma", "Mark", "Lisa", "Peter")


def ioi_balanced(
    model_or_tokenizer: Any,
    io_names: Sequence[str] = IO_NAMES,
    s_names: Sequence[str] = S_NAMES,
    templates: Sequence[str] | None = None,
    corruption: str = "abc",
    seed: int = 0,
) -> PromptPairs:
    """IOI prompt pairs over a handful of names per role: every IO name x subject name (never the same) x order
    (ABBA, BABA) x template, shuffled by ``seed``, so each name and order has many prompts (7 x 7 x 2 x 2 = 196
    by default, ``templates`` the first two of :data:`IOI_TEMPLATES`). ``corruption`` as in :func:`ioi` (its
    fresh names are drawn from :data:`NAMES`).

    >>> pairs = ilab.patching.ioi_balanced(model)            # 196 pairs
    >>> fit, held = ilab.das.split_ioi(pairs, held_out=0.25)
    """
    tok = _tokenizer(model_or_tokenizer)
    if corruption not in CORRUPTIONS:
        raise ValueError(f"corruption={corruption!r} is not one of {CORRUPTIONS}.")
    templates = [templates] if isinstance(templates, str) else list(templates or IOI_TEMPLATES[:2])
    if not templates:
        raise ValueError("templates is empty: give at least one template with {A}, {B} and {S}.")
    for t in templates:
        check_template(t)
    roles = {}
    for role, given in (("io_names", io_names), ("s_names", s_names)):
        if isinstance(given, str) or not given:
            raise ValueError(f"{role} must be a non-empty list of names, got {given!r}.")
        names = list(dict.fromkeys(str(x).strip() for x in given))
        bad = [x for x in names if not _is_single(tok, x)]
        if bad:
            raise ValueError(f"{role}: these names are not single tokens after a space for this tokenizer: {bad}.")
        roles[role] = names
    combos = [(io, s, order, t) for io in roles["io_names"] for s in roles["s_names"] if io != s
              for order in ("ABBA", "BABA") for t in templates]  # fmt: skip
    if not combos:
        raise ValueError(f"io_names {roles['io_names']} and s_names {roles['s_names']} leave no pair of two names.")
    check_int("number of pairs", len(combos), 1, MAX_PAIRS)
    rng = random.Random(seed)
    rng.shuffle(combos)
    spare = single_token_names(tok)
    if corruption == "abc" and len(spare) < 5:
        raise ValueError(f"corruption='abc' needs five single-token names of NAMES, this tokenizer has {spare}: "
                         "use corruption='flip'.")  # fmt: skip
    out = PromptPairs([], [], [], [])
    for io, s, order, template in combos:
        first, second = (io, s) if order == "ABBA" else (s, io)
        out.clean.append(_fill(template, first, second, s))
        if corruption == "abc":
            out.corrupt.append(_fill(template, *rng.sample([x for x in spare if x not in (io, s)], 3)))
        else:
            out.corrupt.append(_fill(template, first, second, io))
        out.answers.append(" " + io)
        out.wrong.append(" " + s)
    return out


def check_template(template: Any) -> str:
    """An IOI template: a string whose only fields are ``{A}``, ``{B}`` and ``{S}``, each used."""
    if not isinstance(template, str):
        raise TypeError(f"A template is a string with {{A}}, {{B}} and {{S}}, got {type(template).__name__}.")
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as err:
        raise ValueError(
            f"Template {template!r} is not a valid format string ({err}); write literal braces as {{{{ and }}}}."
        ) from None
    bad = sorted({f for f in fields if f not in ("A", "B", "S")})
    if bad:
        raise ValueError(
            f"Template {template!r} has fields {bad}; only {{A}}, {{B}} and {{S}} are filled (write a literal brace "
            "as {{ or }})."
        )
    if not {"A", "B", "S"} <= set(fields):
        raise ValueError(
            f"Template {template!r} must contain {{A}}, {{B}} and {{S}} (names are inserted with a space)."
        )
    return template


def _fill(template: str, a: str, b: str, s: str) -> str:
    return template.format(A=" " + a, B=" " + b, S=" " + s)


def prompt_pairs(
    model_or_tokenizer: Any,
    clean: str | Sequence[str],
    corrupt: str | Sequence[str],
    answers: str | Sequence[str],
    wrong: str | Sequence[str],
) -> PromptPairs:
    """Build and check prompt pairs: same token count per pair, single-token answers.

    >>> ilab.patching.prompt_pairs(model, ["The Eiffel Tower is in"], ["The Colosseum is in"],
    ...                            [" Paris"], [" Rome"])
    """
    tok = _tokenizer(model_or_tokenizer)
    as_list = lambda x: [x] if isinstance(x, str) else list(x)  # noqa: E731
    clean, corrupt, answers, wrong = as_list(clean), as_list(corrupt), as_list(answers), as_list(wrong)
    n = len(clean)
    for name, values in (("corrupt", corrupt), ("answers", answers), ("wrong", wrong)):
        if len(values) != n:
            raise ValueError(f"Got {n} clean prompts but {len(values)} {name}; give one per pair.")
    if n == 0:
        raise ValueError("Give at least one prompt pair.")
    for i in range(n):
        single_token_id(tok, answers[i], f"answers[{i}]")
        single_token_id(tok, wrong[i], f"wrong[{i}]")
    check_aligned(tok, clean, corrupt)
    return PromptPairs(clean, corrupt, answers, wrong)


def check_aligned(tokenizer: Any, clean: Sequence[str], corrupt: Sequence[str]) -> list[list[int]]:
    """Token ids of each clean prompt; errors if a pair (or the set) does not align token by token."""
    tok = _tokenizer(tokenizer)
    ids_clean = [tok(t)["input_ids"] for t in clean]
    ids_corrupt = [tok(t)["input_ids"] for t in corrupt]
    for i, (a, b) in enumerate(zip(ids_clean, ids_corrupt, strict=True)):
        if len(a) != len(b):
            show = lambda ids: [tok.decode([t]) for t in ids]  # noqa: E731
            raise ValueError(
                f"Pair {i}: the clean and corrupted prompts must have the same number of tokens, but the clean "
                f"prompt has {len(a)}: {show(a)} and the corrupted one has {len(b)}: {show(b)}."
            )
    lengths = sorted({len(a) for a in ids_clean})
    if len(lengths) > 1:
        raise ValueError(
            f"All prompt pairs of one grid must have the same number of tokens; got lengths {lengths}. "
            "Use one template, or split with PromptPairs.by_length(model)."
        )
    return ids_clean
