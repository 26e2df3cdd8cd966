"""SAE training: several SAEs from one activation stream (``trainer``, with what a call asks for checked in
``specs``), one SAE (``single``), and the in-memory fit of a tensor (``in_memory``).

Example
-------
>>> from interplab.core.saes.training import train_sae, train_saes
>>> sae = train_sae(store, arch="topk", width=4096, k=32)
"""

from .single import TrainOptions, train_sae
from .trainer import train_saes

__all__ = ["TrainOptions", "train_sae", "train_saes"]
