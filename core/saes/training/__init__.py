"""SAE training: the trainer over a store or a model (``trainer``, with what a call asks for checked in
``specs``) and the in-memory fit of a tensor (``in_memory``).

Example
-------
>>> from interplab.core.saes.training import trainer
"""
