"""Jobs that combine several capabilities: long remote work as resumable background jobs on NDIF
(``background``), the packaged SAE suite's training (``suite``), the embedded transcoders' (``transcoders``) and
the embedded cross-layer transcoder's (``clt``).

Example
-------
>>> import interplab as ilab
>>> job = ilab.jobs.cache(remote_model, "default", "blocks.6.hook_resid_post", "acts/", n_tokens=100_000)
>>> ilab.jobs.list_jobs()
"""

from .background import Job, cache, feature_data, jobs_dir, list_jobs, resume
from .suite import train_suite

__all__ = ["Job", "cache", "feature_data", "jobs_dir", "list_jobs", "resume", "train_suite"]
