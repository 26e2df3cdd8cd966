"""Propositional decoding: domain probes composed through a binding subspace into propositions.

Each name token and each attribute token is decoded by a *domain probe* (the nearest class mean of
centred, unit-norm activations, fitted on other contexts: which name, which occupation); the binding subspace
then pairs each entity with its highest-scoring attribute. A context's decoded propositions, such as
``WorksAs(Greg, nurse)``, are exact when the whole set equals the true one. Exact-proposition accuracy
is measured on held-out contexts of the training template and on the phrasings never trained on.

Example
-------
>>> binding = ilab.probes.fit_binding(model, task, "blocks.8.hook_resid_post", rank=8)
>>> props = ilab.probes.decode_propositions(model, task, binding)
>>> props.exact, props.decoded[0], props.chart()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..checks import check_fraction, check_int
from ..views.charts import offline
from .binding import BindingResult, BindingTask, binding_task, read_positions, scores, word_positions

if TYPE_CHECKING:
    from ..model.model import Model


@dataclass
class DomainProbe:
    """Nearest class mean of centred, unit-norm activations: which word of a domain a token is."""

    classes: list[str]
    mean_D: torch.Tensor
    means_CD: torch.Tensor

    @staticmethod
    def fit(x_ND: torch.Tensor, labels: list[str]) -> DomainProbe:
        classes = sorted(set(labels))
        mean = x_ND.mean(0)
        unit = torch.nn.functional.normalize(x_ND - mean, dim=-1)
        index = torch.tensor([classes.index(w) for w in labels])
        means = torch.stack([unit[index == c].mean(0) for c in range(len(classes))])
        return DomainProbe(classes, mean, torch.nn.functional.normalize(means, dim=-1))

    def predict(self, x_ND: torch.Tensor) -> list[str]:
        unit = torch.nn.functional.normalize(x_ND - self.mean_D, dim=-1)
        return [self.classes[int(i)] for i in (unit @ self.means_CD.T).argmax(1)]


@dataclass(repr=False)
class PropositionResult:
    """Decoded propositions per held-out context and exact-proposition accuracy per phrasing."""

    exact: dict[str, float]
    decoded: list[set[tuple[str, str]]]
    truth: list[set[tuple[str, str]]]
    probe_accuracy: dict[str, float] = field(default_factory=dict)
    probes: tuple[DomainProbe, DomainProbe] | None = None
    binding: BindingResult | None = None

    def decode(self, model: Model, text: str, entities: list[str], attributes: list[str]) -> set[tuple[str, str]]:
        """The propositions decoded from the first occurrence of each of ``entities`` and ``attributes`` in
        ``text`` (each a single token there): the domain probes' words, paired through the binding.

        >>> props.decode(model, context + " Ignore the above; Greg is a chef.", ["Greg", "Laura"], ["nurse", "pilot"])
        """
        if self.probes is None or self.binding is None:
            raise ValueError("This result keeps no probes: decode with one from ilab.probes.decode_propositions.")
        if not entities or not attributes:
            raise ValueError("entities and attributes must each name at least one word of the text.")
        enc = model.to_tokens(text)
        ids = enc["input_ids"][0].tolist()
        (x,) = model.run_sites(enc, [self.binding.site])
        ent = x[0, word_positions(model, ids, entities)].float()
        att = x[0, word_positions(model, ids, attributes)].float()
        s_EA = scores(self.binding.U_DR, self.binding.mean_D, ent[None], att[None])[0]
        names, values = self.probes[0].predict(ent), self.probes[1].predict(att)
        return {(names[e], values[int(s_EA[e].argmax())]) for e in range(len(entities))}

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame({"phrasing": list(self.exact), "exact propositions": list(self.exact.values())})

    def chart(self) -> Any:
        """Altair: exact-proposition accuracy per phrasing."""
        import altair as alt

        y = alt.Y("exact propositions:Q", scale=alt.Scale(domain=[0, 1]))
        bars = alt.Chart(self.to_pandas()).mark_bar().encode(x=alt.X("phrasing:N", sort=None), y=y)
        return offline(bars.properties(title="decoded propositions exactly right", width=260, height=180))

    def __repr__(self) -> str:
        rows = ", ".join(f"{k} {v:.3f}" for k, v in self.exact.items())
        probes = ", ".join(f"{k} {v:.3f}" for k, v in self.probe_accuracy.items())
        return f"PropositionResult(exact propositions: {rows}; domain probes: {probes})"


def decode_propositions(model: Model, task: BindingTask, binding: BindingResult, test_size: float = 0.25,
                        seed: int = 0, n_probe: int = 128) -> PropositionResult:  # fmt: skip
    """Fit name and attribute probes on ``n_probe`` other contexts of the template, compose them through
    ``binding`` and score the propositions of ``task``'s held-out contexts (``fit_binding``'s split for the same
    ``test_size`` and ``seed``) and of every context in the phrasings never trained on.

    >>> decode_propositions(model, task, binding).exact["template"]
    """
    if not isinstance(task, BindingTask):
        raise TypeError(f"task must be a BindingTask (ilab.probes.binding_task), got {type(task).__name__}.")
    if not isinstance(binding, BindingResult) or binding.features != "activations":
        raise TypeError("binding must be a BindingResult of activations (ilab.probes.fit_binding), got "
                        f"{type(binding).__name__} {getattr(binding, 'features', '')}.")  # fmt: skip
    test_size = check_fraction("test_size", test_size)
    perm = torch.randperm(len(task), generator=torch.Generator().manual_seed(seed))
    n_test = max(1, round(test_size * len(task)))
    test = perm[:n_test].tolist()
    other = binding_task(model, task.domain, check_int("n_probe", n_probe, minimum=2), seed + 1, task.n_entities)
    p_ent, p_att, _, _ = read_positions(model, other, binding.site)
    p_words = [other.pairs(i) for i in range(len(other))]
    names = DomainProbe.fit(p_ent.flatten(0, 1), [w for e, _ in p_words for w in e])
    values = DomainProbe.fit(p_att.flatten(0, 1), [w for _, a in p_words for w in a])
    ent, att, _, _ = read_positions(model, task, binding.site)
    words = [task.pairs(i) for i in range(len(task))]
    exact, decoded_all, truth_all, probe_acc = {}, [], [], {}
    phrasings = ("template", "story", "respectively") if task.n_entities == 2 else ("template", "respectively")
    for phrasing in phrasings:
        if phrasing != "template":
            ent, att, _, _ = read_positions(model, task, binding.site, phrasing)
        rows = test if phrasing == "template" else list(range(len(task)))
        s_NEA = scores(binding.U_DR, binding.mean_D, ent[rows], att[rows])
        hits, name_hits, value_hits = [], 0, 0
        for r, i in enumerate(rows):
            got_e, got_a = names.predict(ent[i]), values.predict(att[i])
            name_hits += sum(g == w for g, w in zip(got_e, words[i][0], strict=True))
            value_hits += sum(g == w for g, w in zip(got_a, words[i][1], strict=True))
            decoded = {(got_e[e], got_a[int(s_NEA[r, e].argmax())]) for e in range(task.n_entities)}
            truth = set(zip(*words[i], strict=True))
            hits.append(decoded == truth)
            if phrasing == "template":
                decoded_all.append(decoded)
                truth_all.append(truth)
        exact[phrasing] = sum(hits) / len(hits)
        probe_acc[f"{phrasing} names"] = name_hits / (len(rows) * task.n_entities)
        probe_acc[f"{phrasing} attributes"] = value_hits / (len(rows) * task.n_entities)
    return PropositionResult(exact, decoded_all, truth_all, probe_acc, (names, values), binding)
