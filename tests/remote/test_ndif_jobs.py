"""Long remote work as jobs on the real NDIF: in the background, equal to local, resumable by id."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from interplab.core.jobs.background import jobs_dir

import interplab as ilab

pytestmark = [pytest.mark.ndif, pytest.mark.embedded]
TEXTS = ["When Mary and John went to the store, John gave a drink to", "The capital of France is Paris, and"] * 30
SITE = "blocks.6.hook_resid_post"
CACHE_ARGS = dict(n_tokens=320, context_size=17, batch_size=2, shard_tokens=64)


@pytest.fixture
def remote(ndif, tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPLAB_JOBS", str(tmp_path / "jobs"))  # job records of this test only
    return ilab.load_model(remote=ndif.host)


def test_a_cache_job_runs_in_the_background_and_equals_local(remote, embedded, tmp_path):
    job = ilab.jobs.cache(remote, TEXTS, SITE, tmp_path / "remote", **CACHE_ARGS)
    assert job.state == "running"  # the call returned while its requests run
    remote.logits("The notebook is free")  # and the model answers other calls meanwhile
    store = job.result(timeout=600)
    assert job.state == "done" and job.journal.sent >= 10 and not json.loads(job.journal.path.read_text())["pending"]
    local = embedded.cache(TEXTS, SITE, tmp_path / "local", **CACHE_ARGS)
    assert torch.equal(store.tokens(), local.tokens())
    torch.testing.assert_close(store.read(), local.read(), rtol=2e-3, atol=2e-3)


CHILD = """
import os, sys, time, interplab as ilab
model = ilab.load_model(remote=sys.argv[1])
job = ilab.jobs.cache(model, {texts!r}, {site!r}, sys.argv[2], **{args!r})
print(job.id, flush=True)
job.result()
"""


def test_a_job_interrupted_by_a_kernel_restart_is_picked_up_by_its_id(remote, embedded, ndif, tmp_path):
    """A separate Python (the kernel) starts the job and is killed with a request in flight; this one
    resumes the job by its id: the request in flight is polled by its NDIF id, not sent again."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(texts=TEXTS, site=SITE, args=CACHE_ARGS), ndif.host, str(tmp_path / "r")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=os.environ.copy(),
    )  # fmt: skip
    try:
        job_id = child.stdout.readline().strip()
        journal = jobs_dir() / f"{job_id}.requests.json"
        pending = None
        for _ in range(1200):  # until a shard is written and a request is in flight
            record = json.loads(journal.read_text()) if journal.exists() else {}
            if record.get("pending") and list((tmp_path / "r").glob("shard_*.safetensors")):
                pending = dict(record["pending"])
                break
            time.sleep(0.05)
        assert pending, "the job never had a request in flight after its first shard"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    job = ilab.jobs.resume(job_id, remote)
    store = job.result(timeout=600)
    assert job.journal.polled_existing == 1  # the request in flight was picked up, not sent again
    local = embedded.cache(TEXTS, SITE, tmp_path / "local", **CACHE_ARGS)
    assert store.n_tokens == local.n_tokens and torch.equal(store.tokens(), local.tokens())
    torch.testing.assert_close(store.read(), local.read(), rtol=2e-3, atol=2e-3)


def test_a_feature_scan_job(remote, embedded, tmp_path):
    sae = ilab.SAE.create("topk", d_in=640, d_sae=64, k=4, site=SITE)
    sae.init_weights(seed=3)
    kwargs = dict(n_tokens=120, seq_len=16, batch_size=4, n_top=3, n_quantile=2, context=4, n_logit=5)
    job = ilab.jobs.feature_data(sae, remote, TEXTS, path=tmp_path / "remote", **kwargs)
    data = job.result(timeout=600)
    local = ilab.feature_data(sae, embedded, TEXTS, progress=False, **kwargs)
    for key in ("density", "top_tokens", "hist_counts", "logit_top_ids", "logit_bottom_ids"):
        assert np.array_equal(getattr(data, key), getattr(local, key)), key
    np.testing.assert_allclose(data.top_acts, local.top_acts, rtol=2e-3, atol=2e-3)
