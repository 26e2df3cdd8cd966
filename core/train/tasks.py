"""Task generators for models trained in a notebook: every input of a small task with its answer.

A :class:`Task` holds the whole dataset (small tasks are enumerated, not sampled): token ids ``inputs_NL``,
the answer of each row ``targets_N`` (predicted at the last position), which rows are for training, and the
vocabulary of token names (texts for :func:`interplab.load_model` with ``sites=`` are these names joined by
spaces).

Example
-------
>>> task = group_table("S4", train_frac=0.5)       # every pair (a, b) of the group, answer a*b
>>> task.inputs_NL.shape, task.n_classes
(torch.Size([576, 2]), 24)
>>> xor = boolean("xor", n_inputs=2)               # every input bit string, answer f(bits)
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..checks import check_int, check_texts

#: Groups :func:`group_table` builds: symmetric groups S3..S5 and cyclic groups Z2..Z_MAX_CYCLIC.
SYMMETRIC = {"S3": 3, "S4": 4, "S5": 5}
MAX_CYCLIC = 128
#: Boolean functions :func:`boolean` takes, of the input bits.
BOOLEAN: dict[str, Callable[[list[int]], int]] = {
    "xor": lambda bits: sum(bits) % 2,
    "and": lambda bits: int(all(bits)),
    "or": lambda bits: int(any(bits)),
    "majority": lambda bits: int(2 * sum(bits) > len(bits)),
    "xor_first_two": lambda bits: (bits[0] + bits[1]) % 2,
}
MAX_BOOLEAN_INPUTS = 12


@dataclass
class Task:
    """A small task, enumerated: ``inputs_NL`` token ids, ``targets_N`` answers, ``train_N`` the training rows.

    ``settings`` is everything the data depends on (what :meth:`identity` records in a checkpoint).
    """

    name: str
    vocab: list[str]
    inputs_NL: torch.Tensor
    targets_N: torch.Tensor
    train_N: torch.Tensor
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def n_classes(self) -> int:
        """How many answers there are (the logits the model must give at least)."""
        return int(self.targets_N.max()) + 1

    @property
    def n_train(self) -> int:
        """Rows in the training split."""
        return int(self.train_N.sum())

    def identity(self) -> dict[str, Any]:
        """What the data depends on, as JSON: the task's name and settings."""
        return {"task": self.name, **self.settings}

    def texts(self, rows: torch.Tensor | None = None) -> list[str]:
        """The rows (all by default; a bool mask or indices) as texts of token names.

        >>> boolean("xor").texts()[:2]
        ['0 0', '0 1']
        """
        ids = self.inputs_NL if rows is None else self.inputs_NL[rows]
        return [" ".join(self.vocab[i] for i in row) for row in ids.tolist()]


def _split(n: int, train_frac: float, seed: int) -> torch.Tensor:
    if not isinstance(train_frac, (int, float)) or isinstance(train_frac, bool) or not 0 < train_frac <= 1:
        raise ValueError(f"train_frac={train_frac!r} must be a fraction in (0, 1] of the {n} rows.")
    n_train = round(n * train_frac)
    if n_train < 1:
        raise ValueError(f"train_frac={train_frac} leaves no training row out of {n}; give at least {1 / n:.3g}.")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    train_N = torch.zeros(n, dtype=torch.bool)
    train_N[order[:n_train]] = True
    return train_N


def group_elements(group: str) -> tuple[list[tuple[int, ...]], Callable[[int, int], int]]:
    """The elements of ``group`` (permutations of S_n, or residues of Z_n) and its product on indices."""
    if isinstance(group, str) and group in SYMMETRIC:
        perms = list(itertools.permutations(range(SYMMETRIC[group])))
        index = {p: i for i, p in enumerate(perms)}
        return perms, lambda a, b: index[tuple(perms[a][j] for j in perms[b])]  # (a*b)(x) = a(b(x))
    if isinstance(group, str) and group.startswith("Z") and group[1:].isdigit() and 2 <= int(group[1:]) <= MAX_CYCLIC:
        n = int(group[1:])
        return [(i,) for i in range(n)], lambda a, b: (a + b) % n
    raise ValueError(
        f"group={group!r} is not one this builds: choose one of {', '.join(SYMMETRIC)} or Z2 .. Z{MAX_CYCLIC}."
    )


