"""Activations as probe features: every layer's site in one pass per batch, only the rows a probe needs.

A sequence-level task keeps one vector per text (a token ``position`` or the ``"mean"`` over its
non-BOS tokens); a token-level task keeps the tokens that have a label. Nothing bigger than one
batch's activations is held, so a probe over 18 layers and 50k tokens needs 18 x 50k x d floats.

Example
-------
>>> sites = expand_sites(model, "resid_post")          # every layer's hook_resid_post
>>> feats = sequence_features(model, texts, sites, position=-1)   # {site: [n_texts, d]}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm

from ..checks import check_positive_int
from ..model.sites import BLOCK_KINDS, KINDS, site_name

if TYPE_CHECKING:
    from ..model.model import Model

#: Short names for every layer's site of one kind: ``sites="resid_post"``.
SHORT = {k: k for k in KINDS if k not in ("embed", "pattern")} | {"heads": "hook_z"}


def expand_sites(model: Model, sites: str | Sequence[str]) -> list[str]:
    """Site names from a kind (``"resid_post"``: every layer's) or names; checked, in forward order."""
    if isinstance(sites, str) and sites in SHORT:
        kind = SHORT[sites]
        if kind not in model.kinds:
            raise ValueError(f"sites={sites!r}: this model has no {kind} site (its kinds: {model.kinds}).")
        names = [site_name(layer, kind) for layer in range(model.n_layers)] if kind in BLOCK_KINDS else [kind]
    elif isinstance(sites, str):
        names = [sites]
    elif isinstance(sites, (list, tuple)) and sites:
        names = list(sites)
    else:
        raise TypeError(
            f"sites must be a site kind ({sorted(SHORT)}: every layer's), a site name or a list of names; "
            f"got {sites!r:.80}."
        )
    parsed = model.parse_sites(names)
    bad = [s.name for s in parsed if s.kind == "pattern"]
    if bad:
        raise ValueError(f"{bad[0]} holds attention probabilities, not one vector per token: probe another site.")
    return [s.name for s in parsed]


def _batches(model: Model, texts: list[str], batch_size: int, desc: str, progress: bool) -> Any:
    starts = range(0, len(texts), batch_size)
    for start in tqdm(starts, desc=desc, disable=not progress or len(starts) <= 1, leave=False):
        yield start, model.to_tokens(texts[start : start + batch_size])


def sequence_features(model: Model, texts: list[str], sites: list[str], position: int | str = -1,
                      batch_size: int = 8, progress: bool = True) -> dict[str, torch.Tensor]:  # fmt: skip
    """``{site: [n_texts, d]}`` float32: each text's vector at ``position`` (-1: its last token) or its mean
    (``"mean"``, the only string it takes)."""
    check_positive_int("batch_size", batch_size)
    out: dict[str, list[torch.Tensor]] = {s: [] for s in sites}
    bos = model.tokenizer.bos_token_id
    for _, enc in _batches(model, texts, batch_size, "probe features", progress):
        mask = enc["attention_mask"].bool()
        lengths = mask.sum(1)
        values = model.run_sites(enc, sites)
        for site, v in zip(sites, values, strict=True):
            v = v.float()
            if isinstance(position, int):
                cols = lengths + position if position < 0 else torch.full_like(lengths, position)
                out[site].append(v[torch.arange(len(cols)), cols])
            else:  # "mean"
                keep = mask & (enc["input_ids"] != bos) if bos is not None else mask.clone()
                keep |= mask & (keep.sum(1, keepdim=True) == 0)
                out[site].append((v * keep[..., None]).sum(1) / keep.sum(1, keepdim=True))
    return {s: torch.cat(v) for s, v in out.items()}


def token_features(model: Model, texts: list[str], labels: list[list[Any]], sites: list[str], batch_size: int = 8,
                   progress: bool = True) -> tuple[dict[str, torch.Tensor], list[Any], torch.Tensor]:  # fmt: skip
    """Features of every labelled token (a label of None is skipped): ``({site: [T, d]}, labels [T], text id [T])``."""
    check_positive_int("batch_size", batch_size)
    out: dict[str, list[torch.Tensor]] = {s: [] for s in sites}
    kept: list[Any] = []
    text_ids: list[int] = []
    for start, enc in _batches(model, texts, batch_size, "probe features", progress):
        rows, cols = [], []
        for r in range(enc["input_ids"].shape[0]):
            for c, label in enumerate(labels[start + r]):
                if label is not None:
                    rows.append(r)
                    cols.append(c)
                    kept.append(label)
                    text_ids.append(start + r)
        if not rows:
            continue
        values = model.run_sites(enc, sites)
        for site, v in zip(sites, values, strict=True):
            out[site].append(v[torch.tensor(rows), torch.tensor(cols)].float())
    if not kept:
        raise ValueError("Every token label is None: give at least one labelled token.")
    return {s: torch.cat(v) for s, v in out.items()}, kept, torch.tensor(text_ids)
