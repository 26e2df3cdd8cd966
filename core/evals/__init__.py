"""Evaluating SAEs: reconstruction, and suites that ask whether latents *mean* something.

``reconstruction.py`` measures MSE, explained variance, L0, dead and dense latents, and the
cross-entropy with the reconstruction spliced in (CE loss recovered, KL). The suites, each callable
alone and together through :func:`evaluate` (``suites=[...]``, one tidy DataFrame):
``polysemy.py`` (PS-Eval), ``probing.py`` (SAEBench sparse probing, on ``labelled.py``'s Brown genres),
``absorption.py`` (SAEBench first-letter absorption), ``correlation.py`` (latents against a per-token
signal, with a causal check) and ``drift.py`` (attention drift after a steer or weight edit).
``knowledge_edit.py`` is a ROME-style knowledge edit (a rank-one update of an MLP's down projection,
with SADR's attention regulariser) and ``sadr.py`` what it does beyond its fact (attention drift,
distracting neighbours); ``td.py`` fits Q-learning to a model's choices in a bandit written as text
and correlates latents with its TD errors.
``pareto.py`` places a sweep of SAEs on its MSE-L0 frontier beside their PS-Eval scores.
``memorization.py`` (latent memorization, with its cross-entropy diagnostic) runs on a tiny byte-level
model trained with planted sequences (``planted.py``), not on an SAE: it is callable alone.


Example
-------
>>> result = ilab.evaluate(sae, model, texts)
>>> result.explained_variance, result.ce_loss_recovered
>>> ilab.evaluate(sae, model, texts, suites=["polysemy", "sparse_probing"]).table
"""

from .absorption import AbsorptionResult, absorption
from .correlation import CorrelationResult, correlate
from .drift import DriftResult, attention_drift, rank_one
from .knowledge_edit import RankOneEdit, rank_one_edit
from .labelled import brown_genres
from .memorization import (
    MemorizationResult,
    ce_diagnostic,
    latent_memorization,
    null_run,
    one_sided_p,
    perturbed_losses,
    uncovered_later,
)
from .pareto import ParetoResult, frontier_gap, pareto
from .planted import PlantedRun, byte_stream, plant, sequence_losses, tiny_lm, train_planted
from .polysemy import PolysemyResult, load_polysemy, polysemy, polysemy_word
from .probing import ProbingResult, sparse_probing
from .probing import pooled as pooled_activations
from .reconstruction import SAEEvaluation
from .sadr import EditEffects, edit_effects
from .suites import SUITES, SuiteResults, evaluate
from .td import Bandit, TDResult, bandit, td_latents

__all__ = [
    "SUITES",
    "AbsorptionResult",
    "Bandit",
    "CorrelationResult",
    "DriftResult",
    "EditEffects",
    "MemorizationResult",
    "ParetoResult",
    "PlantedRun",
    "PolysemyResult",
    "ProbingResult",
    "RankOneEdit",
    "SAEEvaluation",
    "SuiteResults",
    "TDResult",
    "absorption",
    "attention_drift",
    "bandit",
    "brown_genres",
    "byte_stream",
    "ce_diagnostic",
    "correlate",
    "edit_effects",
    "evaluate",
    "frontier_gap",
    "latent_memorization",
    "load_polysemy",
    "null_run",
    "one_sided_p",
    "pareto",
    "perturbed_losses",
    "plant",
    "polysemy",
    "polysemy_word",
    "pooled_activations",
    "rank_one",
    "rank_one_edit",
    "sequence_losses",
    "sparse_probing",
    "td_latents",
    "tiny_lm",
    "train_planted",
    "uncovered_later",
]
