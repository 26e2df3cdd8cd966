"""ilab.evaluate(..., suites=[...]): one tidy table equal to the suites run alone; bad input before any pass."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from interplab.core.evals.tidy import COLUMNS

import interplab as ilab
from tests.evals.test_polysemy import WORDS as POLY_WORDS
from tests.evals.test_probing import _data
from tests.tiny import TEXTS, tiny_model

SITE = "blocks.0.hook_resid_post"
ABSORB = ["sat", "store", "small", "sad", "slow", "dog", "day", "drink", "big", "blue", "bird", "tree", "the"]
OPTIONS = {"polysemy": {"words": POLY_WORDS}, "absorption": {"words": ABSORB, "min_words": 3},
           "sparse_probing": {"ks": (1, 2)}}  # fmt: skip


def test_suites_stack_into_one_tidy_table() -> None:
    model = tiny_model("gpt2")
    sae = ilab.SAE.create("standard", d_in=32, d_sae=40, site=SITE)
    texts, labels = _data()
    res = ilab.evaluate(sae, model, texts, suites=list(ilab.evals.SUITES), labels=labels, options=OPTIONS)
    assert list(res.table.columns) == COLUMNS
    assert list(res.results) == list(ilab.evals.SUITES)
    assert set(res.table.suite) == set(ilab.evals.SUITES)
    alone = [
        ilab.evals.polysemy(sae, model, POLY_WORDS).table,
        ilab.evals.sparse_probing(sae, model, texts, labels, ks=(1, 2)).table,
        ilab.evals.absorption(sae, model, ABSORB, min_words=3).table,
        ilab.evals.correlate(sae, model, texts, "surprisal").table,
    ]
    for table in alone:
        suite = table.suite.iloc[0]
        got = res.table[res.table.suite == suite].reset_index(drop=True)
        pd.testing.assert_frame_equal(got, table.reset_index(drop=True))
    recon = ilab.evaluate(sae, model, texts)
    row = res.table[(res.table.suite == "reconstruction") & (res.table.metric == "explained_variance")]
    assert float(row.value.iloc[0]) == pytest.approx(recon.explained_variance)
    assert res.chart() is not None


def test_bad_input_fails_before_any_forward_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_model("gpt2")
    monkeypatch.setattr(type(model), "run_sites", lambda *a, **k: pytest.fail("a forward pass ran"))
    monkeypatch.setattr(model.nn, "trace", lambda *a, **k: pytest.fail("a forward pass ran"))
    sae = ilab.SAE.create("standard", d_in=32, d_sae=40, site=SITE)
    with pytest.raises(ValueError, match=r"suites: 'ppl' is not one of \['reconstruction'"):
        ilab.evaluate(sae, model, TEXTS, suites=["polysemy", "ppl"])
    with pytest.raises(ValueError, match=r"signal\[0\] has 2 values, but text 0 has 6 tokens"):
        ilab.evaluate(
            sae, model, TEXTS, suites=["reconstruction", "correlation"], signal=[np.zeros(2), np.zeros(14), np.zeros(9)]
        )
    with pytest.raises(ValueError, match="one label per text: 3 texts, got 2 labels"):
        ilab.evaluate(sae, model, TEXTS, suites=["reconstruction", "sparse_probing"], labels=["a", "b"])
