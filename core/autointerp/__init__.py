"""Automated interpretability: explanations of SAE latents written by a chat model, and scores with baselines.

``explain.py`` writes one explanation per latent from its examples (:func:`explain`), ``scoring.py`` scores them
(:func:`score`: detection, fuzzing, simulation, each beside a shuffled and a constant explanation), ``clients.py``
asks a loaded chat model or an OpenAI-compatible server, ``examples.py`` turns feature data into marked text and
``prompts.py`` holds the prompts (:data:`PROMPTS`, overridable per call), ``job.py`` runs many latents as a
resumable job (:func:`explain_and_score`) and ``prefix.py`` computes a batch's shared prompt prefix once.

Example
-------
>>> data = ilab.feature_data(sae, model, "default", n_tokens=100_000)
>>> ex = ilab.autointerp.explain(data, range(10))          # the embedded SmolLM2-135M-Instruct, offline
>>> ilab.autointerp.score(data, ex).summary()              # beside the shuffled and constant baselines
"""

from .clients import chat_client
from .explain import Explanations, explain
from .job import explain_and_score
from .prompts import PROMPTS
from .scoring import SCORERS, Scores, score

__all__ = ["PROMPTS", "SCORERS", "Explanations", "Scores", "chat_client", "explain", "explain_and_score", "score"]
