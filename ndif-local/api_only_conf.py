"""gunicorn settings of a second NDIF API on the same services, without its own queue dispatcher.

``Server.start_api`` runs one with different settings (e.g. ``NDIF_MIN_NNSIGHT_VERSION``); the
first API's dispatcher keeps serving the shared queue.
"""

from ndif.services.api.gunicorn_conf import post_fork, timeout, worker_class, workers  # noqa: F401


def on_starting(server):
    """No dispatcher here: one already drains the shared queue."""
