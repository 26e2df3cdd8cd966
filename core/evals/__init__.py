"""Evaluating SAEs: reconstruction, sparsity and what splicing an SAE in costs the model.

``reconstruction.py`` measures MSE, explained variance, L0, dead and dense latents, and the
cross-entropy with the reconstruction spliced in (CE loss recovered, KL).

Example
-------
>>> result = ilab.evaluate(sae, model, texts)
>>> result.explained_variance, result.ce_loss_recovered
"""

from .reconstruction import SAEEvaluation, evaluate

__all__ = ["SAEEvaluation", "evaluate"]
