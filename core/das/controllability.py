"""Sparse controllability, the seed's third comparison: can changing k latents edit one IOI attribute?

An *edit* takes a clean IOI prompt and one attribute (``io``: the indirect object's name, ``s``: the
subject's name, ``order``: ABBA or BABA) to a counterfactual prompt that differs only in that attribute
(another name of the data, or the first two names swapped). At the site and position:

* **target**: the top token when the counterfactual's whole activation is written into the prompt's run
  (a full patch). Only edits whose full patch changes the prompt's own top token count (``n_edits``):
  the others carry no signal at this site.
* **edit with k latents**: a dictionary codes both activations (an SAE: ``encode``; the supervised
  dictionary: one feature per attribute value, coefficient 1 for the values present); the k latents whose
  change ``|c' - c| * ||W_dec row||`` is largest are changed to the counterfactual's coefficients,
  ``x + sum (c'_l - c_l) W_dec[l]`` (the rest of ``x``, the dictionary's error included, is kept).
* **success**: the edited run's top token is the target. ``success`` is the share of edits that succeed.

Every ``k`` is checked (1 <= k <= the smallest dictionary's number of latents) before any forward pass.

Example
-------
>>> rows = controllability(model, pairs, attrs, sup.site, sup.features, {"suite": sae}, ks=[1, 2, 4, 8])
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..checks import check_int
from ..patching.prompts import PromptPairs
from ..saes import SAE
from .intervene import Prepared, run, source_values

if TYPE_CHECKING:
    from ..model.model import Model

ATTRIBUTES = ("io", "s", "order")
Features = Mapping[str, Mapping[str, torch.Tensor]]


def check_ks(ks: Any, sizes: Mapping[str, int]) -> list[int]:
    """``ks`` as a sorted list of distinct ints in ``1..min(sizes)`` (``sizes``: each dictionary's latents)."""
    if isinstance(ks, int) and not isinstance(ks, bool):
        ks = [ks]
    if isinstance(ks, (str, bytes)) or not isinstance(ks, Sequence) or not ks:
        raise TypeError(f"ks must be a non-empty list of latent counts, got {ks!r}.")
    name, smallest = min(sizes.items(), key=lambda kv: kv[1])
    out = []
    for k in ks:
        k = check_int("k", k, minimum=1)
        if k > smallest:
            raise ValueError(f"k={k} is larger than the dictionary {name!r}, which has {smallest} latents: "
                             f"k must be in 1..{smallest}.")  # fmt: skip
        out.append(k)
    return sorted(set(out))


def _swap_first(text: str, a: str, b: str) -> str:
    """``text`` with the first whole-word occurrences of the names ``a`` and ``b`` exchanged."""
    ma, mb = (re.search(rf"(?<!\w){re.escape(x)}(?!\w)", text) for x in (a, b))
    if ma is None or mb is None:
        raise ValueError(f"The names {a!r} and {b!r} are not both in the prompt {text!r}.")
    (s1, x1), (s2, x2) = sorted([(ma.span(), b), (mb.span(), a)])
    return text[: s1[0]] + x1 + text[s1[1] : s2[0]] + x2 + text[s2[1] :]


def _rename(text: str, old: str, new: str) -> str:
    return re.sub(rf"(?<!\w){re.escape(old)}(?!\w)", new, text)


def edits(pairs: PromptPairs, attrs: list[dict[str, str]]) -> list[tuple[int, str, str, dict[str, str]]]:
    """Every edit ``(prompt index, attribute, counterfactual text, counterfactual attributes)`` of the data.

    A new name is another value of the same attribute in the data (so the supervised dictionary has its
    feature), picked in turn; a prompt whose attribute has no such value gets no edit of it.
    """
    values = {a: sorted({row[a] for row in attrs}) for a in ("io", "s")}
    out = []
    for i, (text, row) in enumerate(zip(pairs.clean, attrs, strict=True)):
        io, s = row["io"], row["s"]
        for a in ("io", "s"):
            choices = [v for v in values[a] if v not in (io, s)]
            if choices:
                new = choices[i % len(choices)]
                out.append((i, a, _rename(text, row[a], new), {**row, a: new}))
        other = "BABA" if row["order"] == "ABBA" else "ABBA"
        out.append((i, "order", _swap_first(text, io, s), {**row, "order": other}))
    return out


def supervised_codes(features: Features, attrs: list[dict[str, str]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The supervised dictionary's ``features[attribute][value]`` as latents: codes [N, F] (1 for each value
    present) and W_dec [F, d]."""
    keys = [(a, v) for a in ATTRIBUTES for v in features[a]]
    W_FD = torch.stack([features[a][v] for a, v in keys])
    codes = torch.zeros(len(attrs), len(keys))
    for n, row in enumerate(attrs):
        for f, (a, v) in enumerate(keys):
            codes[n, f] = float(row[a] == v)
    return codes, W_FD


def sparse_edit(x_ND: torch.Tensor, code_NF: torch.Tensor, target_NF: torch.Tensor, W_FD: torch.Tensor, k: int
                ) -> torch.Tensor:  # fmt: skip
    """``x`` with the k latents of largest change ``|target - code| * ||W_dec row||`` moved to the target's."""
    delta_NF = target_NF - code_NF
    size_NF = delta_NF.abs() * W_FD.norm(dim=1)
    top = size_NF.topk(min(k, size_NF.shape[1]), dim=1).indices
    keep_NF = torch.zeros_like(delta_NF).scatter_(1, top, 1.0)
    return x_ND + (delta_NF * keep_NF) @ W_FD


def _top_tokens(model: Model, site: str, position: int, texts: list[str], new_ND: torch.Tensor,
                batch_size: int = 32) -> torch.Tensor:  # fmt: skip
    """Top next token of each text with ``new_ND`` written at the site and position."""
    ids = [model.to_tokens(t)["input_ids"][0] for t in texts]
    dummy = torch.zeros(len(texts), dtype=torch.long)
    prep = Prepared(site, [position], ids, new_ND[:, None], dummy, None)
    out = []
    for start in range(0, len(texts), batch_size):
        idx = torch.arange(start, min(start + batch_size, len(texts)))
        with torch.no_grad():
            out.append(run(model, prep, idx, None).argmax(1))
    return torch.cat(out)


def controllability(model: Model, pairs: PromptPairs, attrs: list[dict[str, str]], site: str, features: Features,
                    saes: Mapping[str, SAE], ks: Sequence[int], position: int = -1, x_ND: torch.Tensor | None = None
                    ) -> Any:  # fmt: skip
    """A DataFrame (dictionary, attribute, k, success, n_edits): the share of edits that k latents achieve.

    ``attrs``: each clean prompt's attributes; ``features``: the supervised dictionary's; ``ks`` already
    checked (:func:`check_ks`); ``x_ND``: the clean activations at ``site`` if already read.
    """
    import pandas as pd

    todo = edits(pairs, attrs)
    if x_ND is None:
        x_ND = source_values(model, site, pairs.clean, [position])[:, 0].float()
    rows_M = torch.tensor([i for i, *_ in todo])
    texts = [pairs.clean[i] for i in rows_M.tolist()]
    x_MD = x_ND[rows_M]
    cf_MD = source_values(model, site, [t for _, _, t, _ in todo], [position])[:, 0].float()
    own_M = _top_tokens(model, site, position, pairs.clean, x_ND)[rows_M]
    target_M = _top_tokens(model, site, position, texts, cf_MD)
    live_M = target_M != own_M
    codes = {"supervised": (supervised_codes(features, attrs)[0][rows_M],
                            supervised_codes(features, [c for *_, c in todo]))}  # fmt: skip
    for name, sae in saes.items():
        with torch.no_grad():
            code_MF, target_MF = (sae.encode(v.to(sae.W_dec.dtype)).float().to(v.device) for v in (x_MD, cf_MD))
        codes[name] = (code_MF, (target_MF, sae.W_dec.detach().float().to(x_MD.device)))
    out = []
    live = live_M.nonzero()[:, 0]  # only edits whose full patch changes the answer are run and counted
    live_texts = [texts[m] for m in live.tolist()]
    for name, (code_MF, (target_MF, W_FD)) in codes.items():
        for k in ks:
            hit_M = torch.zeros(len(todo), dtype=torch.bool)
            if len(live):
                edited_LD = sparse_edit(x_MD[live], code_MF[live], target_MF[live], W_FD, k)
                hit_M[live] = _top_tokens(model, site, position, live_texts, edited_LD) == target_M[live]
            for a in ATTRIBUTES:
                mask = live_M & torch.tensor([e[1] == a for e in todo], dtype=torch.bool)
                n = int(mask.sum())
                share = float(hit_M[mask].float().mean()) if n else float("nan")
                out.append({"dictionary": name, "attribute": a, "k": k, "success": share, "n_edits": n})
    return pd.DataFrame(out)
