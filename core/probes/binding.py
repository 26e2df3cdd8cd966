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


#: The same propositions with the attributes first: "A nurse and a pilot, respectively Greg and Laura.".
RESPECTIVELY = {
    "occupations": "{As}, respectively {Es}.",
    "countries": "In order, {As} are where {Es} live.",
    "foods": "In order, {As} are what {Es} like.",
}
ARTICLES = {"occupations": "a ", "countries": "", "foods": ""}
#: How a context may be phrased: the training template, the story (two entities) and the reversed order.
PHRASINGS = ("template", "story", "respectively")


def _listing(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


@dataclass
class BindingTask:
    """Contexts of two or more (entity, attribute) propositions each, in several phrasings."""

    domain: str
    items: list[tuple[str, ...]]  # (entity 0, attribute 0, entity 1, attribute 1, ...)

    @property
    def n_entities(self) -> int:
        return len(self.items[0]) // 2 if self.items else 0

    def pairs(self, i: int) -> tuple[list[str], list[str]]:
        """Context ``i``'s entities and their attributes, in binding order."""
        item = self.items[check_int("i", i, 0, len(self.items) - 1)]
        return list(item[0::2]), list(item[1::2])

    def text(self, i: int, phrasing: str = "template") -> str:
        """Context ``i`` in ``phrasing``: ``"template"`` (one sentence per entity, attribute after its entity),
        ``"story"`` (two entities, never used in training) or ``"respectively"`` (attributes first)."""
        if phrasing not in PHRASINGS:
            raise ValueError(f"phrasing={phrasing!r} is not one of {PHRASINGS}.")
        if phrasing == "story":
            return self.story(i)
        ents, atts = self.pairs(i)
        if phrasing == "respectively":
            out = RESPECTIVELY[self.domain].format(As=_listing([ARTICLES[self.domain] + a for a in atts]),
                                                   Es=_listing(ents))  # fmt: skip
            return out[0].upper() + out[1:]
        return " ".join(PHRASES[self.domain].format(e=e, a=a) for e, a in zip(ents, atts, strict=True))

    def story(self, i: int) -> str:
        """Context ``i`` in the story phrasing (two entities; never used in training)."""
        ents, atts = self.pairs(i)
        if len(ents) != 2:
            raise ValueError(f"The story phrasing has two entities; this task has {len(ents)}.")
        return STORIES[self.domain].format(e0=ents[0], a0=atts[0], e1=ents[1], a1=atts[1])

    def __len__(self) -> int:
        return len(self.items)


def binding_task(model: Model, domain: str = "occupations", n: int = 64, seed: int = 0, entities: int = 2
                 ) -> BindingTask:  # fmt: skip
    """``n`` contexts of ``entities`` distinct names and distinct attributes of ``domain``, all single tokens.

    >>> task = binding_task(model, "countries", n=32, entities=3)
    """
    if domain not in DOMAINS:
        raise ValueError(f"domain={domain!r} is not one of {tuple(DOMAINS)}.")
    n = check_int("n", n, minimum=2)
    entities = check_int("entities", entities, 2, 4)
    names, attrs = single_tokens(model, NAMES), single_tokens(model, DOMAINS[domain])
    if len(names) < entities or len(attrs) < entities:
        count = ("two", "three", "four")[entities - 2]
        raise ValueError(f"Fewer than {count} names or {domain} are single tokens for "
                         f"{getattr(model, 'name', model)!r}.")  # fmt: skip
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(n):
        ents = rng.choice(names, entities, replace=False).tolist()
        atts = rng.choice(attrs, entities, replace=False).tolist()
        items.append(tuple(w for pair in zip(ents, atts, strict=True) for w in pair))
    return BindingTask(domain, items)


def word_positions(model: Model, ids: list[int], words: list[str]) -> list[int]:
    """Index of the first occurrence of each word's token in ``ids``."""
    out = []
    for w in words:
        found = [ids.index(i) for i in _token_ids(model, w) if i in ids]
        if not found:
            raise ValueError(f"{w!r} is not a token of the context {model.tokenizer.decode(ids)!r}.")
        out.append(min(found))
    return out


def read_positions(model: Model, task: BindingTask, site: str, phrasing: str = "template", batch_size: int = 8
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """Entity and attribute activations, each [n, entities, d] float32, and their token positions, each
    [n, entities] (counted from the context's first token; one pass per batch)."""
    texts = [task.text(i, phrasing) for i in range(len(task))]
    ents, atts, ent_pos, att_pos = [], [], [], []
    for start in range(0, len(texts), batch_size):
        enc = model.to_tokens(texts[start : start + batch_size])
        (x,) = model.run_sites(enc, [site])
        for r in range(x.shape[0]):
            words_e, words_a = task.pairs(start + r)
            ids = enc["input_ids"][r][enc["attention_mask"][r].bool()].tolist()
            offset = int((~enc["attention_mask"][r].bool()).sum()) if model.tokenizer.padding_side == "left" else 0
            pe, pa = word_positions(model, ids, words_e), word_positions(model, ids, words_a)
            ents.append(x[r, [offset + p for p in pe]].float())
            atts.append(x[r, [offset + p for p in pa]].float())
            ent_pos.append(torch.tensor(pe))
            att_pos.append(torch.tensor(pa))
    return torch.stack(ents), torch.stack(atts), torch.stack(ent_pos), torch.stack(att_pos)


def read_tokens(model: Model, task: BindingTask, site: str, story: bool = False, batch_size: int = 8
                ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Entity and attribute activations, each [n, entities, d] float32 (one pass per batch)."""
    ent, att, _, _ = read_positions(model, task, site, "story" if story else "template", batch_size)
    return ent, att


def position_code(pos_NE: torch.Tensor, dim: int = 32) -> torch.Tensor:
    """A sinusoidal code [n, entities, dim] of token positions: what an order-only probe sees instead of activations."""
    freqs = 1.0 / (100.0 ** (torch.arange(0, dim, 2).float() / dim))
    angles = pos_NE.float()[..., None] * freqs
    return torch.cat([angles.sin(), angles.cos()], -1)


def scores(U_DR: torch.Tensor, mean_D: torch.Tensor, ent_NED: torch.Tensor, att_NAD: torch.Tensor) -> torch.Tensor:
    """Binding similarities [n, entities, attributes] (activations centred on ``mean_D``)."""
    return torch.einsum("ner,nar->nea", (ent_NED - mean_D) @ U_DR, (att_NAD - mean_D) @ U_DR)


def _accuracy(s_NEA: torch.Tensor) -> float:
    bound = torch.arange(s_NEA.shape[1], device=s_NEA.device)
    return float((s_NEA.argmax(-1) == bound).float().mean()) if len(s_NEA) else float("nan")


#: What a binding probe reads at each token: the site's activations, or only the token's position (the
#: order-only baseline, :func:`position_code`).
FEATURES = ("activations", "position")


@dataclass(repr=False)
class BindingResult:
    """A learned binding subspace ``U_DR`` at ``site`` and its binding accuracy (``accuracies`` per phrasing:
    ``"template"`` on held-out contexts, the others on every context, never trained on)."""

    site: str
    U_DR: torch.Tensor
    mean_D: torch.Tensor
    accuracy: float
    train_accuracy: float
    story_accuracy: float
    chance: float
    losses: list[float] = field(default_factory=list)
    accuracies: dict[str, float] = field(default_factory=dict)
    features: str = "activations"

    def matrix(self, model: Model, text: str, entities: list[str], attributes: list[str]) -> BindingMatrix:
        """Scores of every entity against every attribute in ``text`` (each word a single token in it)."""
        if not entities or not attributes:
            raise ValueError("entities and attributes must each name at least one word of the text.")
        enc = model.to_tokens(text)
        ids = enc["input_ids"][0].tolist()
        pe, pa = word_positions(model, ids, entities), word_positions(model, ids, attributes)
        if self.features == "position":
            dim = self.mean_D.shape[0]
            e, a = position_code(torch.tensor(pe), dim), position_code(torch.tensor(pa), dim)
        else:
            (x,) = model.run_sites(enc, [self.site])
            e, a = x[0, pe].float(), x[0, pa].float()
        s = scores(self.U_DR, self.mean_D, e[None], a[None])[0]
        return BindingMatrix(list(entities), list(attributes), s.numpy())

    def to_pandas(self) -> Any:
        """One row per phrasing: its binding accuracy and chance."""
        import pandas as pd

        return pd.DataFrame({"phrasing": list(self.accuracies), "accuracy": list(self.accuracies.values()),
                             "chance": self.chance, "features": self.features})  # fmt: skip

    def chart(self) -> Any:
        """Altair: binding accuracy per phrasing, chance as a rule."""
        import altair as alt

        df = self.to_pandas()
        bars = alt.Chart(df).mark_bar().encode(x=alt.X("phrasing:N", sort=None),
                                               y=alt.Y("accuracy:Q", scale=alt.Scale(domain=[0, 1])))  # fmt: skip
        rule = alt.Chart(df.head(1)).mark_rule(color="gray", strokeDash=[4, 3]).encode(y="chance:Q")
        title = f"binding accuracy ({self.features}) at {self.site}"
        return offline((bars + rule).properties(title=title, width=260, height=180))

    def __repr__(self) -> str:
        rest = ", ".join(f"{k} {v:.3f}" for k, v in self.accuracies.items() if k != "template")
        return (
            f"BindingResult({self.site}, {self.features}, rank {self.U_DR.shape[1]}: held-out binding accuracy "
            f"{self.accuracy:.3f}, {rest}, train {self.train_accuracy:.3f}, chance {self.chance:.2f})"
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


def _check_fit(model: Model, task: Any, site: str, rank: int, steps: int, lr: float, test_size: float,
               features: str) -> tuple[str, int, int, float, float]:  # fmt: skip
    if not isinstance(task, BindingTask):
        raise TypeError(f"task must be a BindingTask (ilab.probes.binding_task), got {type(task).__name__}.")
    if features not in FEATURES:
        raise ValueError(f"features={features!r} is not one of {FEATURES}.")
    parsed = model.parse_site(site)
    d = model.site_dim(parsed.name) if features == "activations" else POSITION_DIM
    rank = check_int("rank", rank, minimum=1)
    if rank > d:
        what = f"the width of {parsed.name} (d={d})" if features == "activations" else f"the position code's {d}"
        raise ValueError(f"rank={rank} is larger than {what}.")
    check_int("steps", steps, minimum=1)
    lr = check_number(lr, "lr")
    if lr <= 0:
        raise ValueError(f"lr must be positive, got {lr}.")
    return parsed.name, d, rank, lr, check_fraction("test_size", test_size)


#: The width of the order-only baseline's position code.
POSITION_DIM = 32


def _read(model: Model, task: BindingTask, site: str, phrasing: str, features: str
          ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    ent, att, pe, pa = read_positions(model, task, site, phrasing)
    if features == "position":
        return position_code(pe, POSITION_DIM), position_code(pa, POSITION_DIM)
    return ent, att


def _train(ent: torch.Tensor, att: torch.Tensor, rank: int, steps: int, lr: float, seed: int
           ) -> tuple[torch.Tensor, torch.Tensor, list[float]]:  # fmt: skip
    """``U`` [d, rank], the centring mean and the losses: a softmax over each entity's attributes, Adam."""
    d, n_ent = ent.shape[-1], ent.shape[1]
    flat = torch.cat([ent, att], 1).reshape(-1, d)
    mean = flat.mean(0)
    scale = float(flat.sub(mean).norm(dim=-1).mean())
    gen = torch.Generator().manual_seed(seed)
    U = (torch.randn(d, rank, generator=gen) / (scale * rank**0.25)).requires_grad_(True)
    opt = torch.optim.Adam([U], lr=lr / scale)
    target = torch.arange(n_ent).repeat(len(ent))
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(scores(U, mean, ent, att).reshape(-1, n_ent), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return U.detach(), mean, losses


def fit_binding(model: Model, task: BindingTask, site: str, rank: int = 16, steps: int = 300, lr: float = 0.01,
                test_size: float = 0.25, seed: int = 0, features: str = "activations") -> BindingResult:  # fmt: skip
    """Learn ``U`` [d, rank] so each entity's own attribute scores highest; accuracy on held-out contexts and on
    the phrasings never trained on (the story with two entities, the reversed "respectively" order).

    ``features="position"`` is the order-only baseline: the same probe on a code of each token's position alone.

    >>> res = fit_binding(model, binding_task(model), "blocks.8.hook_resid_post")
    >>> order = fit_binding(model, binding_task(model), "blocks.8.hook_resid_post", rank=8, features="position")
    """
    site, _, rank, lr, test_size = _check_fit(model, task, site, rank, steps, lr, test_size, features)
    ent, att = _read(model, task, site, "template", features)
    perm = torch.randperm(len(task), generator=torch.Generator().manual_seed(seed))
    n_test = max(1, round(test_size * len(task)))
    test, train = perm[:n_test], perm[n_test:]
    U, mean, losses = _train(ent[train], att[train], rank, steps, lr, seed)
    accuracies = {"template": _accuracy(scores(U, mean, ent[test], att[test]))}
    for phrasing in ("story", "respectively") if task.n_entities == 2 else ("respectively",):
        accuracies[phrasing] = _accuracy(scores(U, mean, *_read(model, task, site, phrasing, features)))
    return BindingResult(site, U, mean, accuracies["template"], _accuracy(scores(U, mean, ent[train], att[train])),
                         accuracies.get("story", float("nan")), 1 / task.n_entities, losses, accuracies,
                         features)  # fmt: skip
