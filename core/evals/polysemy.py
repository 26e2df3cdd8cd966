"""PS-Eval: do an SAE's most active latents tell a polysemous word's senses apart?

For each word, every pair of its contexts is a question: same sense or not? The SAE answers
"same" when the word's token has the same most active latent in both contexts (no latent firing
counts as its own answer). Following PS-Eval, a pair of *different* senses is a positive: recall is
the share of different-sense pairs the SAE separates, specificity the share of same-sense pairs it
keeps together; precision and accuracy as usual.

The built-in dataset (``data/polysemy.json``) holds 48 words that are single tokens for the
embedded Gemma 3 tokenizer, two senses each, five contexts per sense. Any data of the same shape
works (:func:`load_polysemy` validates a file; :func:`check_polysemy` the words against a tokenizer,
before any forward pass).

Example
-------
>>> result = polysemy(sae, model)
>>> result.metrics              # {'accuracy': ..., 'precision': ..., 'recall': ..., 'specificity': ...}
>>> result.table                # tidy rows, one per metric
>>> result.pairs.head()         # word, i, j, same_sense, same_top
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from ..checks import check_positive_int, check_texts
from ..memory.freeing import scope
from ..storage.readers import Fields, FileError, read_json
from ..views.charts import offline
from .tidy import check_sae, encode_rows, sites_batches, tidy

if TYPE_CHECKING:
    from ..model.model import Model
    from ..saes.base import SAE

DATA_FILE = Path(__file__).parent / "data" / "polysemy.json"
FORMAT = "interplab-polysemy"


@dataclass
class Sense:
    gloss: str
    contexts: list[str]


@dataclass
class PolyWord:
    word: str  # without the leading space
    senses: list[Sense]


def polysemy_word(word: str, *senses: Sequence[str], glosses: Sequence[str] | None = None) -> PolyWord:
    """A polysemous word with its contexts, one list per sense (at least two).

    >>> polysemy_word("bat", ["A bat flew out of the cave."], ["He swung the bat hard."], glosses=["animal", "club"])
    """
    if not isinstance(word, str) or not word.strip():
        raise ValueError(f"word must be a non-empty string, got {word!r}.")
    if len(senses) < 2:
        raise ValueError(f"{word!r} needs at least two senses (one list of contexts each), got {len(senses)}.")
    glosses = list(glosses) if glosses is not None else [f"sense {i}" for i in range(len(senses))]
    if len(glosses) != len(senses):
        raise ValueError(f"glosses: {len(glosses)} given for {len(senses)} senses.")
    out = []
    for gloss, contexts in zip(glosses, senses, strict=True):
        contexts = check_texts(contexts)
        out.append(Sense(str(gloss), contexts))
    return PolyWord(word, out)


def load_polysemy(path: str | os.PathLike[str] | None = None) -> list[PolyWord]:
    """The words of a polysemy file (the built-in one by default), validated field by field.

    >>> words = load_polysemy(); len(words), words[0].word
    (48, 'bank')
    """
    file = Path(path) if path is not None else DATA_FILE
    raw = Fields(file, read_json(file))
    raw.str("format", choices=[FORMAT])
    raw.int("version", minimum=1, maximum=1)
    items = raw.list("words")
    words = []
    for i, item in enumerate(items):
        entry = Fields(file, item, where=f"words[{i}].")
        word = entry.str("word")
        senses = []
        for j, s in enumerate(entry.list("senses")):
            sense = Fields(file, s, where=f"words[{i}].senses[{j}].")
            contexts = sense.list("contexts")
            if not contexts or not all(isinstance(c, str) and c.strip() for c in contexts):
                raise FileError(
                    file, f"words[{i}].senses[{j}].contexts", "must be a non-empty list of non-empty strings"
                )
            senses.append(Sense(sense.str("gloss"), list(contexts)))
        if len(senses) < 2:
            raise FileError(file, f"words[{i}].senses", f"{word!r} needs at least two senses, got {len(senses)}")
        words.append(PolyWord(word, senses))
    if not words:
        raise FileError(file, "words", "holds no words")
    return words


def check_polysemy(tokenizer: Any, words: list[PolyWord]) -> tuple[list[str], list[int], list[tuple[int, int, int]]]:
    """Contexts, the word's position in each, and ``(word, sense, context)`` ids; a ValueError naming the
    first word that is not one token (with a leading space) or a context that does not hold it once.

    Tokenises only: it runs before any forward pass.
    """
    texts, positions, ids = [], [], []
    for w, pw in enumerate(words):
        word_ids = tokenizer(" " + pw.word, add_special_tokens=False)["input_ids"]
        if len(word_ids) != 1:
            pieces = [tokenizer.decode([t]) for t in word_ids]
            raise ValueError(
                f"Polysemous word {pw.word!r} is not one token for this tokenizer: ' {pw.word}' is {pieces}. "
                "Use words that are single tokens (with a leading space)."
            )
        for s, sense in enumerate(pw.senses):
            for c, text in enumerate(sense.contexts):
                toks = tokenizer(text)["input_ids"]
                where = [i for i, t in enumerate(toks) if t == word_ids[0]]
                if len(where) != 1:
                    raise ValueError(
                        f"Context {text!r} ({pw.word!r}, sense {sense.gloss!r}) holds the token ' {pw.word}' "
                        f"{len(where)} times; it must hold it exactly once."
                    )
                texts.append(text)
                positions.append(where[0])
                ids.append((w, s, c))
    return texts, positions, ids


def pair_metrics(same_sense: np.ndarray, same_top: np.ndarray) -> dict[str, float]:
    """Accuracy, precision, recall, specificity with "different senses" as the positive class.

    >>> pair_metrics(np.array([True, False]), np.array([True, True]))["specificity"]
    1.0
    """
    pos, pred = ~same_sense, ~same_top
    tp, fp = float((pos & pred).sum()), float((~pos & pred).sum())
    fn, tn = float((pos & ~pred).sum()), float((~pos & ~pred).sum())
    div = lambda a, b: a / b if b else float("nan")  # noqa: E731
    return {"accuracy": div(tp + tn, tp + tn + fp + fn), "precision": div(tp, tp + fp), "recall": div(tp, tp + fn),
            "specificity": div(tn, tn + fp), "n_pairs": tp + tn + fp + fn}  # fmt: skip


@dataclass(repr=False)
class PolysemyResult:
    """PS-Eval of one SAE at one site: pair-level answers, their metrics, and each context's top latent."""

    site: str
    pairs: pd.DataFrame  # word, i, j, same_sense, same_top
    contexts: pd.DataFrame  # word, sense, context, top_latent, top_value
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def table(self) -> pd.DataFrame:
        """Tidy rows (suite ``polysemy``, group ``all``), one per metric."""
        return tidy("polysemy", self.site, self.metrics)

    def per_word(self) -> pd.DataFrame:
        """The four metrics for each word (rows) separately."""
        rows = []
        for word, g in self.pairs.groupby("word", sort=False):
            rows.append({"word": word, **pair_metrics(g["same_sense"].to_numpy(), g["same_top"].to_numpy())})
        return pd.DataFrame(rows)

    def chart(self) -> Any:
        """A bar chart of the four metrics."""
        import altair as alt

        df = self.table[self.table.metric != "n_pairs"]
        return offline(alt.Chart(df).mark_bar().encode(x=alt.X("metric:N", sort=None), y=alt.Y("value:Q",
                       scale=alt.Scale(domain=[0, 1])), tooltip=["metric", "value"]).properties(
                       title=f"PS-Eval at {self.site}", width=220, height=160))  # fmt: skip

    def __repr__(self) -> str:
        m = ", ".join(f"{k}={v:.3f}" for k, v in self.metrics.items() if k != "n_pairs")
        return f"PolysemyResult({self.site}, {int(self.metrics.get('n_pairs', 0))} pairs: {m})"


