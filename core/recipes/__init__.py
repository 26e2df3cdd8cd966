"""Recipes: end-to-end jobs that combine several capabilities (the packaged SAE suite's training).

Example
-------
>>> from interplab.core.recipes import train_suite
"""

from .suite import train_suite

__all__ = ["train_suite"]
