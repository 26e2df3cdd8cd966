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
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..checks import check_fraction, check_int, check_texts

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


#: What the held-out rows of :func:`bursty_icl` measure: classes never trained (labels only in the context),
#: or trained classes absent from the context (labels only in the weights).
ICL_PROBES = ("icl", "iwl")


def _icl_rows(picked_NW: torch.Tensor, labels_NW: torch.Tensor, slots_NC: torch.Tensor, query_slot_N: torch.Tensor,
              pool: int) -> torch.Tensor:  # fmt: skip
    """Rows ``x y x y ... x_q``: the item of each context slot, its label's id (after the pool), the query item."""
    pairs_NC2 = torch.stack([picked_NW.gather(1, slots_NC), labels_NW.gather(1, slots_NC) + pool], -1)
    return torch.cat([pairs_NC2.flatten(1), picked_NW.gather(1, query_slot_N[:, None])], 1)


def _icl_context(g: torch.Generator, n: int, n_pairs: int, burst: int, first: int, count: int,
                 bursty_N: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """Context classes [n, n_pairs] drawn from ``first .. first + count - 1``: ``n_pairs // burst`` distinct
    classes ``burst`` times each, shuffled, with each pair's slot (which of the distinct classes) and the query's
    slot: one of the context's where ``bursty_N``, else ``n_pairs // burst`` (a class outside the context)."""
    n_ways = n_pairs // burst
    picked_NW = torch.rand(n, count, generator=g).argsort(1)[:, : n_ways + 1] + first
    slots_NC = torch.rand(n, n_pairs, generator=g).argsort(1) % n_ways
    query_slot_N = torch.where(bursty_N, torch.randint(n_ways, (n,), generator=g), n_ways)
    return picked_NW, slots_NC, query_slot_N


def bursty_icl(n_classes: int, pool: int = 1024, n_novel: int = 64, n_labels: int = 16, n_pairs: int = 6,
               burst: int = 2, p_bursty: float = 0.75, n_train: int = 8192, n_eval: int = 1024, probe: str = "icl",
               seed: int = 0) -> Task:  # fmt: skip
    """Bursty few-shot classification (Chan et al. 2022; Nguyen and Reddy, ICLR 2025): ``x y x y ... x_q`` -> y_q.

    Items are classes ``0 .. n_classes - 1`` of a fixed ``pool`` (the last ``n_novel`` of it never train), each
    with a fixed label of ``n_labels`` (token ids after the pool). A training row's context holds
    ``n_pairs // burst`` classes ``burst`` times each; with probability ``p_bursty`` the query's class is among
    them. The held-out rows are the ``probe``: ``"icl"`` novel classes with labels drawn per row, the query's
    only in the context; ``"iwl"`` trained classes, the query's absent from the context. ``n_classes`` is the
    task diversity; the same ``seed`` gives the same training rows whatever the probe.

    >>> task = bursty_icl(64, probe="icl")
    >>> task.inputs_NL.shape, task.texts(~task.train_N)[0].split()[-1].startswith("x")
    (torch.Size([9216, 13]), True)
    """
    if probe not in ICL_PROBES:
        raise ValueError(f"probe={probe!r} is not one of {', '.join(map(repr, ICL_PROBES))}.")
    pool = check_int("pool", pool, 4, 1 << 16)
    n_novel = check_int("n_novel", n_novel, 1, pool - 1)
    burst = check_int("burst", burst, 1)
    n_pairs = check_int("n_pairs", n_pairs, burst)
    if n_pairs % burst:
        raise ValueError(f"n_pairs={n_pairs} is not a multiple of burst={burst}: the context holds whole bursts.")
    n_ways = n_pairs // burst
    if isinstance(n_classes, int) and not isinstance(n_classes, bool) and n_classes <= n_ways:
        raise ValueError(f"n_classes={n_classes} is too few for contexts of n_pairs={n_pairs} // burst={burst} = "
                         f"{n_ways} classes and a query class outside them: give at least {n_ways + 1}, or fewer "
                         f"pairs or a larger burst.")  # fmt: skip
    n_classes = check_int("n_classes", n_classes, n_ways + 1)
    if n_classes > pool - n_novel:
        raise ValueError(f"n_classes={n_classes} does not fit: pool={pool} items less n_novel={n_novel} novel ones "
                         f"leave {pool - n_novel} classes to train; give at most that, or a larger pool.")  # fmt: skip
    n_novel = check_int("n_novel", n_novel, n_ways + 1)
    n_labels = check_int("n_labels", n_labels, n_ways)
    p_bursty = float(p_bursty) if p_bursty in (0, 1) else check_fraction("p_bursty", p_bursty)
    n_train, n_eval = check_int("n_train", n_train, 1), check_int("n_eval", n_eval, 1)
    label_of = torch.randint(n_labels, (pool,), generator=torch.Generator().manual_seed(seed + 7919))
    g = torch.Generator().manual_seed(seed)
    bursty_N = torch.rand(n_train, generator=g) < p_bursty
    picked_NW, slots_NC, query_slot_N = _icl_context(g, n_train, n_pairs, burst, 0, n_classes, bursty_N)
    labels_NW = label_of[picked_NW]
    rows, answers = (
        [_icl_rows(picked_NW, labels_NW, slots_NC, query_slot_N, pool)],
        [labels_NW.gather(1, query_slot_N[:, None])],
    )
    g = torch.Generator().manual_seed(seed + 1)
    novel = probe == "icl"
    first, count = (pool - n_novel, n_novel) if novel else (0, n_classes)
    picked_NW, slots_NC, query_slot_N = _icl_context(g, n_eval, n_pairs, burst, first, count,
                                                     torch.full((n_eval,), novel))  # fmt: skip
    labels_NW = torch.rand(n_eval, n_labels, generator=g).argsort(1)[:, : n_ways + 1] if novel else label_of[picked_NW]
    rows.append(_icl_rows(picked_NW, labels_NW, slots_NC, query_slot_N, pool))
    answers.append(labels_NW.gather(1, query_slot_N[:, None]))
    vocab = [f"x{i}" for i in range(pool)] + [f"y{i}" for i in range(n_labels)]
    train_N = torch.cat([torch.ones(n_train, dtype=torch.bool), torch.zeros(n_eval, dtype=torch.bool)])
    settings = {"n_classes": n_classes, "pool": pool, "n_novel": n_novel, "n_labels": n_labels, "n_pairs": n_pairs,
                "burst": burst, "p_bursty": p_bursty, "n_train": n_train, "n_eval": n_eval, "probe": probe,
                "seed": seed}  # fmt: skip
    return Task("bursty_icl", vocab, torch.cat(rows), torch.cat(answers).squeeze(1) + pool, train_N, settings)


#: The longest DAG :func:`dag_reachability` builds, in vertices.
MAX_DAG_VERTICES = 26


def _one_dag(
    rng: random.Random, n_vertices: int, n_edges: int, path_len: int
) -> tuple[list[tuple[int, int]], list[int]]:
    """A DAG's edges over ``0 .. n_vertices - 1``, shuffled, and its path: ``path_len`` edges through random vertices,
    then random forward edges among the other vertices and from the path to them (none back into the path, so
    the path is the only way between its vertices)."""
    order = rng.sample(range(n_vertices), n_vertices)
    path, rest = order[: path_len + 1], order[path_len + 1 :]
    rank = {v: i for i, v in enumerate(rng.sample(rest, len(rest)))}
    edges = list(itertools.pairwise(path))
    extra = [(u, v) for u in path for v in rest] + [(u, v) for u in rest for v in rest if rank[u] < rank[v]]
    edges += rng.sample(extra, min(len(extra), n_edges - path_len))
    return rng.sample(edges, len(edges)), path


def reachable_hops(edges: list[tuple[int, int]], start: int, n_vertices: int) -> list[int]:
    """Fewest edges from ``start`` to each vertex (0 for itself, ``n_vertices`` where it cannot be reached)."""
    hops = [n_vertices] * n_vertices
    hops[start], frontier = 0, [start]
    for step in range(1, n_vertices):
        frontier = [v for u, v in edges if u in frontier and hops[v] == n_vertices]
        for v in frontier:
            hops[v] = step
    return hops


def dag_reachability(n_vertices: int = 8, n_edges: int = 10, n_rows: int = 4096, test_frac: float = 0.2,
                     seed: int = 0) -> Task:  # fmt: skip
    """Reachability in small DAGs (after Saparov et al., ICLR 2025): ``a b c d ... ? s t`` -> ``yes``/``no``.

    Each row lists ``n_edges`` edges ``u v`` (``u -> v``) of its own random DAG over ``n_vertices`` vertices
    (names ``a``, ``b``, ...), then ``?``, a start ``s`` and a goal ``t``; the answer says whether ``t`` is
    reachable from ``s``. Every DAG has one path (of 1 to ``n_vertices - 2`` edges, as ``n_edges`` allows) and
    random edges off it. Even rows are reachable (start and goal on the path, their distance uniform), odd rows
    not (the goal a vertex with an incoming edge, the start on the path). :func:`dag_hops` gives each row's distance.

    >>> task = dag_reachability(8, 10)
    >>> task.texts()[0].split()[-3:], task.vocab[task.targets_N[0]]
    (['?', 'c', 'b'], 'yes')
    """
    n_vertices = check_int("n_vertices", n_vertices, 3, MAX_DAG_VERTICES)
    n_edges = check_int("n_edges", n_edges, 2, 2 * n_vertices - 3)  # the most a DAG with a path of n - 2 edges has
    n_rows = check_int("n_rows", n_rows, 2)
    rng = random.Random(seed)
    vocab = [chr(ord("a") + i) for i in range(n_vertices)] + ["?", "yes", "no"]
    rows: list[list[int]] = []
    answers: list[int] = []
    longest = min(n_vertices - 2, n_edges - 1)
    while len(rows) < n_rows:
        hops = rng.randint(1, longest)
        path_len = rng.randint(hops, longest)
        edges, path = _one_dag(rng, n_vertices, n_edges, path_len)
        if len(rows) % 2 == 0:  # reachable: along the path, 1 .. longest hops, uniformly
            i = rng.randint(0, path_len - hops)
            start, goal = path[i], path[i + hops]
        else:  # not: a vertex with an incoming edge that the start cannot reach (an earlier path vertex included)
            start = path[rng.randrange(path_len + 1)]
            dist = reachable_hops(edges, start, n_vertices)
            goals = sorted({v for _, v in edges if dist[v] == n_vertices})
            if not goals:
                continue
            goal = rng.choice(goals)
        rows.append([x for e in edges for x in e] + [n_vertices, start, goal])
        answers.append(n_vertices + (1 if len(rows) % 2 == 1 else 2))
    settings = {"n_vertices": n_vertices, "n_edges": n_edges, "n_rows": n_rows, "test_frac": test_frac, "seed": seed}
    return Task("dag_reachability", vocab, torch.tensor(rows), torch.tensor(answers),
                _split(n_rows, 1 - check_fraction("test_frac", test_frac, "[", ")"), seed), settings)  # fmt: skip


def dag_hops(task: Task) -> torch.Tensor:
    """Each row's fewest edges from start to goal (``n_vertices`` where unreachable) of a :func:`dag_reachability`.

    >>> (dag_hops(task) < 8).float().mean()   # half the rows are reachable
    tensor(0.5000)
    """
    if not isinstance(task, Task) or task.name != "dag_reachability":
        raise ValueError(f"dag_hops reads a dag_reachability task, got {getattr(task, 'name', task)!r}.")
    n = task.settings["n_vertices"]
    out = []
    for row in task.inputs_NL.tolist():
        edges = list(zip(row[:-3:2], row[1:-3:2], strict=True))
        out.append(reachable_hops(edges, row[-2], n)[row[-1]])
    return torch.tensor(out)
