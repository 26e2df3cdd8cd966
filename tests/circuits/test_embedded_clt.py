"""The cross-layer transcoder shipped for the embedded Gemma 3 270M: found through the transcoders' data package
(a clear error when it is missing or too old), small enough to commit, as good on held-out text as its README
says, and the notebook's ablation claim (09b) fails when random features stand in for the graph's top ones."""

from __future__ import annotations

import math
import re
import types
from pathlib import Path

import pytest
from interplab.core.data.corpus import default_corpus
from interplab.core.saes import pretrained
from interplab.core.saes.pretrained import clt_folder

import interplab as ilab

#: Floors under the CLT's explained variance of hook_mlp_out on two held-out passages, below what was measured when
#: it was shipped (the README's table, 16 passages: every layer 0.25 .. 0.97, mean 0.58; the replacement loss 11.5
#: against the real model's 4.05); a CLT loaded wrongly (scales not folded, layers shifted) falls far below.
EV_FLOOR = 0.1
EV_MEAN_FLOOR = 0.4
CE_BOUND = 20.0
#: The repository's weights (the SAE suite 63 MB, the per-layer transcoders 39 MB, the CLT 37 MB) stay under this.
WEIGHTS_BUDGET = 145e6


def test_the_repository_weights_stay_within_their_budget():
    pretrained_dir = Path(__file__).parents[2] / "core" / "saes" / "pretrained"
    files = [p for p in pretrained_dir.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < WEIGHTS_BUDGET


def test_the_clt_is_small_and_has_a_quality_table():
    folder = clt_folder()
    size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    assert size < 40e6  # comparable to the per-layer transcoders' 37 MB; the repository's weights stay small
    readme = (folder / "README.md").read_text()
    rows = re.findall(r"^\| (\d+) \| (-?[\d.]+) \| ([\d.]+) \|$", readme, flags=re.M)
    assert [int(r[0]) for r in rows] == list(range(18))
    assert "python -m interplab train-clt" in readme


def test_a_data_package_without_the_clt_is_named_with_the_version_to_install(monkeypatch):
    old = types.SimpleNamespace(FOLDER="/nowhere")  # a 0.1.0 package: per-layer transcoders only
    monkeypatch.setattr(pretrained.importlib, "import_module", lambda name: old)
    with pytest.raises(ModuleNotFoundError, match=r"predates the cross-layer transcoder: .*>=0\.1\.1"):
        clt_folder()


def test_a_missing_data_package_is_named(monkeypatch):
    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(pretrained.importlib, "import_module", missing)
    with pytest.raises(ModuleNotFoundError, match=r"interplab-transcoders-gemma-3-270m.*not installed"):
        ilab.circuits.embedded_clt()


@pytest.mark.embedded
def test_the_embedded_clt_replaces_the_mlps_on_held_out_text(embedded):
    clt = ilab.circuits.embedded_clt()
    assert clt.n_layers == embedded.n_layers and clt.d_model == embedded.d_model
    texts = [d[:300].rsplit(" ", 1)[0] for d in default_corpus()[-2:]]  # held out: never trained on
    table = ilab.circuits.transcoder_quality(embedded, clt, texts, progress=False)
    evs = [row["explained_variance"] for row in table["layers"]]
    assert all(ev > EV_FLOOR for ev in evs) and sum(evs) / len(evs) > EV_MEAN_FLOOR, evs
    assert all(0 < row["l0"] <= clt.k for row in table["layers"])
    assert math.isfinite(table["ce_replacement"]) and table["ce_clean"] < table["ce_replacement"] < CE_BOUND


@pytest.mark.embedded
def test_the_notebooks_ablation_check_fails_with_random_features(embedded):
    """09b's claim: the IOI graph's top five CLT features move the logit difference further than each of five random
    fives (ratio 1; measured -2.0 against at most 1.25). The same check with random features of the graph in the
    top set's place fails, for every seed tried (measured: shifts of 0.1-0.25 against random ones up to 0.6-1.5)."""
    prompt = "When Mary and John went to the store, John gave a drink to"
    clt = ilab.circuits.embedded_clt()
    graph = ilab.circuits.attribute(embedded, clt, prompt, max_feature_nodes=48, batch_size=16, progress=False)
    top = ilab.circuits.ablation_control(embedded, clt, graph, " Mary", " John", n=5, n_random=5, ratio=1.0)
    assert top.passes, (top.top_shift, top.random_shifts)
    for seed in (11, 12, 13):
        stand_in = ilab.circuits.random_features(graph, 5, seed=seed, exclude=top.features)
        res = ilab.circuits.ablation_control(
            embedded, clt, graph, " Mary", " John", features=stand_in, n_random=5, ratio=1.0
        )
        assert not res.passes, (seed, res.top_shift, res.random_shifts)
