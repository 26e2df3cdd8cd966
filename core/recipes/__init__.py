"""Recipes: end-to-end jobs that combine several capabilities (the packaged SAE suite's training,
long remote work as resumable background jobs).

Example
-------
>>> from interplab.core.recipes import train_suite
>>> job = ilab.jobs.cache(remote_model, "default", "blocks.6.hook_resid_post", "acts/", n_tokens=100_000)
"""

from . import jobs
from .suite import train_suite

__all__ = ["jobs", "train_suite"]
