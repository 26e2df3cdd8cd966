"""From a concept to its latents: the latents most active on texts with the concept and least on texts without.

Each text gives one value per latent: its activation averaged over the text's tokens (``positions="all"``, BOS
left out) or at its last token (``positions="last"``). Texts are the units, so a long text weighs no more than
a short one. A latent's score is

* ``statistic="diff"`` (default): mean value over the positive texts minus mean over the negative texts, in
  activation units;
* ``statistic="standardized"``: that difference over the pooled standard deviation across texts,
  ``sqrt((var_pos + var_neg) / 2)`` (Cohen's d), so a latent firing steadily beats one firing hugely on a
  single text.

Latents with a positive score are ranked, largest first (swap the two lists for latents of the absence of the
concept).
Latents firing on more than ``max_density`` of tokens (default 10%) are left out: the density is ``density=``
(a FeatureData, measured over its corpus, or one fraction per latent), else the SAE's stored firing rates,
else measured on the negative texts' tokens (text without the concept; measuring on all texts would count
the concept's own latents as dense when the positives are many of the tokens). See
:mod:`interplab.core.features.density`.

A ranking is a claim: check it on texts it was not made from, against a control (:meth:`Contrast.held_out`
for the found latents, :func:`text_activations` for any others, e.g. random ones).

Example
-------
>>> found = ilab.features.contrast(sae, model, ["Il pleut à Paris."], ["It rains in London."])
>>> found.ids[:5], found.scores[:5]
>>> found.held_out(sae, model, ["Le chat dort."], ["The cat sleeps."])[:5]    # > 0 where the claim holds
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..checks import check_positive_int, check_texts
from .density import MAX_DENSITY, check_density, check_max_density, latent_density, measured_density
from .labels import load_labels

if TYPE_CHECKING:
    from ..model.model import Model
    from ..saes.base import SAE

POSITIONS = ("all", "last")
STATISTICS = ("diff", "standardized")
#: Rows shown by a Contrast's repr.
REPR_ROWS = 10


@dataclass(repr=False)
class Contrast:
    """Latents ranked by how much more they fire on positive texts than on negative ones, best first.

    ``ids`` [n] int64, ``scores`` [n] (see ``statistic``), ``positive_mean`` and ``negative_mean`` [n] (per-text
    values averaged over each side), ``densities`` [n] (fraction of tokens each fires on, by ``density_source``).
    """

    ids: np.ndarray
    scores: np.ndarray
    positive_mean: np.ndarray
    negative_mean: np.ndarray
    densities: np.ndarray
    statistic: str
    positions: str
    density_filter: str
    n_positive: int
    n_negative: int
    n_left_out: int  # latents the density filter left out
    labels: dict[int, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def table(self) -> Any:
        """One row per latent (pandas): score, mean on each side, density, label."""
        import pandas as pd

        return pd.DataFrame(
            {
                "score": self.scores,
                "positive_mean": self.positive_mean,
                "negative_mean": self.negative_mean,
                "density": self.densities,
                "label": [self.labels.get(int(i), "") for i in self.ids],
            },
            index=pd.Index(self.ids, name="latent"),
        )

    def held_out(self, sae: SAE, model: Model, positive: Sequence[str], negative: Sequence[str]) -> np.ndarray:
        """The same difference for these latents on other texts: mean value on ``positive`` minus on ``negative``
        ([n] float32, the ``positions`` of the ranking). Positive where the ranking's claim holds.

        >>> found.held_out(sae, model, new_positive, new_negative)[:5]
        """
        pos = text_activations(sae, model, positive, self.positions, self.ids, name="positive")
        neg = text_activations(sae, model, negative, self.positions, self.ids, name="negative")
        return (pos.mean(0) - neg.mean(0)).astype(np.float32)

    def __repr__(self) -> str:
        head = (f"Contrast({len(self)} latents by {self.statistic} of {self.positions}-token activations, "
                f"{self.n_positive} positive vs {self.n_negative} negative texts; {self.density_filter}: "
                f"{self.n_left_out} left out)")  # fmt: skip
        rows = [f"{'latent':>7} {'score':>8} {'positive':>9} {'negative':>9} {'density':>8}  label"]
        for j in range(min(REPR_ROWS, len(self))):
            i = int(self.ids[j])
            density = "?" if np.isnan(self.densities[j]) else f"{100 * self.densities[j]:.2f}%"
            rows.append(f"{i:>7} {self.scores[j]:>+8.3f} {self.positive_mean[j]:>9.3f} {self.negative_mean[j]:>9.3f} "
                        f"{density:>8}  {self.labels.get(i, '')}".rstrip())  # fmt: skip
        more = [f"... {len(self) - REPR_ROWS} more"] if len(self) > REPR_ROWS else []
        return "\n".join([head, *rows, *more])


def _check_side(name: str, texts: Any) -> list[str]:
    """One side's texts: a non-empty list of non-empty strings (a single string is refused: it is easy to mean a
    list); the error names the side."""
    if isinstance(texts, str):
        raise TypeError(f"{name} is a list of texts; got one string {texts[:40]!r}: write [{texts[:40]!r}].")
    try:
        return check_texts(texts)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{name}: {err}") from None


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {list(choices)}.")
    return str(value)


def _token_activations(sae: SAE, model: Model, texts: list[str], batch_size: int) -> Iterator[torch.Tensor]:
    """Per text, the SAE's activations on its tokens [n_tok, d_sae] (BOS left out), a batch of texts per pass."""
    site = sae.check_fits(model)
    bos = model.tokenizer.bos_token_id
    for start in range(0, len(texts), batch_size):
        enc = model.to_tokens(texts[start : start + batch_size])
        with torch.no_grad():
            resid_BTD = model.run_sites(enc, site)[0].float()
            batch = []
            for b in range(resid_BTD.shape[0]):
                keep = enc["attention_mask"][b].bool().clone()
                if bos is not None and int(enc["input_ids"][b, 0]) == bos:
                    keep[0] = False
                batch.append(sae.encode(resid_BTD[b, keep[: resid_BTD.shape[1]]]).float())
        yield from batch


