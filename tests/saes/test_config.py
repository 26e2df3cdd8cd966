"""What every SAE config is checked for, whatever its architecture (core/saes/config.py ``check_config``)."""

from __future__ import annotations

import pytest
from interplab.core.saes.config import SAEConfig, check_config

SOUND = {
    "an SAE": {"arch": "topk", "d_in": 8, "d_sae": 16, "k": 2, "site": "blocks.0.hook_resid_post"},
    "a transcoder": {"arch": "standard", "d_in": 8, "d_sae": 16, "site": "blocks.0.hook_mlp_in", "d_out": 6,
                     "site_out": "blocks.0.hook_mlp_out", "skip": True, "apply_b_dec_to_input": False},
}  # fmt: skip


@pytest.mark.parametrize("fields", SOUND.values(), ids=SOUND.keys())
def test_a_sound_config_passes_and_round_trips_as_a_dict(fields):
    cfg = SAEConfig(**fields)
    assert check_config(cfg) is None
    assert SAEConfig(**cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"d_sae": 0}, ValueError, r"width must be a positive integer, got 0"),
        ({"d_in": -1}, ValueError, r"d_in must be a positive integer, got -1"),
        ({"l1_coefficient": -0.5}, ValueError, r"l1_coefficient must be a finite number >= 0, got -0\.5"),
        ({"bandwidth": 0.0}, ValueError, r"bandwidth must be a positive number, got 0\.0"),
        ({"apply_b_dec_to_input": 1}, TypeError, r"apply_b_dec_to_input must be True or False, got 1"),
        ({"site": 3}, TypeError, r"site must be a string, got 3"),
        ({"skip": True}, ValueError, r"skip=True is for transcoders: give site_out="),
        ({"site_out": "blocks.0.hook_mlp_out"}, ValueError, r"apply_b_dec_to_input must be False"),
    ],
)
def test_an_impossible_config_is_refused_naming_the_value(changes, error, match):
    fields = {"arch": "standard", "d_in": 8, "d_sae": 16, **changes}
    with pytest.raises(error, match=match):
        check_config(SAEConfig(**fields))
