"""Circuits: attribution graphs over transcoders, their pruning and scores, and interventions on features.

``replacement.py`` the linearised replacement model (frozen attention patterns and norm scales, MLP
outputs as leaves), ``attribute.py`` the graph build from batched backward passes, ``prune.py``
influence, pruning and scores, ``graph.py`` the :class:`Graph` result (files, viewer JSON),
``view.py`` what the CircuitGraph widget draws (the readable default pruning), ``cards.py`` feature
cards from the transcoders, ``interventions.py`` features turned off or scaled in the real model,
``quality.py`` how well transcoders replace the MLPs, ``ablation.py`` a graph's top features switched off against
random ones, ``replacers.py`` per-layer transcoders and a
cross-layer transcoder (``core/saes/clt.py``, files in ``clt_io.py``: ``load_clt``) behind one interface,
``train_clt`` (``core/saes/clt_train.py``) trains one, ``qk.py`` QK attributions (a head's attention score split
into query-side and key-side sources), ``qk_heads.py`` a node's incoming attention and its strongest head's
QK contributors; edge-level circuits over heads and MLPs: ``edge_graph.py``
the nodes and edges, ``edge_forward.py`` a pass with one residual stream per input, ``edges.py`` EAP and EAP-IG
scores, ``edge_circuit.py`` circuits and their faithfulness, ``edge_view.py`` what CircuitGraph draws for one.

Example
-------
>>> g = ilab.circuits.attribute(model, transcoders, "The capital of France is")
>>> g.prune(0.8, 0.98).nodes.sum(), g.scores()
"""

from ..saes.clt_io import load_clt, save_clt
from ..saes.clt_train import train_clt
from ..saes.pretrained import load_embedded_clt as embedded_clt
from ..saes.pretrained import load_embedded_transcoders as embedded_transcoders
from .ablation import AblationControl, ablation_control, random_features, top_features
from .attribute import attribute, check_transcoders
from .cards import feature_cards
from .edge_circuit import Circuit
from .edges import EdgeScores, edges
from .graph import Graph
from .interventions import InterventionResult, intervene
from .prune import Pruned, graph_scores, influence, prune
from .qk import qk
from .qk_heads import QKResult, qk_cards, qk_edge
from .quality import transcoder_quality

__all__ = [
    "AblationControl", "Circuit", "EdgeScores", "Graph", "InterventionResult", "Pruned", "QKResult",
    "ablation_control", "attribute", "check_transcoders", "edges", "embedded_clt", "embedded_transcoders",
    "feature_cards", "graph_scores", "influence", "intervene", "load_clt", "prune", "qk", "qk_cards", "qk_edge",
    "random_features", "save_clt", "top_features", "train_clt", "transcoder_quality",
]  # fmt: skip
