"""Bad inputs of ilab.jobs: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

import interplab as ilab
from tests.contracts.rows import SITE, Row, V
from tests.tiny import TEXTS

ROWS: list[Row] = [
    Row(
        "ilab.jobs.cache",
        lambda c: ilab.jobs.cache(c.model, TEXTS, SITE, c.tmp / "job"),
        V,
        "Jobs are for models on an NDIF server",
    ),
    Row(
        "ilab.jobs.feature_data",
        lambda c: ilab.jobs.feature_data(c.sae, c.model, TEXTS, path=c.tmp / "jobf"),
        V,
        "Jobs are for models on an NDIF server",
    ),
    Row("ilab.jobs.resume", lambda c: ilab.jobs.resume("nope"), V, "No job 'nope' in .*jobs there: none"),
]

EXEMPT: dict[str, str] = {
    "ilab.jobs.train_suite": "the packaged suite's training recipe (python -m interplab train-suite)",
    "ilab.jobs.Job": "made by ilab.jobs.cache / feature_data / resume (which have rows)",
    "ilab.jobs.Job.result": "a Job exists only for a model on an NDIF server: tests/remote/test_ndif_jobs.py",
    "ilab.jobs.jobs_dir": "takes no arguments",
    "ilab.jobs.list_jobs": "takes no arguments",
}
