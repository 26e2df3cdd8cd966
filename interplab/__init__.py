"""interplab: a Jupyter-native interpretability lab.

Example
-------
>>> import interplab as ilab
>>> model = ilab.load_model()          # the embedded Gemma 3 270M, offline
>>> acts = model.collect(["When Mary and John went to the store"], sites=["blocks.6.hook_resid_post"])
"""

from interplab.core.activations import Activations
from interplab.core.corpus import default_corpus
from interplab.core.lens import logit_lens
from interplab.core.loading import load_model
from interplab.core.model import Model
from interplab.core.store import ActivationStore

__version__ = "0.1.0"
__all__ = ["ActivationStore", "Activations", "Model", "__version__", "default_corpus", "load_model", "logit_lens"]
