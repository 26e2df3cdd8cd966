"""Automatic explanations kept with feature data: a hand label wins and is marked, scores sit beside their
baselines, the search finds a latent by its explanation, and they survive a save (a bad saved record is refused)."""

from __future__ import annotations

import json

import pytest
from interplab.core.autointerp.explain import Explanations
from interplab.core.autointerp.scoring import scores_table
from interplab.core.features.explanations import shown_label
from interplab.core.storage.readers import FileError

import interplab as ilab
from tests.widgets.test_dashboard import hand_feature_data


def explained_and_scored():
    texts = {0: "zebra crossings", 1: "the word tok1", 2: "small numbers"}
    explained = Explanations(texts, {i: "prompt" for i in texts}, "tiny explainer", "default")
    rows = [
        {
            "latent": i,
            "scorer": "detection",
            "metric": metric,
            "explanation": 0.9 - 0.1 * i,
            "shuffled": 0.5,
            "constant": 0.5,
            "shuffled_from": (i + 1) % 3,
        }
        for i in texts
        for metric in ("auroc", "balanced_accuracy")
    ]
    rows[-2]["explanation"] = float("nan")  # latent 2's AUROC undefined
    return explained, scores_table(rows, "tiny scorer")


def test_a_hand_label_wins_over_the_explanation_and_is_marked():
    data = hand_feature_data()
    explained, scores = explained_and_scored()
    data.set_explanations(explained, scores)
    data.set_label(1, "my own name", save=False)
    assert shown_label(data.labels, data.explanations, 0) == ("zebra crossings", "auto")
    assert shown_label(data.labels, data.explanations, 1) == ("my own name", "hand")
    assert shown_label(data.labels, data.explanations, 5) == ("", "")
    card = data.latent(0)
    assert card["explanation"]["score"] == pytest.approx(0.9) and card["explanation"]["shuffled"] == 0.5
    assert card["explanation"]["explainer"] == "tiny explainer" and card["shown_label"][1] == "auto"
    assert data.explanations[2]["score"] is None  # undefined, not a number
    table = data.table()
    assert table.loc[0, "explanation"] == "zebra crossings" and table.loc[0, "explanation_score"] == pytest.approx(0.9)
    assert table.loc[1, "label"] == "my own name" and table.loc[1, "explanation"] == "the word tok1"


def test_the_search_finds_a_latent_by_its_explanation():
    data = hand_feature_data()
    assert ilab.features.search_latents(data, "zebra").tolist() == []  # control: not before
    data.set_explanations(*explained_and_scored())
    assert ilab.features.search_latents(data, "ZEBRA").tolist() == [0]


def test_explanations_survive_a_save_and_a_bad_record_is_refused(tmp_path):
    data = hand_feature_data()
    data.set_explanations(*explained_and_scored())
    back = ilab.FeatureData.load(data.save(tmp_path / "fd"))
    assert back.explanations == data.explanations
    meta = json.loads((tmp_path / "fd" / "meta.json").read_text())
    meta["explanations"]["0"]["score"] = "high"
    (tmp_path / "fd" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(FileError, match=r"explanations\['0'\]\.score is 'high', not a finite number"):
        ilab.FeatureData.load(tmp_path / "fd")


def test_scores_of_another_scorer_are_refused_naming_those_held():
    data = hand_feature_data()
    with pytest.raises(ValueError, match=r"no fuzzing auroc; they hold \[\('detection', 'auroc'\)"):
        data.set_explanations(*explained_and_scored(), scorer="fuzzing")
    assert data.explanations == {}
