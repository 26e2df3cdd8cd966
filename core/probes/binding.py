"""Propositional probes and the binding subspace: which entity goes with which attribute in a context.

A built-in template set (names x occupations, countries or foods; every word one token for the model's
tokenizer, checked, the others left out) makes contexts such as "Greg is a nurse. Laura is a physicist.".
At a site the activations of each name token and each attribute token are read (one pass per batch). A
*binding similarity* ``score(e, a) = (U^T x_e) . (U^T x_a)``, with ``U`` [d, rank] learned on training
contexts, should be higher for the bound pair than for the unbound ones: trained with a softmax over the
context's attributes for each entity (torch, Adam, seeded). Binding accuracy is the share of entities
whose highest-scoring attribute is their own, on held-out contexts and on a second phrasing (short-story
style) never seen in training. ``BindingMatrix`` shows one context's entities x attributes scores.

Example
-------
>>> task = binding_task(model, domain="occupations", n=64)
>>> res = fit_binding(model, task, "blocks.8.hook_resid_post", rank=16)
>>> res.accuracy, res.story_accuracy, res.matrix(model, task.story(0)).chart()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..checks import check_fraction, check_int, check_number
from ..views.charts import offline

if TYPE_CHECKING:
    from ..model.model import Model

NAMES = ("Greg", "Laura", "John", "Mary", "Tom", "Anna", "Paul", "Sarah", "Mark", "Emma", "David", "Lucy", "Peter",
         "Alice", "James", "Kate")  # fmt: skip
DOMAINS = {
    "occupations": ("nurse", "doctor", "teacher", "lawyer", "farmer", "pilot", "baker", "singer", "writer", "chef",
                    "dancer", "judge", "priest", "sailor"),
    "countries": ("France", "Spain", "Italy", "Japan", "China", "India", "Brazil", "Egypt", "Canada", "Germany",
                  "Mexico", "Russia", "Greece", "Kenya"),
    "foods": ("bread", "rice", "cheese", "apples", "pasta", "soup", "fish", "cake", "eggs", "beans", "pizza", "salad",
              "honey", "milk"),
}  # fmt: skip
#: One sentence per entity; ``{e}`` the name, ``{a}`` the attribute.
PHRASES = {"occupations": "{e} is a {a}.", "countries": "{e} lives in {a}.", "foods": "{e} likes {a}."}
#: The second phrasing, a short story, only ever used for testing.
STORIES = {
    "occupations": "Years ago, {e0} trained hard and became a {a0}, while {e1} chose to work as a {a1}.",
    "countries": "After a long journey, {e0} settled down in {a0}, and {e1} found a home in {a1}.",
    "foods": "At the picnic, {e0} kept eating {a0}, but {e1} only wanted {a1}.",
}


def _token_ids(model: Model, word: str) -> list[int]:
    """The word's token id with a leading space and, when it is one token too, without (a sentence's start)."""
    tok = model.tokenizer
    out = []
    for form in (" " + word, word):
        ids = tok(form, add_special_tokens=False)["input_ids"]
        if len(ids) == 1 and ids[0] != tok.unk_token_id and tok.decode(ids).strip() == word:
            out.append(ids[0])
    return out


def single_tokens(model: Model, words: tuple[str, ...]) -> list[str]:
    """The words that are one token both with a leading space and without, and decode back to themselves."""
    return [w for w in words if len(_token_ids(model, w)) == 2]


@dataclass
class BindingTask:
    """Contexts of two (entity, attribute) propositions each, in the template and in the story phrasing."""

    domain: str
    items: list[tuple[str, str, str, str]]  # (entity 0, attribute 0, entity 1, attribute 1)

    def text(self, i: int) -> str:
        """Context ``i`` in the template phrasing."""
        e0, a0, e1, a1 = self.items[check_int("i", i, 0, len(self.items) - 1)]
        phrase = PHRASES[self.domain]
        return phrase.format(e=e0, a=a0) + " " + phrase.format(e=e1, a=a1)

    def story(self, i: int) -> str:
        """Context ``i`` in the story phrasing (never used in training)."""
        e0, a0, e1, a1 = self.items[check_int("i", i, 0, len(self.items) - 1)]
        return STORIES[self.domain].format(e0=e0, a0=a0, e1=e1, a1=a1)

    def __len__(self) -> int:
        return len(self.items)


def binding_task(model: Model, domain: str = "occupations", n: int = 64, seed: int = 0) -> BindingTask:
    """``n`` contexts of two distinct names and two distinct attributes of ``domain``, all single tokens.

    >>> task = binding_task(model, "countries", n=32)
    """
    if domain not in DOMAINS:
        raise ValueError(f"domain={domain!r} is not one of {tuple(DOMAINS)}.")
    n = check_int("n", n, minimum=2)
    names, attrs = single_tokens(model, NAMES), single_tokens(model, DOMAINS[domain])
    if len(names) < 2 or len(attrs) < 2:
        raise ValueError(f"Fewer than two names or {domain} are single tokens for {getattr(model, 'name', model)!r}.")
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(n):
        e0, e1 = rng.choice(names, 2, replace=False).tolist()
        a0, a1 = rng.choice(attrs, 2, replace=False).tolist()
        items.append((e0, a0, e1, a1))
    return BindingTask(domain, items)


def _positions(model: Model, ids: list[int], words: list[str]) -> list[int]:
    """Index of the first occurrence of each word's token in ``ids``."""
    out = []
    for w in words:
        found = [ids.index(i) for i in _token_ids(model, w) if i in ids]
        if not found:
            raise ValueError(f"{w!r} is not a token of the context {model.tokenizer.decode(ids)!r}.")
        out.append(min(found))
    return out