@overload
def polysemy(
    sae: SAE, model: Model, words: list[PolyWord] | str | os.PathLike[str] | None = None,
    site: str | None = None, batch_size: int = 32, progress: bool = True,
) -> PolysemyResult: ...  # fmt: skip


@overload
def polysemy(
    sae: list[SAE] | tuple[SAE, ...], model: Model, words: list[PolyWord] | str | os.PathLike[str] | None = None,
    site: str | None = None, batch_size: int = 32, progress: bool = True,
) -> list[PolysemyResult]: ...  # fmt: skip


@scope()
def polysemy(
    sae: SAE | list[SAE] | tuple[SAE, ...], model: Model, words: list[PolyWord] | str | os.PathLike[str] | None = None,
    site: str | None = None, batch_size: int = 32, progress: bool = True,
) -> PolysemyResult | list[PolysemyResult]:  # fmt: skip
    """PS-Eval of ``sae`` on ``model``: the built-in polysemous words, or ``words`` (a list or a file).

    A list of SAEs (at their own sites) is read in one forward pass and gives a list of results.

    >>> polysemy(sae, model).metrics["accuracy"]
    >>> [r.metrics["accuracy"] for r in polysemy([sae0, sae6, sae12], model)]
    """
    many = isinstance(sae, (list, tuple))
    saes = list(sae) if isinstance(sae, (list, tuple)) else [sae]
    if not saes:
        raise ValueError("sae is an empty list; give an SAE or a list of SAEs.")
    for s in saes:
        check_sae(s)
    check_positive_int("batch_size", batch_size)
    if many and site is not None:
        raise ValueError("site= applies to one SAE; with a list, each SAE is read at its own site.")
    sites = [s.check_fits(model, site) for s in saes]
    if words is None or isinstance(words, (str, os.PathLike)):
        words = load_polysemy(words)
    texts, positions, ids = check_polysemy(model.tokenizer, words)
    enc = model.to_tokens(texts)
    pos = torch.tensor(positions)
    tops: list[list[torch.Tensor]] = [[] for _ in saes]
    values: list[list[torch.Tensor]] = [[] for _ in saes]
    for s in saes:
        s.eval()
    total = -(-len(texts) // batch_size)
    for rows, xs in tqdm(sites_batches(model, sites, enc, batch_size), desc="polysemy", total=total, leave=False,
                         disable=not progress or total <= 1):  # fmt: skip
        p = pos[rows]
        for i, (s, name) in enumerate(zip(saes, sites, strict=True)):
            lat = encode_rows(s, xs[name][torch.arange(len(p)), p])
            v, top = lat.max(1)
            tops[i].append(torch.where(v > 0, top, torch.full_like(top, -1)))
            values[i].append(v)
    results = [_result(name, words, texts, ids, torch.cat(t).numpy(), torch.cat(v).numpy())
               for name, t, v in zip(sites, tops, values, strict=True)]  # fmt: skip
    return results if many else results[0]


def _result(site: str, words: list[PolyWord], texts: list[str], ids: list[tuple[int, int, int]], top: np.ndarray,
            value: np.ndarray) -> PolysemyResult:  # fmt: skip
    contexts = pd.DataFrame({"word": [words[w].word for w, _, _ in ids], "sense": [s for _, s, _ in ids],
                             "context": texts, "top_latent": top, "top_value": value})  # fmt: skip
    pair_rows = []
    for w, group in contexts.groupby("word", sort=False):
        idx = group.index.to_numpy()
        for a, b in combinations(idx, 2):
            pair_rows.append((w, int(a), int(b), bool(contexts.sense[a] == contexts.sense[b]),
                              bool(top[a] == top[b])))  # fmt: skip
    pairs = pd.DataFrame(pair_rows, columns=["word", "i", "j", "same_sense", "same_top"])
    metrics = pair_metrics(pairs["same_sense"].to_numpy(), pairs["same_top"].to_numpy())
    return PolysemyResult(site=site, pairs=pairs, contexts=contexts, metrics=metrics)
