"""data.to_neuronpedia against SAEDashboard's Neuronpedia batch layout: the committed fixture is this export read
and written back by SAEDashboard 0.8.0's own NeuronpediaDashboardBatch (tests/reference/build_sae_dashboard.sh),
so an export equal to it has every key SAEDashboard writes and none it refuses. The round trip reruns live when
the reference environment .ref/sae_dashboard exists."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from interplab.core.features.neuronpedia import layer_of

from tests.features.test_explanations import explained_and_scored
from tests.widgets.test_dashboard import hand_feature_data

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "reference" / "neuronpedia_batch.json"
REF_PYTHON = REPO / ".ref" / "sae_dashboard" / "bin" / "python"


def exported(folder) -> list[Path]:
    """The export the fixture was made from: hand-made feature data with explanations, 4 latents a batch."""
    data = hand_feature_data()
    data.set_explanations(*explained_and_scored())
    return data.to_neuronpedia(folder, model_id="tiny-model", sae_set="res-tiny", dataset="hand", batch_size=4)


def test_the_export_has_the_layout_sae_dashboard_writes(tmp_path):
    files = exported(tmp_path / "np")
    assert [f.name for f in files] == ["batch-0.json", "batch-1.json", "batch-2.json", "explanations.json"]
    batch = json.loads(files[0].read_text())
    assert batch == json.loads(FIXTURE.read_text())
    feature = batch["features"][0]
    assert batch["model_id"] == "tiny-model" and batch["layer"] == 0 and batch["sae_set"] == "res-tiny"
    assert feature["activations"][0]["bin_min"] == -1 and feature["activations"][0]["values"]
    if REF_PYTHON.exists():  # the round trip through SAEDashboard's classes, live
        out = tmp_path / "roundtrip.json"
        subprocess.run([str(REF_PYTHON), str(REPO / "tests/reference/sae_dashboard_batch.py"), str(files[0]), str(out)],
                       check=True)  # fmt: skip
        assert json.loads(out.read_text()) == batch


def test_explanations_go_with_their_scores(tmp_path):
    rows = json.loads(exported(tmp_path / "np")[-1].read_text())
    assert [r["index"] for r in rows] == ["0", "1", "2"]
    assert rows[0]["description"] == "zebra crossings" and rows[0]["layer"] == "0-res-tiny"
    assert rows[0]["scores"] == [{"scorer": "detection", "metric": "auroc", "value": pytest.approx(0.9),
                                  "shuffled": 0.5, "constant": 0.5}]  # fmt: skip


def test_names_and_layers(tmp_path):
    assert layer_of("blocks.6.hook_resid_post") == 6 and layer_of("model.layers.12.mlp") == 12
    with pytest.raises(ValueError, match=r"sae_set='\.\./up' must be a name"):
        hand_feature_data().to_neuronpedia(tmp_path, sae_set="../up")
    assert not any(tmp_path.iterdir())
