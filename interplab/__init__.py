"""interplab: a Jupyter-native interpretability lab.

Example
-------
>>> import interplab as ilab
>>> model = ilab.load_model()          # the embedded Gemma 3 270M, offline
>>> acts = model.collect(["When Mary and John went to the store"], sites=["blocks.6.hook_resid_post"])
>>> ilab.widgets.FeatureHeatmap(acts, features=[1, 2, 3])
"""

from interplab import widgets
from interplab.core import (
    agents,
    autointerp,
    circuits,
    das,
    evals,
    features,
    jobs,
    matching,
    patching,
    probes,
    steering,
    train,
    vision,
)
from interplab.core.data import ActivationStore, default_corpus
from interplab.core.evals import SAEEvaluation, evaluate
from interplab.core.features import FeatureData, feature_data
from interplab.core.loading.load import load_model
from interplab.core.memory.budget import set_memory_budget
from interplab.core.model.activations import Activations
from interplab.core.model.model import Model
from interplab.core.readout import metrics
from interplab.core.readout.lens import LogitLensResult, logit_lens
from interplab.core.readout.patchscope import PatchscopeResult, patchscope
from interplab.core.saes import SAE, load_sae, train_sae, train_saes
from interplab.core.views import AttentionData, HeatmapData, attention_data, heatmap_data
from interplab.export import export_html
from interplab.extension import load_ipython_extension, unload_ipython_extension

__version__ = "0.1.0"
__all__ = [
    "SAE",
    "ActivationStore",
    "Activations",
    "AttentionData",
    "FeatureData",
    "HeatmapData",
    "LogitLensResult",
    "Model",
    "PatchscopeResult",
    "SAEEvaluation",
    "__version__",
    "agents",
    "attention_data",
    "autointerp",
    "circuits",
    "das",
    "default_corpus",
    "evals",
    "evaluate",
    "export_html",
    "feature_data",
    "features",
    "heatmap_data",
    "jobs",
    "load_ipython_extension",
    "load_model",
    "load_sae",
    "logit_lens",
    "matching",
    "metrics",
    "patching",
    "patchscope",
    "probes",
    "set_memory_budget",
    "steering",
    "train",
    "train_sae",
    "train_saes",
    "unload_ipython_extension",
    "vision",
    "widgets",
]