def _reduce(acts_TM: torch.Tensor, positions: str) -> torch.Tensor:
    if acts_TM.shape[0] == 0:
        return torch.zeros(acts_TM.shape[1])
    return acts_TM.mean(0) if positions == "all" else acts_TM[-1]


def text_activations(
    sae: SAE,
    model: Model,
    texts: Sequence[str],
    positions: str = "all",
    latents: Sequence[int] | np.ndarray | None = None,
    batch_size: int = 8,
    *,
    name: str = "texts",
) -> np.ndarray:
    """One value per text and latent [n_texts, n_latents] float32: the latent's activation averaged over the
    text's tokens (``positions="all"``, BOS left out) or at its last token (``"last"``). ``latents`` picks
    columns (default all).

    >>> text_activations(sae, model, ["Bonjour à tous."], latents=[12, 40])
    """
    texts = _check_side(name, texts)
    positions = _check_choice("positions", positions, POSITIONS)
    check_positive_int("batch_size", batch_size)
    cols = None
    if latents is not None:
        cols = [int(i) for i in np.asarray(latents).reshape(-1)]
        bad = [i for i in cols if not 0 <= i < int(sae.d_sae)]
        if bad:
            raise ValueError(f"latents {bad[:5]} are out of range: the SAE has latents 0..{int(sae.d_sae) - 1}.")
    rows = []
    for acts_TM in _token_activations(sae, model, texts, batch_size):
        value_M = _reduce(acts_TM, positions)
        rows.append(value_M if cols is None else value_M[cols])
    return torch.stack(rows).numpy().astype(np.float32)


def _scores(pos_NM: torch.Tensor, neg_NM: torch.Tensor, statistic: str) -> torch.Tensor:
    diff = pos_NM.mean(0) - neg_NM.mean(0)
    if statistic == "diff":
        return diff
    var_pos = pos_NM.var(0, correction=1) if pos_NM.shape[0] > 1 else torch.zeros_like(diff)
    var_neg = neg_NM.var(0, correction=1) if neg_NM.shape[0] > 1 else torch.zeros_like(diff)
    return diff / ((var_pos + var_neg) / 2).sqrt().clamp_min(1e-6)


def contrast(
    sae: SAE,
    model: Model,
    positive: Sequence[str],
    negative: Sequence[str],
    *,
    positions: str = "all",
    statistic: str = "diff",
    top: int = 20,
    max_density: float | None = MAX_DENSITY,
    density: Any = None,
    batch_size: int = 8,
) -> Contrast:
    """The ``top`` latents most active on ``positive`` texts relative to ``negative`` ones (see the module
    docstring for the statistic, the positions and the density filter).

    >>> found = contrast(sae, model, french_texts, english_texts, top=10)
    >>> found            # a table: latent, score, mean on each side, density, label
    """
    positive, negative = _check_side("positive", positive), _check_side("negative", negative)
    positions = _check_choice("positions", positions, POSITIONS)
    statistic = _check_choice("statistic", statistic, STATISTICS)
    top = check_positive_int("top", top)
    max_density = check_max_density(max_density)
    check_positive_int("batch_size", batch_size)
    check_density(density, int(sae.d_sae))
    sae.check_fits(model)
    pos_NM = torch.stack([_reduce(a, positions) for a in _token_activations(sae, model, positive, batch_size)])
    fired_M, n_tokens, neg = torch.zeros(int(sae.d_sae)), 0, []
    for acts_TM in _token_activations(sae, model, negative, batch_size):
        neg.append(_reduce(acts_TM, positions))
        fired_M += (acts_TM > 0).sum(0)
        n_tokens += acts_TM.shape[0]
    neg_NM = torch.stack(neg)
    dens = latent_density(sae, density)
    if dens.values is None:
        dens = measured_density(fired_M / max(n_tokens, 1), n_tokens, "the negative texts")
    score_M = _scores(pos_NM, neg_NM, statistic)
    dense_M = dens.dense(max_density)
    n_left_out = 0
    if dense_M is not None:
        n_left_out = int(dense_M.sum())
        score_M = score_M.masked_fill(torch.from_numpy(dense_M), -float("inf"))
    order = score_M.argsort(descending=True, stable=True)[: min(top, int((score_M > 0).sum()))]
    ids = order.numpy().astype(np.int64)
    labels = load_labels(sae)
    return Contrast(
        ids=ids,
        scores=score_M[order].numpy().astype(np.float32),
        positive_mean=pos_NM.mean(0)[order].numpy().astype(np.float32),
        negative_mean=neg_NM.mean(0)[order].numpy().astype(np.float32),
        densities=(np.full(len(ids), np.nan) if dens.values is None else dens.values[ids]).astype(np.float32),
        statistic=statistic,
        positions=positions,
        density_filter=dens.describe(max_density),
        n_positive=len(positive),
        n_negative=len(negative),
        n_left_out=n_left_out,
        labels={int(i): labels[int(i)] for i in ids if int(i) in labels},
    )
