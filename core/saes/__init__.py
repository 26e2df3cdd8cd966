"""Sparse autoencoders: one base class, one file per architecture, training, files, the packaged suite.

``base.py`` holds the class every architecture extends and the registry; ``standard.py``,
``topk.py``, ``batchtopk.py``, ``jumprelu.py``, ``gated.py`` and ``matryoshka.py`` one architecture each (with its
defaults, checks and loss); ``dense.py`` and ``sparse.py`` the fast training kernels; ``train.py``
the trainer (it names no architecture); ``io.py`` SAELens, Gemma Scope and dictionary_learning
files; ``pretrained.py`` the suite shipped for the embedded model; ``releases.py`` SAELens releases by
name and id (Gemma Scope 2), fetched from the hub.

Example
-------
>>> from interplab.core.saes import SAE
>>> sae = SAE.create("topk", d_in=640, d_sae=4096, k=32, site="blocks.6.hook_resid_post")
>>> sae = SAE.load("embedded", layer=6)
"""

from . import io, pretrained, releases, transcoder_releases  # noqa: F401  (they provide SAE.load, SAE.save)
from .base import REGISTRY, SAE, SAEConfig, arch_class, sae_fingerprint
from .batchtopk import BatchTopKSAE
from .gated import GatedSAE
from .jumprelu import JumpReLUSAE
from .matryoshka import MatryoshkaSAE
from .standard import StandardSAE
from .topk import TopKSAE
from .training import trainer as train  # noqa: F401  (they provide SAE.load, SAE.save, SAE.train_many)

__all__ = [
    "REGISTRY",
    "SAE",
    "BatchTopKSAE",
    "GatedSAE",
    "JumpReLUSAE",
    "MatryoshkaSAE",
    "SAEConfig",
    "StandardSAE",
    "TopKSAE",
    "arch_class",
    "sae_fingerprint",
]
