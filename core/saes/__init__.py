"""Sparse autoencoders: one base class, one file per architecture, training, formats."""

from .base import REGISTRY, SAE, SAEConfig, arch_class
from .batchtopk import BatchTopKSAE
from .gated import GatedSAE
from .jumprelu import JumpReLUSAE
from .standard import StandardSAE
from .topk import TopKSAE

__all__ = [
    "REGISTRY",
    "SAE",
    "BatchTopKSAE",
    "GatedSAE",
    "JumpReLUSAE",
    "SAEConfig",
    "StandardSAE",
    "TopKSAE",
    "arch_class",
]
