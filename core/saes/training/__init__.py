"""SAE training: the trainer over a store or a model (``trainer``) and the in-memory fit of a tensor
(``in_memory``).

Example
-------
>>> from interplab.core.saes.training import trainer
"""
