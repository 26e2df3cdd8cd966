"""Sparse autoencoders: one base class, one file per architecture, training, files, the packaged suite.

``base.py`` holds the class every architecture extends and the registry, ``config.py`` what an SAE is
(:class:`SAEConfig`) and the checks every config passes; ``standard.py``,
``topk.py``, ``batchtopk.py``, ``jumprelu.py``, ``gated.py`` and ``matryoshka.py`` one architecture each (with its
defaults, checks and loss); ``kernels/`` the fast training kernels; ``training/`` the trainer (it names no
architecture: :func:`train_sae`, :func:`train_saes`); ``io.py`` reads SAELens, Gemma Scope and
dictionary_learning files and ``writer.py`` writes SAELens folders; ``pretrained.py`` the suite shipped for
the embedded model; ``releases.py`` SAELens releases by name and id (Gemma Scope 2), fetched from the hub;
``loader.py`` :func:`load_sae`, which reads any of them.

Example
-------
>>> from interplab.core.saes import SAE, load_sae, train_sae
>>> sae = SAE.create("topk", d_in=640, d_sae=4096, k=32, site="blocks.6.hook_resid_post")
>>> sae = load_sae("embedded", layer=6)
"""

from .base import REGISTRY, SAE, arch_class, sae_fingerprint
from .batchtopk import BatchTopKSAE
from .config import SAEConfig
from .gated import GatedSAE
from .jumprelu import JumpReLUSAE
from .loader import load_sae
from .matryoshka import MatryoshkaSAE
from .standard import StandardSAE
from .topk import TopKSAE
from .training import train_sae, train_saes

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
    "load_sae",
    "sae_fingerprint",
    "train_sae",
    "train_saes",
]