def group_table(group: str = "S4", train_frac: float = 1.0, seed: int = 0) -> Task:
    """Every pair ``(a, b)`` of a finite group's elements, answer the index of ``a * b`` (composition).

    ``train_frac`` of the pairs (drawn by ``seed``) are for training, the rest held out.

    >>> group_table("S4").n_classes
    24
    """
    elements, product = group_elements(group)
    n = len(elements)
    pairs = torch.cartesian_prod(torch.arange(n), torch.arange(n))
    targets = torch.tensor([product(a, b) for a, b in pairs.tolist()])
    names = ["".join(map(str, p)) if len(p) > 1 else str(p[0]) for p in elements]
    return Task(f"group_table:{group}", names, pairs, targets, _split(len(pairs), train_frac, seed),
                {"group": group, "train_frac": train_frac, "seed": seed})  # fmt: skip


def boolean(fn: str = "xor", n_inputs: int = 2) -> Task:
    """Every string of ``n_inputs`` bits, answer ``fn`` of them (one of :data:`BOOLEAN`); all rows train.

    >>> boolean("and", 2).targets_N.tolist()
    [0, 0, 0, 1]
    """
    if fn not in BOOLEAN:
        raise ValueError(f"fn={fn!r} is not a Boolean function this builds; choose one of {', '.join(BOOLEAN)}.")
    least = 2 if fn == "xor_first_two" else 1
    n_inputs = check_int("n_inputs", n_inputs, least, MAX_BOOLEAN_INPUTS)
    rows = [list(bits) for bits in itertools.product((0, 1), repeat=n_inputs)]
    targets = torch.tensor([BOOLEAN[fn](r) for r in rows])
    n = int(math.pow(2, n_inputs))
    return Task(f"boolean:{fn}", ["0", "1"], torch.tensor(rows), targets, torch.ones(n, dtype=torch.bool),
                {"fn": fn, "n_inputs": n_inputs})  # fmt: skip


#: Byte-level text tasks put byte ``b`` at id ``b + BYTE_OFFSET``, after ``<pad>``, ``</s>``, ``<unk>``: the ids of
#: ``transformers.ByT5Tokenizer(extra_ids=0)``, so a model trained on :func:`byte_text` reads texts through it.
BYTE_OFFSET = 3
BYTE_VOCAB = ["<pad>", "</s>", "<unk>"] + [chr(b) if 32 <= b < 127 else f"\\x{b:02x}" for b in range(256)]


@dataclass
class TextTask(Task):
    """A :class:`Task` whose rows come from named domains: ``domain_N`` is each row's index in ``domains``."""

    domains: list[str] = field(default_factory=list)
    domain_N: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))

    def rows_of(self, domain: str) -> torch.Tensor:
        """The rows of ``domain`` (a bool mask)."""
        if domain not in self.domains:
            raise ValueError(f"domain={domain!r} is not one of this task's: {', '.join(self.domains)}.")
        return self.domain_N == self.domains.index(domain)

    def decoded(self, rows: torch.Tensor) -> list[str]:
        """The rows (a bool mask or indices) as UTF-8 texts (a character cut by a window's edge is replaced)."""
        return [bytes(i - BYTE_OFFSET for i in row).decode("utf-8", "replace") for row in self.inputs_NL[rows].tolist()]


