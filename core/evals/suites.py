"""One entry point for every evaluation: ``evaluate(sae, model, texts, suites=[...])`` -> one tidy table.

Without ``suites`` it is the reconstruction evaluation (:class:`~.reconstruction.SAEEvaluation`). With
``suites`` it runs each named suite and stacks their tidy rows (``suite, site, group, metric, value``)
in one DataFrame, keeping each suite's own result (with its ``.chart()``) in ``results``:

* ``reconstruction``: MSE, explained variance, L0, CE loss recovered on ``texts``.
* ``polysemy``: PS-Eval on the built-in polysemous words.
* ``sparse_probing``: SAEBench sparse probing on ``texts`` and ``labels`` (Brown genres when no labels).
* ``absorption``: SAEBench first-letter absorption on the tokenizer's words.
* ``correlation``: latents against a per-token ``signal`` over ``texts`` (surprisal by default).

Bad input for any suite (an unknown suite, labels or a signal of the wrong length) fails before the first
forward pass. ``options={"absorption": {"n_words": 800}}`` passes settings to one suite.

Example
-------
>>> res = ilab.evaluate(sae, model, texts, suites=["reconstruction", "polysemy", "sparse_probing"])
>>> res.table.pivot_table(index="metric", columns="suite", values="value")
>>> res.chart()
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..checks import check_texts
from ..views.charts import offline
from .absorption import AbsorptionResult, absorption
from .correlation import CorrelationResult, check_signal, correlate
from .labelled import brown_genres
from .polysemy import PolysemyResult, polysemy
from .probing import ProbingResult, sparse_probing
from .reconstruction import SAEEvaluation
from .reconstruction import evaluate as evaluate_reconstruction
from .tidy import check_choices, check_sae, tidy

if TYPE_CHECKING:
    from ..model.model import Model
    from ..saes.base import SAE

SUITES = ("reconstruction", "polysemy", "sparse_probing", "absorption", "correlation")


@dataclass(repr=False)
class SuiteResults:
    """Every suite's rows in one tidy ``table`` and each suite's own result in ``results``."""

    table: pd.DataFrame
    results: dict[str, Any] = field(default_factory=dict)

    def chart(self) -> Any:
        """Each suite's chart, stacked."""
        import altair as alt

        charts = [r.chart() for r in self.results.values() if hasattr(r, "chart")]
        return offline(alt.vconcat(*charts)) if charts else None

    def __repr__(self) -> str:
        return f"SuiteResults({list(self.results)}, {len(self.table)} rows)"


def evaluate(
    sae: SAE, model: Model, texts: str | Sequence[str], suites: Sequence[str] | None = None, *,
    labels: Sequence[Any] | None = None, signal: Any = "surprisal", batch_size: int = 4, site: str | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None, dense_threshold: float = 0.1,
) -> SAEEvaluation | SuiteResults:  # fmt: skip
    """Evaluate ``sae`` on ``model``: reconstruction by default, or the named ``suites`` as one tidy table.

    >>> ilab.evaluate(sae, model, texts).explained_variance
    >>> ilab.evaluate(sae, model, texts, suites=["polysemy", "absorption"]).table
    """
    if suites is None:
        return evaluate_reconstruction(sae, model, texts, batch_size=batch_size, site=site,
                                       dense_threshold=dense_threshold)  # fmt: skip
    check_sae(sae)
    suites = check_choices("suites", suites, SUITES)
    texts = check_texts(texts)
    options = dict(options or {})
    for name in options:
        check_choices("options", [name], SUITES)
    site = sae.check_fits(model, site)
    if "correlation" in suites:
        lengths = [int(n) - 1 for n in model.to_tokens(texts)["attention_mask"].sum(1).tolist()]
        check_signal(signal, lengths)
    if "sparse_probing" in suites and labels is not None and len(labels) != len(texts):
        raise ValueError(f"labels must give one label per text: {len(texts)} texts, got {len(labels)} labels.")
    tables, results = [], {}
    res: SAEEvaluation | PolysemyResult | ProbingResult | AbsorptionResult | CorrelationResult
    for name in suites:
        opts = dict(options.get(name, {}))
        if name == "reconstruction":
            res = evaluate_reconstruction(sae, model, texts, batch_size=batch_size, site=site,
                                          dense_threshold=dense_threshold)  # fmt: skip
            tables.append(tidy(name, site, {k: v for k, v in res.to_dict().items() if k != "n_tokens"}))
        elif name == "polysemy":
            res = polysemy(sae, model, site=site, **opts)
            tables.append(res.table)
        elif name == "sparse_probing":
            probe_texts, probe_labels = (texts, labels) if labels is not None else brown_genres()
            res = sparse_probing(sae, model, probe_texts, probe_labels, site=site, **opts)
            tables.append(res.table)
        elif name == "absorption":
            res = absorption(sae, model, site=site, **opts)
            tables.append(res.table)
        else:
            res = correlate(sae, model, texts, signal, site=site, **opts)
            tables.append(res.table)
        results[name] = res
    return SuiteResults(table=pd.concat(tables, ignore_index=True), results=results)
