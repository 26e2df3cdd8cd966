"""Evaluating SAEs: reconstruction, and suites that ask whether latents *mean* something.

``reconstruction.py`` measures MSE, explained variance, L0, dead and dense latents, and the
cross-entropy with the reconstruction spliced in (CE loss recovered, KL). The suites, each callable
alone and together through :func:`evaluate` (``suites=[...]``, one tidy DataFrame):
``polysemy.py`` (PS-Eval), ``probing.py`` (SAEBench sparse probing, on ``labelled.py``'s Brown genres),
``absorption.py`` (SAEBench first-letter absorption), ``correlation.py`` (latents against a per-token
signal, with a causal check) and ``drift.py`` (attention drift after a steer or weight edit).


Example
-------
>>> result = ilab.evaluate(sae, model, texts)
>>> result.explained_variance, result.ce_loss_recovered
>>> ilab.evaluate(sae, model, texts, suites=["polysemy", "sparse_probing"]).table
"""

from .absorption import AbsorptionResult, absorption
from .correlation import CorrelationResult, correlate
from .drift import DriftResult, attention_drift, rank_one
from .labelled import brown_genres
from .polysemy import PolysemyResult, load_polysemy, polysemy, polysemy_word
from .probing import ProbingResult, sparse_probing
from .probing import pooled as pooled_activations
from .reconstruction import SAEEvaluation
from .suites import SUITES, SuiteResults, evaluate

__all__ = [
    "SUITES",
    "AbsorptionResult",
    "CorrelationResult",
    "DriftResult",
    "PolysemyResult",
    "ProbingResult",
    "SAEEvaluation",
    "SuiteResults",
    "absorption",
    "attention_drift",
    "brown_genres",
    "correlate",
    "evaluate",
    "load_polysemy",
    "polysemy",
    "polysemy_word",
    "pooled_activations",
    "rank_one",
    "sparse_probing",
]