def byte_text(
    domains: dict[str, Sequence[str]], seq_len: int = 64, rows_per_domain: int = 512, train_frac: float = 0.9,
    seed: int = 0,
) -> TextTask:  # fmt: skip
    """Windows of ``seq_len`` bytes drawn from each domain's texts, answer the next byte at every position.

    Each domain's texts are joined (UTF-8, one newline between) and ``rows_per_domain`` windows start at
    places drawn by ``seed``; ids are bytes + :data:`BYTE_OFFSET`. The settings record a digest of the texts.

    >>> task = byte_text({"prose": ["The cat sat on the mat. " * 20], "code": ["def f(x):\\n    return x\\n" * 30]},
    ...                  seq_len=16, rows_per_domain=8)
    >>> task.inputs_NL.shape, task.targets_N.shape, task.domains
    (torch.Size([16, 16]), torch.Size([16, 16]), ['prose', 'code'])
    """
    if not isinstance(domains, dict) or len(domains) < 1:
        raise ValueError(f"domains must be a dict of a name to its texts, got {type(domains).__name__}.")
    seq_len = check_int("seq_len", seq_len, 1, 4096)
    rows_per_domain = check_int("rows_per_domain", rows_per_domain, 1)
    gen = torch.Generator().manual_seed(seed)
    digest = hashlib.sha256()
    windows, labels = [], []
    for index, (name, texts) in enumerate(domains.items()):
        data = "\n".join(check_texts(texts)).encode("utf-8")
        digest.update(name.encode() + b"\0" + data + b"\0")
        if len(data) < seq_len + 2:
            raise ValueError(
                f"domain {name!r} holds {len(data)} bytes, too few for windows of seq_len={seq_len} (+1 for the "
                f"answer): give more text or a seq_len of at most {max(len(data) - 2, 0)}."
            )
        ids = torch.frombuffer(bytearray(data), dtype=torch.uint8).long() + BYTE_OFFSET
        starts = torch.randint(0, len(ids) - seq_len, (rows_per_domain,), generator=gen)
        windows.append(ids[starts[:, None] + torch.arange(seq_len + 1)])
        labels.append(torch.full((rows_per_domain,), index))
    rows = torch.cat(windows)
    settings = {"domains": list(domains), "texts_sha256": digest.hexdigest(), "seq_len": seq_len,
                "rows_per_domain": rows_per_domain, "train_frac": train_frac, "seed": seed}  # fmt: skip
    return TextTask("byte_text", BYTE_VOCAB, rows[:, :-1], rows[:, 1:], _split(len(rows), train_frac, seed), settings,
                    list(domains), torch.cat(labels))  # fmt: skip


def repeated_tokens(
    n_tokens: int = 32, half_len: int = 16, n_rows: int = 2048, train_frac: float = 0.9, seed: int = 0
) -> Task:
    """Random token sequences of ``half_len`` repeated once; the answer at each position of the repeat is the
    next token (the first half's answers are -100: nothing predicts a random token), so a model scores only by
    induction: find the current token's earlier copy and read what followed it.

    >>> task = repeated_tokens(n_tokens=10, half_len=4, n_rows=3)
    >>> task.inputs_NL.shape, (task.targets_N[:, :4] == -100).all().item()
    (torch.Size([3, 8]), True)
    """
    n_tokens = check_int("n_tokens", n_tokens, 2)
    half_len = check_int("half_len", half_len, 2)
    n_rows = check_int("n_rows", n_rows, 1)
    gen = torch.Generator().manual_seed(seed)
    half = torch.randint(0, n_tokens, (n_rows, half_len), generator=gen)
    inputs = torch.cat([half, half], 1)
    targets = torch.full_like(inputs, -100)
    targets[:, half_len:-1] = inputs[:, half_len + 1 :]
    names = [str(i) for i in range(n_tokens)]
    settings = {"n_tokens": n_tokens, "half_len": half_len, "n_rows": n_rows, "train_frac": train_frac, "seed": seed}
    return Task("repeated_tokens", names, inputs, targets, _split(n_rows, train_frac, seed), settings)
