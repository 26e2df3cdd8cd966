"""Where labels live (core/features/labels.py): beside the SAE, in the cache by its fingerprint, or in a
dashboard's folder; never where a loaded file says.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from interplab.core.features import FeatureData, feature_data
from interplab.core.saes import SAE, load_sae
from interplab.core.storage.readers import FileError

import interplab as ilab
from tests.contracts.test_crash_safety import CORPUS, FEATURES, SITE, _sae

pytestmark = pytest.mark.usefixtures("isolated_cache")


def test_a_tampered_dashboard_folder_writes_and_reads_only_inside_it(gpt2, tmp_path):
    data = feature_data(_sae(), gpt2, CORPUS[:6], **FEATURES)
    folder = tmp_path / "shared-dashboard"
    data.save(folder)
    victim = tmp_path / "victim.json"  # any file the user can write (~/.bashrc, a notebook, ...)
    victim.write_text(json.dumps({"1": "read from outside the folder"}))
    before = victim.read_bytes()
    meta = json.loads((folder / "meta.json").read_text())
    meta["labels_path"] = str(victim)  # what a tampered folder says
    meta["labels_file"] = "../victim.json"
    (folder / "meta.json").write_text(json.dumps(meta))

    loaded = FeatureData.load(folder)
    assert loaded.labels.get(1) != "read from outside the folder"
    loaded.set_label(3, "written by the dashboard")
    dash = ilab.widgets.FeatureDashboard(loaded, n_cards=2)
    dash.set_label(4, "from the widget")
    assert victim.read_bytes() == before, "the tampered path was followed"
    assert Path(loaded.labels_path) == folder / "labels.json"
    assert json.loads((folder / "labels.json").read_text()) == {"3": "written by the dashboard",
                                                                 "4": "from the widget"}  # fmt: skip
    assert FeatureData.load(folder).labels == {3: "written by the dashboard", 4: "from the widget"}
    # a labels file inside the folder that is not labels is refused, naming the file and the entry
    (folder / "labels.json").write_text(json.dumps({"5": ["not", "a", "string"]}))
    with pytest.raises(FileError, match=r"labels\.json': \['5'\] must be a string"):
        FeatureData.load(folder)


def test_labels_follow_the_sae_the_dashboard_was_made_from(gpt2, tmp_path):
    sae = _sae()
    sae.save(tmp_path / "my_sae")
    sae = load_sae(tmp_path / "my_sae")
    data = feature_data(sae, gpt2, CORPUS[:6], **FEATURES)
    data.save(tmp_path / "dash")
    dash = ilab.widgets.FeatureDashboard(FeatureData.load(tmp_path / "dash", sae=sae), sae=sae, n_cards=2)
    dash.set_label(2, "beside the SAE")
    assert json.loads((tmp_path / "my_sae" / "labels.json").read_text()) == {"2": "beside the SAE"}
    other = SAE.create("topk", d_in=32, d_sae=24, k=4, site=SITE)
    with pytest.raises(ValueError, match=r"made from SAE [0-9a-f]{16}, not from this one"):
        FeatureData.load(tmp_path / "dash", sae=other)
