"""Automatic explanations of latents kept with their feature data, beside the labels set by hand.

A record per latent: the explanation's ``text``, its ``explainer``, and, when scored, the ``scorer`` and ``metric``
with the explanation's ``score`` and the ``shuffled`` and ``constant`` baselines of the same run. A label set by hand
wins over the automatic explanation wherever a latent is named (:func:`shown_label` says which one shows).

Example
-------
>>> data.set_explanations(explained, scores)        # from ilab.autointerp.explain / score
>>> data.explanations[7]
{'text': 'the word Paris', 'explainer': 'smollm2-135m-instruct', 'scorer': 'detection', 'metric': 'auroc',
 'score': 0.93, 'shuffled': 0.52, 'constant': 0.5}
>>> shown_label(data.labels, data.explanations, 7)
('the word Paris', 'auto')
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..storage.readers import Fields, FileError
from .labels import MAX_LABEL, check_label

#: The numbers of a record (None when not scored, or a score that came out undefined).
NUMBERS = ("score", "shuffled", "constant")
#: Its texts.
TEXTS = ("text", "explainer", "scorer", "metric")


def _number(value: Any) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else float(value)


def explanation_records(
    explained: Any, scores: Any = None, scorer: str = "detection", metric: str = "auroc"
) -> dict[int, dict[str, Any]]:
    """One record per explained latent from ``explained`` (``ilab.autointerp.explain``'s result: ``texts``,
    ``explainer``) and, when given, ``scores`` (``ilab.autointerp.score``'s: its ``table`` rows of ``scorer`` and
    ``metric``)."""
    texts = getattr(explained, "texts", None)
    if not isinstance(texts, dict):
        raise TypeError(f"explained must be what ilab.autointerp.explain gives, not {type(explained).__name__}.")
    records: dict[int, dict[str, Any]] = {}
    for i, text in texts.items():
        records[int(i)] = {"text": check_label(str(text)), "explainer": str(getattr(explained, "explainer", "")),
                           "scorer": "", "metric": "", "score": None, "shuffled": None, "constant": None}  # fmt: skip
    if scores is None:
        return records
    table = getattr(scores, "table", None)
    if table is None or not {"latent", "scorer", "metric", *NUMBERS[1:], "explanation"} <= set(table.columns):
        raise TypeError(f"scores must be what ilab.autointerp.score gives, not {type(scores).__name__}.")
    rows = table[(table["scorer"] == scorer) & (table["metric"] == metric)]
    if rows.empty:
        found = sorted({(str(s), str(m)) for s, m in zip(table["scorer"], table["metric"])})
        raise ValueError(f"scores hold no {scorer} {metric}; they hold {found}.")
    for row in rows.itertuples():
        record = records.get(int(row.latent))
        if record is not None:
            record.update(scorer=scorer, metric=metric, score=_number(row.explanation),
                          shuffled=_number(row.shuffled), constant=_number(row.constant))  # fmt: skip
    return records


def check_records(file: str | Path, raw: Any, d_sae: int, where: str = "explanations") -> dict[int, dict[str, Any]]:
    """Explanation records as saved (``{"7": {...}}``), every id a latent, texts short strings, numbers finite
    or null; a :class:`FileError` naming the first that is not."""
    if not isinstance(raw, dict):
        raise FileError(file, where, f"is a {type(raw).__name__}, not an object of latent ids")
    out: dict[int, dict[str, Any]] = {}
    for key, value in raw.items():
        if not (isinstance(key, str) and key.isdigit() and int(key) < d_sae):
            raise FileError(file, f"{where}[{key!r}]", f"is not a latent id (0..{d_sae - 1})")
        fields = Fields(file, value, f"{where}[{key!r}]")
        record: dict[str, Any] = {k: fields.str(k, "") for k in TEXTS}
        if any(len(t) > MAX_LABEL for t in record.values()):
            raise FileError(file, f"{where}[{key!r}]", f"holds a text over {MAX_LABEL} characters")
        for k in NUMBERS:
            number = fields.raw(k, None)
            if number is not None and (isinstance(number, bool) or not isinstance(number, (int, float))
                                       or not math.isfinite(number)):  # fmt: skip
                raise FileError(file, f"{where}[{key!r}].{k}", f"is {number!r:.40}, not a finite number or null")
            record[k] = None if number is None else float(number)
        out[int(key)] = record
    return out


def shown_label(labels: dict[int, str], explanations: dict[int, dict[str, Any]], i: int) -> tuple[str, str]:
    """(the text a latent is named by, where it comes from: ``"hand"``, ``"auto"`` or ``""``): a label set by hand
    wins over the automatic explanation."""
    if labels.get(int(i)):
        return labels[int(i)], "hand"
    record = explanations.get(int(i))
    if record and record.get("text"):
        return str(record["text"]), "auto"
    return "", ""