def read_tokens(model: Model, task: BindingTask, site: str, story: bool = False, batch_size: int = 8
                ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Entity and attribute activations, each [n, 2, d] float32 (one pass per batch)."""
    texts = [task.story(i) if story else task.text(i) for i in range(len(task))]
    ents, atts = [], []
    for start in range(0, len(texts), batch_size):
        enc = model.to_tokens(texts[start : start + batch_size])
        (x,) = model.run_sites(enc, [site])
        for r in range(x.shape[0]):
            e0, a0, e1, a1 = task.items[start + r]
            ids = enc["input_ids"][r][enc["attention_mask"][r].bool()].tolist()
            offset = int((~enc["attention_mask"][r].bool()).sum()) if model.tokenizer.padding_side == "left" else 0
            pe = [offset + p for p in _positions(model, ids, [e0, e1])]
            pa = [offset + p for p in _positions(model, ids, [a0, a1])]
            ents.append(x[r, pe].float())
            atts.append(x[r, pa].float())
    return torch.stack(ents), torch.stack(atts)


def scores(U_DR: torch.Tensor, mean_D: torch.Tensor, ent_NED: torch.Tensor, att_NAD: torch.Tensor) -> torch.Tensor:
    """Binding similarities [n, entities, attributes] (activations centred on ``mean_D``)."""
    return torch.einsum("ner,nar->nea", (ent_NED - mean_D) @ U_DR, (att_NAD - mean_D) @ U_DR)


def _accuracy(s_NEA: torch.Tensor) -> float:
    bound = torch.arange(s_NEA.shape[1])
    return float((s_NEA.argmax(-1) == bound).float().mean()) if len(s_NEA) else float("nan")


@dataclass(repr=False)
class BindingResult:
    """A learned binding subspace ``U_DR`` at ``site`` and its binding accuracy."""

    site: str
    U_DR: torch.Tensor
    mean_D: torch.Tensor
    accuracy: float
    train_accuracy: float
    story_accuracy: float
    chance: float
    losses: list[float] = field(default_factory=list)

    def matrix(self, model: Model, text: str, entities: list[str], attributes: list[str]) -> BindingMatrix:
        """Scores of every entity against every attribute in ``text`` (each word a single token in it)."""
        if not entities or not attributes:
            raise ValueError("entities and attributes must each name at least one word of the text.")
        enc = model.to_tokens(text)
        (x,) = model.run_sites(enc, [self.site])
        ids = enc["input_ids"][0].tolist()
        e = x[0, _positions(model, ids, entities)].float()
        a = x[0, _positions(model, ids, attributes)].float()
        s = scores(self.U_DR, self.mean_D, e[None], a[None])[0]
        return BindingMatrix(list(entities), list(attributes), s.numpy())

    def __repr__(self) -> str:
        return (
            f"BindingResult({self.site}, rank {self.U_DR.shape[1]}: held-out binding accuracy {self.accuracy:.3f}, "
            f"story phrasing {self.story_accuracy:.3f}, train {self.train_accuracy:.3f}, chance {self.chance:.2f})"
        )


@dataclass
class BindingMatrix:
    """Entities x attributes binding similarities of one context."""

    entities: list[str]
    attributes: list[str]
    values: np.ndarray

    def chart(self) -> Any:
        """Altair heatmap: rows entities, columns attributes, colour the similarity."""
        import altair as alt
        import pandas as pd

        df = pd.DataFrame([{"entity": e, "attribute": a, "similarity": float(self.values[i, j])}
                           for i, e in enumerate(self.entities) for j, a in enumerate(self.attributes)])  # fmt: skip
        base = alt.Chart(df).encode(x=alt.X("attribute:N", sort=None), y=alt.Y("entity:N", sort=None))
        rect = base.mark_rect().encode(
            color=alt.Color("similarity:Q", scale=alt.Scale(scheme="blueorange")),
            tooltip=["entity", "attribute", alt.Tooltip("similarity:Q", format=".2f")],
        )
        text = base.mark_text().encode(text=alt.Text("similarity:Q", format=".1f"))
        return offline((rect + text).properties(title="binding similarity", width=200, height=120))


def fit_binding(model: Model, task: BindingTask, site: str, rank: int = 16, steps: int = 300, lr: float = 0.01,
                test_size: float = 0.25, seed: int = 0) -> BindingResult:  # fmt: skip
    """Learn ``U`` [d, rank] so each entity's own attribute scores highest; accuracy held out and on stories.

    >>> res = fit_binding(model, binding_task(model), "blocks.8.hook_resid_post")
    """
    if not isinstance(task, BindingTask):
        raise TypeError(f"task must be a BindingTask (ilab.probes.binding_task), got {type(task).__name__}.")
    parsed = model.parse_site(site)
    d = model.site_dim(parsed.name)
    rank = check_int("rank", rank, minimum=1)
    if rank > d:
        raise ValueError(f"rank={rank} is larger than the width of {parsed.name} (d={d}).")
    steps = check_int("steps", steps, minimum=1)
    lr = check_number(lr, "lr")
    test_size = check_fraction("test_size", test_size)
    if lr <= 0:
        raise ValueError(f"lr must be positive, got {lr}.")
    ent, att = read_tokens(model, task, parsed.name)
    s_ent, s_att = read_tokens(model, task, parsed.name, story=True)
    perm = torch.randperm(len(task), generator=torch.Generator().manual_seed(seed))
    n_test = max(1, round(test_size * len(task)))
    test, train = perm[:n_test], perm[n_test:]
    mean = torch.cat([ent[train], att[train]], 1).reshape(-1, d).mean(0)
    scale = float(torch.cat([ent[train], att[train]], 1).reshape(-1, d).sub(mean).norm(dim=-1).mean())
    gen = torch.Generator().manual_seed(seed)
    U = (torch.randn(d, rank, generator=gen) / (scale * rank**0.25)).requires_grad_(True)
    opt = torch.optim.Adam([U], lr=lr / scale)
    target = torch.arange(2).repeat(len(train))
    losses = []
    for _ in range(steps):
        s = scores(U, mean, ent[train], att[train])
        loss = torch.nn.functional.cross_entropy(s.reshape(-1, 2), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    U = U.detach()
    return BindingResult(parsed.name, U, mean, _accuracy(scores(U, mean, ent[test], att[test])),
                         _accuracy(scores(U, mean, ent[train], att[train])),
                         _accuracy(scores(U, mean, s_ent, s_att)), 0.5, losses)  # fmt: skip
