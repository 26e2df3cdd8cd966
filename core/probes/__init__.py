"""Probes: what a model represents, read linearly.

The public namespace ``ilab.probes``. ``solver.py`` fits L2 logistic probes (scikit-learn's objective,
scipy's L-BFGS, torch maths); ``features.py`` reads activations for them; ``linear.py`` has :func:`train`
(every layer in one call) and :class:`ProbeResult`; ``binding.py`` the binding subspace of propositional
probes (which name goes with which attribute), ``propositions.py`` domain probes composed through it and
``faithful.py`` the model's answers about a context (under an injection, or biased) beside its propositions.
(Planned here: the supervised IOI dictionaries that SAEs are judged against.)

Example
-------
>>> import interplab as ilab
>>> model = ilab.load_model()
>>> res = ilab.probes.train(model, texts, labels, sites="resid_post")    # .chart(), .direction
>>> vec = ilab.steering.from_probe(res)                                   # the best layer's direction
"""

from __future__ import annotations

from .binding import BindingMatrix, BindingResult, BindingTask, binding_task, fit_binding
from .faithful import FaithfulnessResult, faithfulness, stereotype_task
from .linear import Probe, ProbeResult, train
from .propositions import PropositionResult, decode_propositions

__all__ = ["BindingMatrix", "BindingResult", "BindingTask", "FaithfulnessResult", "Probe", "ProbeResult",
           "PropositionResult", "binding_task", "decode_propositions", "faithfulness", "fit_binding", "stereotype_task",
           "train"]  # fmt: skip
