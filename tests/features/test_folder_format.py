"""Feature data's saved folder: every field and array checked when loaded, each refusal naming the file and field."""

from __future__ import annotations

import json

import numpy as np
import pytest
from interplab.core.features import FeatureData, feature_data
from interplab.core.storage.readers import FileError

from tests.tiny import tiny_model


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPLAB_CACHE", str(tmp_path / "cache"))


def test_tampered_feature_data_files_are_named_with_their_field(tmp_path):
    from tests.contracts.test_crash_safety import CORPUS, FEATURES, _sae

    gpt2 = tiny_model("gpt2")
    data = feature_data(_sae(), gpt2, CORPUS[:6], **FEATURES)
    data.save(tmp_path / "dash")
    np.save(tmp_path / "dash" / "top_max.npy", np.zeros((24, 9), np.float32))
    with pytest.raises(FileError, match=r"top_max\.npy': top_max has shape \[24, 9\], expected \[24, 3\]"):
        FeatureData.load(tmp_path / "dash")
    data.save(tmp_path / "dash2")
    meta2 = json.loads((tmp_path / "dash2" / "meta.json").read_text())
    (tmp_path / "dash2" / "meta.json").write_text(json.dumps({**meta2, "d_sae": "24"}))
    with pytest.raises(FileError, match=r"meta\.json': d_sae must be an integer, got str '24'"):
        FeatureData.load(tmp_path / "dash2")


@pytest.fixture(scope="module")
def saved_dashboard(tmp_path_factory):
    from tests.contracts.test_crash_safety import CORPUS, FEATURES, _sae

    folder = tmp_path_factory.mktemp("dash") / "dash"
    feature_data(_sae(), tiny_model("gpt2"), CORPUS[:6], **FEATURES).save(folder)
    return folder


@pytest.mark.parametrize(("name", "edit", "match"), [
    ("neighbour_ids", lambda a: a.flat.__setitem__(0, 10**9), r"neighbour_ids holds 1000000000 at \[0, 0\]: must be in "
                                                               r"0\.\.23 \(d_sae 24\)"),
    ("top_tokens", lambda a: a.flat.__setitem__(0, 2**31 - 1), r"top_tokens holds token 2147483647 at \[0, 0, 0\], "
                                                               "which meta.json's token_strings does not name"),
    ("logit_top_ids", lambda a: a.flat.__setitem__(0, -7), r"logit_top_ids holds -7 at \[0, 0\]"),
    ("max_act", lambda a: a.flat.__setitem__(0, np.nan), r"max_act holds nan at \[0\]: must be finite"),
    ("density", lambda a: a.flat.__setitem__(0, 2.0), r"density holds 2 at \[0\]"),
])  # fmt: skip
def test_dashboard_arrays_are_range_checked_against_the_sae(saved_dashboard, tmp_path, name, edit, match):
    import shutil

    folder = shutil.copytree(saved_dashboard, tmp_path / "dash")
    array = np.load(folder / f"{name}.npy")
    edit(array)
    np.save(folder / f"{name}.npy", array)
    with pytest.raises(FileError, match=match):
        FeatureData.load(folder)


def test_a_label_in_meta_json_is_capped_like_labels_json(saved_dashboard, tmp_path):
    import shutil

    folder = shutil.copytree(saved_dashboard, tmp_path / "dash")
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "labels": {"1": "x" * 5_000_000}}))
    with pytest.raises(FileError, match=r"meta\.json': labels\[1\] is a label of 5000000 characters \(at most 2000\)"):
        FeatureData.load(folder)
